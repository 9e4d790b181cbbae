"""The budget table of `kuota simulate` and `kuota whatif`: every budget in every window a replay overlapped,
spent and remaining in resource-hours (exact to the thousandth, as `kuota usage --budgets` shows them) and when
it was first found spent.

Rows are `quota.budgets.WindowSpending.as_dict()` values; whatif's carry a `run` (now/new) as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: (title, key, shown in 80 columns): the narrow table keeps owner, window, run, spent, remaining and when.
COLUMNS = [
    ("team", "owner", True),
    ("scope", "scope", False),
    ("resource", "resource", False),
    ("window", "label", True),
    ("from", "start", False),
    ("to", "end", False),
    ("run", "run", True),
    ("budget h", "budget_hours", False),
    ("spent h", "spent_hours", True),
    ("left h", "remaining_hours", True),
    ("exhausted", "exhausted_at", True),
]


def budget_table(title: str, rows: Sequence[Mapping[str, Any]], *, wide: bool = False) -> Any:
    """A rich Table of the rows; the 80-column form names the window with a short resource name (`gpu`) and the
    time it was exhausted to the minute, the wide one shows every field."""
    from rich.table import Table

    has_run = any("run" in row for row in rows)
    columns = [(t, k) for t, k, narrow in COLUMNS if (wide or narrow) and (k != "run" or has_run)]
    table = Table(title=title)
    for heading, key in columns:
        numeric = key.endswith("_hours")
        table.add_column(heading, justify="right" if numeric else "left", overflow="fold", no_wrap=key == "run")
    previous = None
    for row in rows:
        cells = []
        for _, key in columns:
            if key == "owner":
                owner = f"{row['owner']}{' (cohort)' if row['scope'] == 'cohort' and not wide else ''}"
                cells.append(owner if owner != previous else "")
                previous = owner
            else:
                cells.append(_cell(row, key, wide))
        table.add_row(*cells)
    return table


def _cell(row: Mapping[str, Any], key: str, wide: bool) -> str:
    value = row.get(key)
    if key == "exhausted_at":
        if value is None:
            return "—"
        return str(value) if wide else f"{str(value)[5:10]} {str(value)[11:16]}"
    if key == "label" and not wide:
        return f"{value} {str(row['resource']).rsplit('/', 1)[-1]}"
    return "" if value is None else str(value)


def whatif_rows(budgets: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]) -> list[dict[str, Any]]:
    """whatif's `budgets` (owner → baseline and proposal windows) as rows, each window's now row above its new
    one; a window one file has and the other has not stands alone."""
    out: list[dict[str, Any]] = []
    for sides in budgets.values():
        keyed: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for side, label in (("baseline", "now"), ("proposal", "new")):
            for row in sides[side]:
                key = (row["scope"], row["resource"], row["window"], row["start"])
                keyed.setdefault(key, []).append({**row, "run": label})
        for pair in keyed.values():
            out.extend(pair)
    return out
