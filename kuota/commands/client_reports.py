"""`kuota queues`, `kuota credits`, `kuota report`: queues, fair-share credits and usage through the admin API.

(`kuota usage` reads the ledger directly; `kuota report` asks a running server.)
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated

import typer

from kuota.commands._client import (
    InsecureOption,
    OutputOption,
    ServerOption,
    TokenOption,
    call,
    check_output,
    fail,
    output_json,
    table,
)
from kuota.commands._usage_output import FORMATS, UsageLine, write_usage


def register(app: typer.Typer) -> None:
    app.command("queues", help="Pending workloads per team, in admission order, with the reason each waits.")(queues)
    app.command("credits", help="Fair-share credits per team (share S, usage U, factor F, credit S-U).")(credits)
    app.command("report", help="Usage report from a running server's ledger (--from, --to, --by).")(report)


def queues(
    team: Annotated[str | None, typer.Option("--team")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 20,
    server: ServerOption = None,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    output: OutputOption = "table",
) -> None:
    check_output(output)
    path = f"/api/v1/queues/{team}" if team else "/api/v1/queues"
    data = call(server, token, "GET", path, {"limit": limit}, insecure=insecure)
    teams = [data] if team else data["teams"]
    if output == "json":
        output_json(data)
        return
    rows = [
        [
            q["team"],
            w["position_in_team"],
            w["position_in_queue"],
            w["name"],
            w["queue"],
            w["priority"],
            w["status"],
            w["reason"] or "",
        ]
        for q in teams
        for w in q["workloads"]
    ]
    columns = ["team", "#team", "#queue", "workload", "queue", "priority", "status", "reason"]
    table("pending", columns, rows, output=output, wide=("#queue", "queue", "priority"))


def credits(
    server: ServerOption = None,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    output: OutputOption = "table",
) -> None:
    check_output(output)
    data = call(server, token, "GET", "/api/v1/credits", insecure=insecure)
    if output == "json":
        output_json(data)
        return
    rows = [
        [c["team"], _short(c["share"]), _short(c["usage_share"]), _short(c["factor"]), _short(c["credit"])]
        for c in data["teams"]
    ]
    table("fair-share credits", ["team", "share S", "usage U", "factor F", "credit S-U"], rows, output=output)


def _short(value: str) -> str:
    return f"{float(value):.4f}"


def report(
    from_: Annotated[str, typer.Option("--from", metavar="ISO", help="Start (inclusive), ISO 8601.")],
    to: Annotated[str, typer.Option("--to", metavar="ISO", help="End (exclusive).")],
    by: Annotated[str, typer.Option("--by", help="team, flavor, kind or day")] = "team",
    resource: Annotated[str | None, typer.Option("--resource")] = None,
    server: ServerOption = None,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    output: Annotated[str, typer.Option("-o", "--output", help="table, json or csv.")] = "table",
) -> None:
    if output not in FORMATS:
        fail(f"-o takes {', '.join(FORMATS)}, not {output!r}")
    if by not in ("team", "flavor", "kind", "day"):
        fail(f"--by takes team, flavor, kind or day, not {by!r}")
    query = {"from": from_, "to": to, "by": by, "resource": resource}
    data = call(server, token, "GET", "/api/v1/reports/usage", query, insecure=insecure)
    lines = [UsageLine(r["key"], r["resource"], Decimal(r["hours"]), Decimal(r["milli_seconds"])) for r in data["rows"]]
    # Shown exactly as `kuota usage` shows what it reads from the ledger itself.
    start, end = datetime.fromisoformat(data["start"]), datetime.fromisoformat(data["end"])
    write_usage(lines, by=by, output=output, start=start, end=end, resource=resource)
