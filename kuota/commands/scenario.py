"""`kuota scenario FILE`: run the queue manager and the engine on a scenario file, print the outcome."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from sim.scenario import ScenarioError, load_scenario_text, run_scenario


class Format(StrEnum):
    json = "json"
    table = "table"


def register(app: typer.Typer) -> None:
    app.command(name="scenario")(scenario)


def scenario(
    file: Annotated[Path, typer.Argument(help="A scenario file (../shared/spec/scenario.md).")],
    cycles: Annotated[int, typer.Option("--cycles", min=1, help="Scheduling cycles to run.")] = 1,
    until_idle: Annotated[bool, typer.Option("--until-idle", help="Run cycles until nothing changes.")] = False,
    output: Annotated[Format, typer.Option("--format", help="json (default) or table.")] = Format.json,
) -> None:
    """Run a scenario in memory (no cluster, no database) and print what kuota decides."""
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        _fail(f"{file}: cannot read the file: {exc.strerror}")
    try:
        loaded = load_scenario_text(text, source=str(file))
    except ScenarioError as exc:
        _fail(str(exc))
    outcome = run_scenario(loaded, cycles=cycles, until_idle=until_idle)
    if output is Format.json:
        sys.stdout.write(json.dumps(outcome, indent=2, sort_keys=False) + "\n")
    else:
        _print_table(loaded.name, outcome)


def _fail(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(2)


def _print_table(name: str, outcome: dict[str, Any]) -> None:
    table = Table(title=f"{name or 'scenario'} — after {outcome['cycles']} cycle(s)")
    placed = any("placement" in entry for entry in outcome["workloads"].values())
    columns = ("workload", "state", "flavors", "counts", *(("placement",) if placed else ()), "details")
    for column in columns:
        table.add_column(column)
    for workload, entry in outcome["workloads"].items():
        flavors = "; ".join(
            f"{ps}: " + ", ".join(f"{r}={f}" for r, f in res.items()) for ps, res in entry.get("flavors", {}).items()
        )
        counts = ", ".join(f"{ps}={n}" for ps, n in entry.get("counts", {}).items())
        if entry["state"] == "preempted":
            details = f"{entry['reason']} by {entry['by']}"
        elif entry["state"] == "pending":
            details = ("parked: " if entry["inadmissible"] else "") + entry["message"]
        else:
            details = "new" if entry.get("new") else ""
        where = (_placement_text(entry.get("placement", {})),) if placed else ()
        table.add_row(workload, entry["state"], flavors, counts, *where, details)
    Console().print(table)


def _placement_text(placement: dict[str, Any]) -> str:
    """Per pod set: its domain when one holds it, and its pods per node (`main: rack=rack-001; node-004×1 ...`)."""
    parts = []
    for pod_set, where in placement.items():
        domain = ", ".join(f"{level.rpartition('/')[2]}={value}" for level, value in where.get("domain", {}).items())
        nodes = " ".join(f"{node}×{pods}" for node, pods in where.get("nodes", {}).items())
        parts.append(f"{pod_set}: {domain + '; ' if domain else ''}{nodes}")
    return "; ".join(parts)
