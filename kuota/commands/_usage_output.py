"""How resource-hours are shown, whether read from the ledger (`kuota usage`) or through the admin API
(`kuota report`): one table, one CSV, one JSON shape, so that a script written against one reads the other."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import typer
from rich.console import Console
from rich.table import Table

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
