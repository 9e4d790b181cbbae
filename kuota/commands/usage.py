"""`kuota usage --from ISO --to ISO [--by team|flavor|kind|day] [--resource R] [--budgets FILE] [-o table|csv|json]`:
resource-hours from the ledger, exact (intervals clipped to the period; running work counted up to now), and with
`--budgets` each budget of a quota file in its window as of --to (or now, if earlier)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from accounting.database import create_engine
from accounting.events import GPU_RESOURCE
from accounting.reports import UsageRow, usage_report
from accounting.spending import usage_since
from kuota.commands._usage_output import UsageLine, write_usage, write_usage_and_budgets
from kuota.commands.migrate import DatabaseURLOption, database_url_or_exit, fail, shown
from quota.budgets import BudgetStatus, history_start, statuses
from quota.config import QuotaConfig
from quota.loader import ConfigError, load_config_file
from quota.spending import SpendingBook

HELP = (
    "Resource-hours per team, flavor, kind of workload (Job, JobSet, ...) or UTC day in [--from, --to), from the "
    "ledger: GPU-hours for "
    f"{GPU_RESOURCE}. Times are ISO 8601 (2026-03-01 or 2026-03-01T08:00:00+02:00); without an offset they are "
    "UTC. Amounts are exact; csv and json carry them in full as decimal strings."
)


class By(StrEnum):
    team = "team"
    flavor = "flavor"
    kind = "kind"
    day = "day"


class Output(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("usage", help=HELP)(usage_command)


def usage_command(
    from_: Annotated[str, typer.Option("--from", metavar="ISO", help="Start of the period (inclusive).")],
    to: Annotated[str, typer.Option("--to", metavar="ISO", help="End of the period (exclusive).")],
    by: Annotated[By, typer.Option("--by", help="Group by team, flavor, kind or UTC day.")] = By.team,
    resource: Annotated[
        str | None, typer.Option("--resource", metavar="NAME", help=f"Only this resource, e.g. {GPU_RESOURCE}.")
    ] = None,
    database_url: DatabaseURLOption = None,
    output: Annotated[Output, typer.Option("-o", "--output", help="Output format.")] = Output.table,
    budgets: Annotated[
        Path | None,
        typer.Option(
            "--budgets",
            metavar="FILE",
            help="Also each budget of this quota file: spent and remaining in its window as of --to (or now).",
        ),
    ] = None,
) -> None:
    start, end = parse_time("--from", from_), parse_time("--to", to)
    if start >= end:
        fail(f"--from ({start.isoformat()}) must be before --to ({end.isoformat()})")
    url = database_url_or_exit(database_url)
    parsed = make_url(url)
    sqlite_file = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if sqlite_file and sqlite_file != ":memory:" and not Path(sqlite_file).exists():
        # Connecting would create an empty database file as a side effect.
        fail(f"there is no ledger at {sqlite_file}: run `kuota migrate` first, or pass --database-url", code=1)
    config = None
    if budgets is not None:
        try:
            config = load_config_file(budgets)
        except ConfigError as exc:
            fail(exc.render())
    try:
        rows = asyncio.run(_report(url, start, end, by, resource))
        found = asyncio.run(_budgets(url, config, end)) if config is not None else None
    except (SQLAlchemyError, OSError) as exc:
        reason = str(getattr(exc, "orig", None) or exc)
        no_schema = "no such table" in reason or ("relation" in reason and "does not exist" in reason)
        hint = " (run `kuota migrate` first)" if no_schema else ""
        fail(f"cannot read the ledger at {shown(url)}{hint}: {reason}", code=1)
    lines = [UsageLine(row.key, row.resource, row.hours, row.milli_seconds) for row in rows]
    if found is None:
        write_usage(lines, by=by.value, output=output.value, start=start, end=end, resource=resource)
    else:
        write_usage_and_budgets(lines, found, by=by.value, output=output.value, start=start, end=end, resource=resource)


def parse_time(option: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        fail(f"{option}: not an ISO 8601 date or time: {text!r}")
    return moment.replace(tzinfo=UTC) if moment.utcoffset() is None else moment.astimezone(UTC)


async def _budgets(url: str, config: QuotaConfig, end: datetime) -> list[BudgetStatus]:
    """Every budget of `config` as of `end` (or now, if earlier: work still running counts up to now)."""
    at = min(int(end.timestamp() * 1000), int(datetime.now(UTC).timestamp() * 1000))
    engine = create_engine(url)
    try:
        book = SpendingBook()
        book.load(await usage_since(engine, history_start(config, at), at))
        return statuses(config, book, at)
    finally:
        await engine.dispose()


async def _report(url: str, start: datetime, end: datetime, by: By, resource: str | None) -> list[UsageRow]:
    engine = create_engine(url)
    try:
        return await usage_report(engine, start, end, by=by.value, resource=resource)
    finally:
        await engine.dispose()
