"""`kuota whatif --config NEW.yaml --from ISO --to ISO`: the ledger's workloads of a window replayed on the
simulated cluster under the quota file in force then and under a proposed one, per team side by side."""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from kuota.commands.migrate import DatabaseURLOption, database_url_or_exit, fail, shown
from kuota.commands.simulate import VictimOrder

HELP = (
    "Replay the workloads the ledger saw created in [--from, --to) under the quota file that was in force at --from "
    "(or --baseline FILE) and under --config, on the simulated cluster, and compare per team: mean and p95 wait, "
    "GPU-hours, borrowed GPU-hours, preemptions, lost GPU-hours, Jain's index, and budget spending per window. "
    "Times are ISO 8601 (UTC without an offset)."
)


class Output(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"


PARALLEL_FROM = 1000
"""From this many jobs on, the two replays run side by side in two processes (below it, starting one costs more)."""

#: Terminal columns: (title, key, scale). Whole seconds and GPU-hours keep 8 columns within 80; --json keeps
#: every digit (lost work in GPU-seconds there).
COLUMNS = [
    ("mean\nwait s", "mean_wait_s", 1.0),
    ("p95\nwait s", "p95_wait_s", 1.0),
    ("GPU-h", "gpu_hours", 1.0),
    ("borrowed\nGPU-h", "borrowed_gpu_hours", 1.0),
    ("preemp-\ntions", "preemptions", 1.0),
    ("lost\nGPU-h", "lost_gpu_seconds", 1 / 3600),
]


def register(app: typer.Typer) -> None:
    app.command("whatif", help=HELP)(whatif_command)


def whatif_command(
    config: Annotated[Path, typer.Option("--config", metavar="FILE", help="The proposed team-quota file.")],
    from_: Annotated[str, typer.Option("--from", metavar="ISO", help="Start of the window (inclusive).")],
    to: Annotated[str, typer.Option("--to", metavar="ISO", help="End of the window (exclusive).")],
    database_url: DatabaseURLOption = None,
    baseline: Annotated[
        Path | None,
        typer.Option("--baseline", metavar="FILE", help="Compare with this file, not the one the ledger records."),
    ] = None,
    hook_delay: Annotated[
        float,
        typer.Option("--hook-delay", min=0, help="Seconds a workload never asked to checkpoint takes to answer."),
    ] = 10.0,
    report: Annotated[Path | None, typer.Option("--report", metavar="DIR", help="Write DIR/report.html.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as one JSON object.")] = False,
    output: Annotated[
        Output,
        typer.Option(
            "-o",
            "--output",
            help="table (80 columns), wide (every budget column: scope, resource, window bounds, the budget, the "
            "exact time it was spent) or json (as --json).",
        ),
    ] = Output.table,
    victims: Annotated[
        VictimOrder,
        typer.Option(
            "--victims",
            help="Victims the spec's order leaves equal: most recent checkpoint first (checkpoint-aware), or by "
            "name (spec). The ledger does not record periodic checkpoints, so only spec replays a run of kuota "
            "simulate exactly.",
        ),
    ] = VictimOrder.checkpoint_aware,
) -> None:
    from sqlalchemy.exc import SQLAlchemyError

    from kuota.commands.usage import parse_time
    from sim.whatif import WhatIfError, whatif_from_ledger

    start, end = parse_time("--from", from_), parse_time("--to", to)
    if start >= end:
        fail(f"--from ({start.isoformat()}) must be before --to ({end.isoformat()})")
    proposal_text = _read(config, "--config")
    baseline_file = (_read(baseline, "--baseline"), str(baseline)) if baseline is not None else None
    url = database_url_or_exit(database_url)
    _check_sqlite_file(url)
    try:
        comparison = whatif_from_ledger(
            url,
            proposal_text,
            start,
            end,
            baseline=baseline_file,
            hook_delay_ms=int(hook_delay * 1000),
            proposal_source=str(config),
            parallel_from=PARALLEL_FROM if (os.cpu_count() or 1) > 1 else None,
            aware=victims is VictimOrder.checkpoint_aware,
        )
    except WhatIfError as exc:
        fail(str(exc))
    except (SQLAlchemyError, OSError) as exc:
        reason = str(getattr(exc, "orig", None) or exc)
        no_schema = "no such table" in reason or ("relation" in reason and "does not exist" in reason)
        hint = " (run `kuota migrate` first)" if no_schema else ""
        fail(f"cannot read the ledger at {shown(url)}{hint}: {reason}", code=1)
    data = comparison.as_dict()
    if report is not None:
        sys.stderr.write(f"report: {_write_report(comparison, report)}\n")
    if as_json or output is Output.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        print_comparison(data, wide=output is Output.wide)


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{option}: cannot read {path}: {exc}")


def _check_sqlite_file(url: str) -> None:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    name = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if name and name != ":memory:" and not Path(name).exists():
        fail(f"there is no ledger at {name}: pass --database-url", code=1)


def print_comparison(data: dict[str, Any], *, wide: bool = False) -> None:
    """Two rows per team (now: the baseline, new: the proposal), 80 columns wide; totals below; then, when either
    file has budgets, each budget window's spending under both (every column with `wide`)."""
    from rich.console import Console
    from rich.table import Table

    from sim.whatif import team_rows

    table = Table(title=f"kuota whatif — {data['from']} → {data['to']}")
    table.add_column("team", overflow="fold")
    table.add_column("run", no_wrap=True)
    for title, _, _ in COLUMNS:
        table.add_column(title, justify="right", overflow="fold")
    previous = None
    for row in team_rows(data):
        name = row["team"] if row["team"] != previous else ""
        previous = row["team"]
        table.add_row(str(name), str(row["run"]), *(_cell(row[key], scale) for _, key, scale in COLUMNS))
    console = Console()
    console.print(table)
    base, new = data["baseline"], data["proposal"]
    console.print(f"now: {base['source']}", overflow="fold")
    console.print(f"new: {new['source']}", overflow="fold")
    console.print(
        f"Jain's index now {base['jain_fairness']:.3f}, new {new['jain_fairness']:.3f}; "
        f"utilization now {base['utilization']:.1%}, new {new['utilization']:.1%}"
    )
    line = f"{data['replayed']} of {data['workloads']} workloads replayed"
    if data["estimated_run_time"]:
        line += f", {data['estimated_run_time']} with a median run time (unfinished)"
    console.print(line)
    for label, reasons in (("left out", data["left_out"]), ("now left out", base["left_out"])):
        for reason, count in reasons.items():
            console.print(f"{label}: {count} ({reason})")
    for reason, count in new["left_out"].items():
        console.print(f"new left out: {count} ({reason})")
    budgets = data.get("budgets") or {}
    if budgets:
        from kuota.commands._budget_output import budget_table, whatif_rows

        console.print(budget_table("budgets (resource-hours)", whatif_rows(budgets), wide=wide))


def _cell(value: Any, scale: float) -> str:
    """A figure rounded to a whole number for the table (values below 10 keep one decimal)."""
    if value is None:
        return "—"
    number = float(value) * scale
    if abs(number) < 10 and number != int(number):
        return f"{number:.1f}"
    return f"{round(number):,}"


def _write_report(comparison: Any, directory: Path) -> Path:
    from sim.report import write_comparison
    from sim.whatif import team_rows

    baseline, proposal = comparison.baseline.report, comparison.proposal.report
    title = f"kuota whatif — {comparison.start.isoformat()} → {comparison.end.isoformat()}"
    return write_comparison(title, team_rows(comparison.as_dict()), baseline, proposal, directory)
