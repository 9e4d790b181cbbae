"""What the client commands share: the server and token options, HTTP calls to the admin API, output and errors.

Standard library only (urllib), so `kuota --help` and the client commands start fast.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Annotated, Any, NoReturn

import typer

ServerOption = Annotated[
    str | None,
    typer.Option("--server", envvar="KUOTA_SERVER", help="Admin API URL, e.g. http://kuota-admin.kuota-system:8080"),
]
TokenOption = Annotated[str | None, typer.Option("--token", envvar="KUOTA_TOKEN", help="Bearer token.")]
InsecureOption = Annotated[bool, typer.Option("--insecure", help="Do not verify the server's TLS certificate.")]
OutputOption = Annotated[
    str, typer.Option("-o", "--output", help="table (fits 80 columns), wide (every column) or json.")
]


def fail(message: str, code: int = 2) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


def call(
    server: str | None,
    token: str | None,
    method: str,
    path: str,
    query: dict[str, Any] | None = None,
    body: Any = None,
    insecure: bool = False,
    raw: bool = False,
) -> Any:
    if not server:
        fail("no server: pass --server URL or set KUOTA_SERVER")
    if not token:
        fail("no token: pass --token or set KUOTA_TOKEN")
    params = {k: v for k, v in (query or {}).items() if v is not None}
    url = server.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Authorization": f"Bearer {token}"})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    context = ssl._create_unverified_context() if insecure else None
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.reason
        with contextlib.suppress(ValueError, AttributeError):
            detail = json.loads(exc.read()).get("detail") or detail
        # The caller's mistakes (unknown workload, bad input, no permission) are exit 2; the server's are 1.
        fail(f"{exc.code}: {detail}", code=2 if exc.code in (400, 404, 409, 413, 422) else 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        fail(f"cannot reach {server}: {getattr(exc, 'reason', exc)}", code=1)
    if raw:
        return payload.decode()
    return json.loads(payload)


def workload_path(name: str) -> str:
    """The API path of a workload typed as KIND/NAMESPACE/NAME, NAMESPACE/NAME (the server takes it as a Job when no
    workload has that very name) or NAME (simulated)."""
    parts = name.split("/")
    if not all(parts) or len(parts) > 3:
        fail(f"{name!r} is not a workload name (KIND/NAMESPACE/NAME, or NAMESPACE/NAME for a Job)")
    if len(parts) == 1:
        parts = ["_", *parts]
    quote = urllib.parse.quote
    return "/api/v1/workloads/" + "/".join(quote(part, safe="") for part in parts)


def output_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def check_output(output: str) -> None:
    if output not in ("table", "wide", "json"):
        fail(f"-o takes table, wide or json, not {output!r}")


def table(
    title: str, columns: list[str], rows: list[list[Any]], *, output: str = "table", wide: Sequence[str] = ()
) -> None:
    """A table that fits the terminal (80 columns when stdout is not one): the `wide` columns only with -o wide,
    and long cells wrapped rather than cut."""
    from rich.console import Console
    from rich.table import Table

    shown = [i for i, column in enumerate(columns) if output == "wide" or column not in wide]
    grid = Table(title=title)
    for i in shown:
        grid.add_column(columns[i], overflow="fold")
    for row in rows:
        grid.add_row(*["" if row[i] is None else str(row[i]) for i in shown])
    Console().print(grid)
