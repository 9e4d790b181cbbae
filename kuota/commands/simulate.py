"""`kuota simulate --config FILE --trace FILE`: replay a job trace against a quota file on a simulated cluster."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer


class TraceFormat(StrEnum):
    itp = "itp"
    openb = "openb"
    csv = "csv"


DEFAULT_START = "2021-03-04T00:00:00"
"""Where a trace's time 0 falls by default: a fixed date, so budgets' calendar windows and the ledger's reports
read as real days (the ITP, openb and csv traces count seconds from their start, with no dates)."""


class VictimOrder(StrEnum):
    checkpoint_aware = "checkpoint-aware"
    spec = "spec"


def register(app: typer.Typer) -> None:
    app.command(name="simulate")(simulate)


def simulate(
    config: Annotated[Path, typer.Option("--config", help="The team-quota file.")],
    trace: Annotated[Path, typer.Option("--trace", help="The job trace.")],
    fmt: Annotated[
        TraceFormat, typer.Option("--format", help="itp (Microsoft ITP 2021), openb (Alibaba PAI), csv (kuota's).")
    ] = TraceFormat.csv,
    mapping: Annotated[
        Path | None, typer.Option("--mapping", help="YAML: trace columns → teams, priority classes, checkpoints.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for every random draw of the mapping.")] = 0,
    limit: Annotated[int | None, typer.Option("--limit", min=0, help="Replay only the first N jobs.")] = None,
    hook_delay: Annotated[
        float, typer.Option("--hook-delay", min=0, help="Seconds a checkpointing job takes to answer a request.")
    ] = 10.0,
    start_delay: Annotated[
        str,
        typer.Option(
            "--start-delay",
            help="How long after each admission a job's pods are all ready, as a duration (30s, 2m): what the "
            "quota file's waitForPodsReady times.",
        ),
    ] = "0",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    wide: Annotated[
        bool, typer.Option("--wide", help="Every column of the summary (it fits 80 columns without).")
    ] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write DIR/report.html with plots.")] = None,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="Persist the run in this ledger (postgresql://… or sqlite:///…)."),
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
    victims: Annotated[
        VictimOrder,
        typer.Option(
            "--victims",
            help="Victims the spec's order leaves equal: most recent checkpoint first (checkpoint-aware), or by "
            "name (spec).",
        ),
    ] = VictimOrder.checkpoint_aware,
    start: Annotated[
        str,
        typer.Option(
            "--start",
            metavar="ISO",
            help="The date and time the trace's first instant stands for (UTC without an offset): where budgets' "
            "days, weeks and months fall, and the ledger's times. The traces kuota reads carry no calendar dates.",
        ),
    ] = DEFAULT_START,
) -> None:
    """Replay a trace with kuota's real queue manager, engine and controller on a virtual clock; print per-team
    figures (jobs, GPU-hours, waits, share of capacity, borrowing, preemptions, lost GPU-seconds, credits) and the
    GPU-hours preemptions lost."""
    from quota.duration import DurationError, parse_duration_ms
    from quota.loader import ConfigError, load_config_file
    from sim.traces import TraceError, default_mapping, load_mapping, read_trace_detailed

    try:
        start_delay_ms = parse_duration_ms(start_delay)
    except DurationError as exc:
        sys.stderr.write(f"error: --start-delay: {exc}\n")
        raise typer.Exit(2) from None
    from kuota.commands.usage import parse_time
    from quota.budgets import epoch_ms_of

    epoch_ms = epoch_ms_of(parse_time("--start", start))
    try:
        quota = load_config_file(config)
        chosen = load_mapping(mapping) if mapping is not None else default_mapping(fmt.value, quota)
        read = read_trace_detailed(trace, fmt.value, chosen, quota, seed=seed, limit=limit)
    except (ConfigError, TraceError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2) from None
    if not read.jobs:
        sys.stderr.write(f"error: {trace}: no jobs to replay ({read.summary()})\n")
        raise typer.Exit(2)
    sys.stderr.write(f"{trace}: {read.summary()}\n")

    aware = victims is VictimOrder.checkpoint_aware
    show = progress and not as_json
    timing = (int(hook_delay * 1000), start_delay_ms, epoch_ms)
    if database_url is not None:
        text = config.read_text(encoding="utf-8")
        result = _run_with_ledger(quota, read.jobs, database_url, timing, show, (text, str(config)), aware)
    else:
        result = _run(quota, read.jobs, timing, None, show, aware)
    summary = result.summary()
    if report is not None:
        path = _write_report(result, report, trace.name)
        sys.stderr.write(f"report: {path}\n")
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        _print_summary(summary, wide=wide)


def _run(quota: Any, jobs: Any, timing: tuple[int, int, int], journal: Any, show_progress: bool, aware: bool) -> Any:
    """`timing`: the hook delay, the pods' start delay (ms) and the epoch instant of virtual time 0."""
    from sim.replay import replay

    hook_delay_ms, start_delay_ms, epoch_ms = timing
    with _progress(len(jobs), show_progress) as on_progress:
        return replay(
            quota,
            jobs,
            journal=journal,
            hook_delay_ms=hook_delay_ms,
            start_delay_ms=start_delay_ms,
            on_progress=on_progress,
            checkpoint_aware_victims=aware,
            epoch_ms=epoch_ms,
        )


