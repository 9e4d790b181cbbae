"""`kuota workloads`, `kuota why`, `kuota hold|release|preempt`: workloads through the admin API."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

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
    app.command("why", help="Why a workload waits: its state, position, the scheduler's reason and when it may start.")(
        why
    )
    for action in ("hold", "release", "preempt"):
        app.command(action, help=f"{action.capitalize()} a workload (audited with your token's name).")(
            _action_command(action)
        )


def workloads(
    team: Annotated[str | None, typer.Option("--team")] = None,
    queue: Annotated[str | None, typer.Option("--queue")] = None,
    state: Annotated[str | None, typer.Option("--state", help="pending, admitted, evicting")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="Only this job kind (Job, JobSet, ...).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0)] = 0,
    server: ServerOption = None,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    output: OutputOption = "table",
) -> None:
    check_output(output)
    query: dict[str, str | int | None] = {"team": team, "queue": queue, "state": state, "namespace": namespace}
    query |= {"kind": kind, "limit": limit, "offset": offset}
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
        output=output,
        wide=("team", "queue", "priority"),
    )


def why(
    workload: Annotated[str, typer.Argument(help="KIND/NAMESPACE/NAME, or NAMESPACE/NAME for a Job")],
    server: ServerOption = None,
    token: TokenOption = None,
    insecure: InsecureOption = False,
    output: OutputOption = "table",
) -> None:
    check_output(output)
    data = call(server, token, "GET", workload_path(workload), {"estimate": "true"}, insecure=insecure)
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
        if data.get("estimate") is not None:
            for line in estimate_lines(data["estimate"]):
                typer.echo(line)
    else:
        typer.echo(f"{workload} is {live['state']} (team {live['team']}).")
    for event in data["history"][-10:]:
        typer.echo(f"  {event['at']}  {event['kind']}")


def estimate_lines(estimate: dict[str, Any]) -> list[str]:
    """The estimate and its basis, one fact a line."""
    start = estimate["start_at"]
    if start is None:
        lines = [f"estimated start: unknown ({estimate['unknown']})"]
    else:
        lines = [f"estimated start: {_when(start)} (in {_span(estimate['start_in_s'])})"]
    runtime = estimate["runtime"] or "no basis"
    runtime_s = estimate["runtime_s"]
    lines.append(
        f"  ahead in its team: {estimate['ahead']} workload(s), {estimate['ahead_gpu_hours']} GPU-hours expected"
        + (
            f" ({estimate['ahead_without_runtime']} with no expected run time)"
            if estimate["ahead_without_runtime"]
            else ""
        )
    )
    lines.append(f"  its run time: {_span(runtime_s) + ', ' if runtime_s is not None else ''}{runtime}")
    heads = ", ".join(f"{h['workload']} ({h['team']}, {h['gpus']['value']} GPU)" for h in estimate["cohort_heads"])
    lines.append(f"  cohort {estimate['cohort']}: other teams' heads: {heads or 'none'}")
    lines.append(
        f"  running in the cohort: {estimate['running']} ({estimate['running_without_end']} with no expected end)"
        + ("; first to end:" if any(e["ends_at"] for e in estimate["next_ends"]) else "")
    )
    lines.extend(
        f"    {e['workload']} ({e['gpus']['value']} GPU) at {_when(e['ends_at'])}: {e['basis']}"
        for e in estimate["next_ends"]
        if e["ends_at"]
    )
    sim = estimate["simulation"]
    if sim is not None:
        stopped = f", stopped by {sim['stopped']}" if sim["stopped"] else ""
        lines.append(
            f"  simulated with the engine to {_when(sim['simulated_to'])}: {sim['events']} instants{stopped}, "
            f"run times from {sim['history_runs']} finished runs, {sim['wall_ms']} ms"
            + (" (same state, reused)" if sim["cached"] else "")
        )
    return lines


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _span(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} d {hours % 24} h"


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
