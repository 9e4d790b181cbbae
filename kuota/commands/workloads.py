"""`kuota workloads`, `kuota why`, `kuota hold|release|preempt`: workloads through the admin API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from kuota.commands._client import (
    InsecureOption,
    OutputOption,
    ServerOption,
    TokenOption,
    call,
    check_output,
    output_json,
    table,
    workload_path,
)


def register(app: typer.Typer) -> None:
    app.command("workloads", help="List workloads (filters: --team, --queue, --state, --namespace).")(workloads)
    app.command("why", help="Why a workload waits: its state, position and the scheduler's reason.")(why)
    for action in ("hold", "release", "preempt"):
        app.command(action, help=f"{action.capitalize()} a workload (audited with your token's name).")(
            _action_command(action)
        )


def workloads(
    team: Annotated[str | None, typer.Option("--team")] = None,
    queue: Annotated[str | None, typer.Option("--queue")] = None,
    state: Annotated[str | None, typer.Option("--state", help="pending, admitted, evicting")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0)] = 0,
    server: ServerOption = None,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    output: OutputOption = "table",
) -> None:
    check_output(output)
    query = {"team": team, "queue": queue, "state": state, "namespace": namespace, "limit": limit, "offset": offset}
    data = call(server, token, "GET", "/api/v1/workloads", query, insecure=insecure)
    if output == "json":
        output_json(data)
        return
    rows = [
        [
            w["name"],
            w["team"],
            w["queue"],
            w["priority"],
            w["state"],
            w["status"] or "",
            w["position_in_team"] or "",
            w["reason"] or "",
        ]
        for w in data["items"]
    ]
    table(
        f"workloads ({len(rows)} of {data['total']})",
        ["workload", "team", "queue", "priority", "state", "status", "#team", "reason"],
        rows,
    )


def why(
    workload: Annotated[str, typer.Argument(help="KIND/NAMESPACE/NAME, or NAMESPACE/NAME for a Job")],
    server: ServerOption = None,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    output: OutputOption = "table",
) -> None:
    check_output(output)
    data = call(server, token, "GET", workload_path(workload), insecure=insecure)
    if output == "json":
        output_json(data)
        return
    live = data["workload"]
    if live is None:
        typer.echo(f"{workload} is no longer live (finished); its history is in the ledger:")
    elif live["state"] == "pending":
        typer.echo(
            f"{workload} is pending ({live['status']}), position {live['position_in_team']} in team "
            f"{live['team']}, {live['position_in_queue']} in queue {live['queue']}."
        )
        typer.echo(f"reason: {live['reason'] or 'not looked at yet'}")
    else:
        typer.echo(f"{workload} is {live['state']} (team {live['team']}).")
    for event in data["history"][-10:]:
        typer.echo(f"  {event['at']}  {event['kind']}")


def _action_command(action: str) -> Callable[..., None]:
    """The command for one action; typer reads its parameters from the signature."""

    def command(
        workload: Annotated[str, typer.Argument(help="KIND/NAMESPACE/NAME, or NAMESPACE/NAME for a Job")],
        reason: Annotated[str | None, typer.Option("--reason", help="Recorded in the audit log.")] = None,
        server: ServerOption = None,
        token: TokenOption = None,
        insecure: InsecureOption = False,
        output: OutputOption = "table",
    ) -> None:
        check_output(output)
        body = {"reason": reason} if reason else {}
        data = call(server, token, "POST", f"{workload_path(workload)}/{action}", body=body, insecure=insecure)
        if output == "json":
            output_json(data)
            return
        typer.echo(
            f"{action}: {data['workload']} {data['before']['state']} → {data['after']['state']}"
            f"{' (held)' if data['after'].get('held') else ''}"
        )

    command.__name__ = action
    return command