@contextlib.contextmanager
def _progress(total: int, show: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on a terminal's stderr (the callback a replay reports finished jobs to), else nothing."""
    if not show or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("jobs", total=total)
        yield lambda done, _total: bar.update(task, completed=done)


def _run_with_ledger(
    quota: Any,
    jobs: Any,
    url: str,
    timing: tuple[int, int, int],
    show_progress: bool,
    config: tuple[str, str],
    aware: bool,
) -> Any:
    """The replay, written to the ledger as it runs; the quota file is recorded as applied at virtual time 0, so
    `kuota whatif` finds the file that was in force. `timing`: as `_run` takes it; the ledger's times are the
    budgets' (virtual time 0 at the epoch instant given)."""
    hook_delay_ms, start_delay_ms, epoch_ms = timing
    import asyncio

    from accounting.ledger import Ledger
    from accounting.migrate import upgrade_async
    from queues.ledger_journal import LedgerJournal
    from sim.replay import replay_streaming

    async def main() -> Any:
        try:
            await upgrade_async(url)
        except Exception as exc:  # any driver error: report it plainly
            sys.stderr.write(f"error: cannot prepare the ledger at {url}: {exc}\n")
            raise typer.Exit(1) from None
        ledger = Ledger(url, max_backlog=10_000_000)
        await ledger.start()
        journal = LedgerJournal(ledger, epoch_ms)
        journal.config_applied(config[0], f"kuota simulate --config {config[1]}", 0)
        try:
            # The ledger is written while the replay runs (it pauses every few thousand instants until the
            # writer has caught up), so a run stopped midway leaves everything up to its last pause.
            with _progress(len(jobs), show_progress) as on_progress:
                result = await replay_streaming(
                    quota, jobs, journal=journal, flush=ledger.flush, hook_delay_ms=hook_delay_ms,
                    start_delay_ms=start_delay_ms, on_progress=on_progress, checkpoint_aware_victims=aware,
                    epoch_ms=epoch_ms,
                )  # fmt: skip
        finally:
            await ledger.close()
        sys.stderr.write(f"ledger: {ledger.written} events written to {url}\n")
        return result

    return asyncio.run(main())


def _write_report(result: Any, directory: Path, title: str) -> Path:
    from sim.report import write_report

    return write_report(result.report_data(f"kuota simulate — {title}"), directory)


#: The per-team columns: (title, key, shown without --wide).
TEAM_COLUMNS = [
    ("jobs", "jobs", True),
    ("GPU-h", "gpu_hours", True),
    ("mean wait s", "mean_wait_s", True),
    ("p95 wait s", "p95_wait_s", False),
    ("share", "share_of_capacity", True),
    ("borrowed GPU-h", "borrowed_gpu_hours", False),
    ("preempted", "preemptions", True),
    ("lost GPU-s", "lost_gpu_seconds", False),
    ("credit", "credit", True),
]


def _print_summary(summary: dict[str, Any], *, wide: bool = False) -> None:
    from rich.console import Console

    console = Console()
    columns = [(title, key) for title, key, narrow in TEAM_COLUMNS if wide or narrow]
    console.print(_figures_table("team", summary["teams"], columns))
    if set(summary["kinds"]) != {"Job"}:
        columns = [("jobs", "jobs"), ("pods", "pods"), ("GPU-h", "gpu_hours"), ("mean wait s", "mean_wait_s")]
        columns += [("preemptions", "preemptions"), ("lost GPU-s", "lost_gpu_seconds")]
        console.print(_figures_table("kind", summary["kinds"], columns))
    console.print(
        f"jobs {summary['jobs']}, finished {summary['finished']}, utilization {summary['utilization']:.1%}, "
        f"Jain's fairness {summary['jain_fairness']:.3f}, makespan {summary['makespan_hours']} h, "
        f"lost {summary['lost_gpu_hours']:,} GPU-h ({summary['victims']} victims), wall {summary['wall_seconds']} s"
    )
    if summary.get("budgets"):
        from kuota.commands._budget_output import budget_table

        console.print(budget_table("kuota simulate — budgets", summary["budgets"], wide=wide))


def _figures_table(by: str, rows: dict[str, dict[str, Any]], columns: list[tuple[str, str]]) -> Any:
    from rich.table import Table

    table = Table(title=f"kuota simulate — per {by}")
    table.add_column(by, justify="left", overflow="fold")
    for title, _ in columns:
        table.add_column(title, justify="right", overflow="fold")
    for name, figures in rows.items():
        table.add_row(name, *(_figure(figures[key], key) for _, key in columns))
    return table


def _figure(value: Any, key: str) -> str:
    """A figure as people read it in a table (--json keeps every digit): shares and credits to three decimals,
    other fractions to one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if key in ("share_of_capacity", "credit"):
        return f"{value:.3f}"
    if isinstance(value, int) or value.is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"
