"""How resource-hours are shown, whether read from the ledger (`kuota usage`) or through the admin API
(`kuota report`): one table, one CSV, one JSON shape, so that a script written against one reads the other."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import typer
from rich.console import Console
from rich.table import Table

from quota.budgets import BudgetStatus, format_hours

GPU_RESOURCE = "nvidia.com/gpu"
FORMATS = ("table", "csv", "json")


@dataclass(frozen=True, slots=True)
class UsageLine:
    key: str
    """The team, flavor, kind or UTC day the line is about."""
    resource: str
    hours: Decimal
    milli_seconds: Decimal


def plain(amount: Decimal) -> str:
    """A decimal without exponent or trailing zeros: 3, 1.5, 0.000277777777778."""
    text = format(amount, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def as_dict(line: UsageLine, by: str) -> dict[str, str]:
    return {
        by: line.key,
        "resource": line.resource,
        "hours": plain(line.hours),
        "milli_seconds": plain(line.milli_seconds),
    }


def budget_dict(status: BudgetStatus) -> dict[str, object]:
    return {
        "owner": status.owner,
        "scope": "cohort" if status.cohort else "team",
        "resource": status.resource,
        "window": status.window,
        "start": _iso(status.start),
        "end": _iso(status.end) if status.end is not None else None,
        "limit_hours": format_hours(status.limit),
        "spent_hours": format_hours(status.spent),
        "remaining_hours": format_hours(status.remaining),
        "limit": str(status.limit),
        "spent": str(status.spent),
        "exhausted": status.exhausted,
        "on_exhausted": status.on_exhausted.value,
    }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_usage_and_budgets(
    lines: Sequence[UsageLine],
    found: Sequence[BudgetStatus],
    *,
    by: str,
    output: str,
    start: datetime,
    end: datetime,
    resource: str | None,
) -> None:
    """Usage, then budgets: JSON `{"usage": [...], "budgets": [...]}` (exact amounts as strings of
    milli-unit-milliseconds beside the hours), CSV the budgets' rows after a blank line, or a second table."""
    if output == "json":
        body = {"usage": [as_dict(line, by) for line in lines], "budgets": [budget_dict(s) for s in found]}
        typer.echo(json.dumps(body, indent=2))
        return
    write_usage(lines, by=by, output=output, start=start, end=end, resource=resource)
    if output == "csv":
        sys.stdout.write("\n")
        fields = list(budget_dict(found[0])) if found else ["owner"]
        writer = csv.DictWriter(sys.stdout, fieldnames=fields)
        writer.writeheader()
        writer.writerows(budget_dict(s) for s in found)
        return
    table = Table(title="Budgets")
    for column in ("OWNER", "RESOURCE", "WINDOW", "SPENT", "BUDGET", "LEFT", "STATE"):
        table.add_column(column, overflow="fold", justify="right" if column in ("SPENT", "BUDGET", "LEFT") else "left")
    for s in found:
        owner = f"{s.owner} (cohort)" if s.cohort else s.owner
        state = f"spent: {s.on_exhausted.value}" if s.exhausted else f"{s.spent * 100 // max(1, s.limit)} %"
        table.add_row(
            owner, s.resource, s.window, format_hours(s.spent), format_hours(s.limit), format_hours(s.remaining), state
        )
    if not found:
        table.caption = "the quota file has no budgets"
    Console().print(table)


def write_usage(
    lines: Sequence[UsageLine], *, by: str, output: str, start: datetime, end: datetime, resource: str | None
) -> None:
    """The lines as a table (hours to three decimals), or as CSV or JSON with every digit (decimal strings)."""
    if output == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=[by, "resource", "hours", "milli_seconds"])
        writer.writeheader()
        writer.writerows(as_dict(line, by) for line in lines)
    elif output == "json":
        typer.echo(json.dumps([as_dict(line, by) for line in lines], indent=2))
    else:
        unit = "GPU-hours" if resource == GPU_RESOURCE else "resource-hours"
        table = Table(title=f"Usage {start.isoformat()} → {end.isoformat()}")
        table.add_column(by.upper(), overflow="fold")
        table.add_column("RESOURCE", overflow="fold")
        table.add_column(unit.upper(), justify="right")
        for line in lines:
            table.add_row(line.key, line.resource, f"{line.hours:.3f}")
        if not lines:
            table.caption = "no usage recorded in this period"
        Console().print(table)
