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


class Topology(StrEnum):
    required = "required"
    preferred = "preferred"
    off = "off"


class Repair(StrEnum):
    fixed = "fixed"
    exponential = "exponential"


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
    nodes: Annotated[
        str | None,
        typer.Option(
            "--nodes",
            help="Run on nodes: COUNT per GPU flavor, or auto (as many as its GPU quota fills); flavors holding GPU "
            "quota are placed node by node under a block/rack/host topology.",
        ),
    ] = None,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=1, help="GPUs of each node.")] = 8,
    nodes_per_rack: Annotated[int, typer.Option("--nodes-per-rack", min=1, help="Nodes of each rack.")] = 4,
    racks_per_block: Annotated[int, typer.Option("--racks-per-block", min=1, help="Racks of each block.")] = 8,
    topology: Annotated[
        Topology,
        typer.Option(
            "--topology",
            help="How jobs with more than one node's worth of GPUs ask for placement: required (one rack when they "
            "fit one, else one block), preferred (a rack, falling back level by level) or off (no wish; the "
            "topology knows hosts only).",
        ),
    ] = Topology.required,
    node_mtbf: Annotated[
        str | None,
        typer.Option(
            "--node-mtbf", help="Mean time between failures of each node (72h, 30d): exponential, seeded by --seed."
        ),
    ] = None,
    repair: Annotated[
        str, typer.Option("--repair", help="How long a failed node stays NotReady (a duration: 4h).")
    ] = "4h",
    repair_times: Annotated[
        Repair, typer.Option("--repair-times", help="Repair times fixed at --repair, or exponential around it.")
    ] = Repair.fixed,
) -> None:
    """Replay a trace with kuota's real queue manager, engine and controller on a virtual clock; print per-team
    figures (jobs, GPU-hours, waits, share of capacity, borrowing, preemptions, lost GPU-seconds, credits) and the
    GPU-hours preemptions lost; on nodes, placement, fragmentation and node-failure figures too."""
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
    node_setup = _node_setup(
        nodes, (gpus_per_node, nodes_per_rack, racks_per_block), topology, (node_mtbf, repair, repair_times), seed
    )
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
    if node_setup is not None:
        _check_nodes(quota, node_setup)

    aware = victims is VictimOrder.checkpoint_aware
    show = progress and not as_json
    timing = (int(hook_delay * 1000), start_delay_ms, epoch_ms)
    if database_url is not None:
        text = config.read_text(encoding="utf-8")
        result = _run_with_ledger(quota, read.jobs, database_url, timing, show, (text, str(config)), aware, node_setup)
    else:
        result = _run(quota, read.jobs, timing, None, show, aware, node_setup)
    summary = result.summary()
    if report is not None:
        path = _write_report(result, report, trace.name)
        sys.stderr.write(f"report: {path}\n")
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        _print_summary(summary, wide=wide)


def _node_setup(
    nodes: str | None,
    shape: tuple[int, int, int],
    topology: Topology,
    failures: tuple[str | None, str, Repair],
    seed: int,
) -> Any:
    """The replay's nodes, topology and failures from the options (None without --nodes); exit 2 on a bad one."""
    from clusters.sim.failures import FailureModel
    from quota.duration import DurationError, parse_duration_ms
    from sim.topology import NodeLayout, NodeSetup, TopologyMode

    mtbf, repair, repair_times = failures
    if nodes is None:
        if mtbf is not None:
            sys.stderr.write("error: --node-mtbf: node failures need nodes (give --nodes COUNT or --nodes auto)\n")
            raise typer.Exit(2)
        return None
    try:
        count = None if nodes == "auto" else int(nodes)
        layout = NodeLayout(count, *shape)
    except ValueError as exc:
        text = str(exc) if nodes == "auto" or nodes.lstrip("-").isdigit() else f"{nodes!r} is not a count nor auto"
        sys.stderr.write(f"error: --nodes: {text}\n")
        raise typer.Exit(2) from None
    model = None
    if mtbf is not None:
        try:
            model = FailureModel(
                parse_duration_ms(mtbf), parse_duration_ms(repair), repair_times is Repair.exponential, seed
            )
        except (DurationError, ValueError) as exc:
            sys.stderr.write(f"error: --node-mtbf/--repair: {exc}\n")
            raise typer.Exit(2) from None
    return NodeSetup(layout, TopologyMode(topology.value), model)


def _check_nodes(quota: Any, setup: Any) -> None:
    """Say what the nodes are before the run (exit 2 if the quota file cannot be placed on them)."""
    from sim.topology import with_nodes

    try:
        placed, nodes = with_nodes(quota, setup)
    except ValueError as exc:  # the quota file has nothing to place, or a clashing topology name
        sys.stderr.write(f"error: --nodes: {exc}\n")
        raise typer.Exit(2) from None
    layout = setup.layout
    sys.stderr.write(
        f"nodes: {len(nodes)} of {layout.gpus_per_node} GPUs, {layout.nodes_per_rack} a rack, "
        f"{layout.racks_per_block} racks a block; topology {setup.mode}\n"
    )
    if setup.failures is not None and quota.node_failure is None:
        grace = placed.node_failure.grace_period // 1000 if placed.node_failure is not None else 0
        sys.stderr.write(f"nodes: the quota file has no nodeFailure block: its default grace period ({grace}s) used\n")


def _run(
    quota: Any,
    jobs: Any,
    timing: tuple[int, int, int],
    journal: Any,
    show_progress: bool,
    aware: bool,
    nodes: Any = None,
) -> Any:
    """`timing`: the hook delay, the pods' start delay (ms) and the epoch instant of virtual time 0; `nodes`: the
    replay's nodes, topology and failures (None: quota alone)."""
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
            nodes=nodes,
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
    nodes: Any = None,
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
                    nodes=nodes,
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
    figures = summary.get("nodes")
    if figures is not None:
        console.print(_nodes_line(figures))


def _nodes_line(nodes: dict[str, Any]) -> str:
    """The run on nodes in two sentences: where gangs went and how fragmented the free GPUs were; what failed."""
    text = (
        f"nodes {nodes['nodes']} in {nodes['racks']} racks: {nodes['single_rack_admissions']:,} of "
        f"{nodes['multi_node_admissions']:,} multi-node admissions in one rack ({nodes['single_rack_share']:.1%}); "
        f"stranded free GPUs {nodes['mean_stranded_free_gpu_share']:.1%} on average, "
        f"{nodes['mean_free_racks']} racks wholly free"
    )
    if "node_failures" in nodes:
        text += (
            f"; {nodes['node_failures']:,} node failures ({nodes['down_gpu_hours']:,} GPU-h down), "
            f"{nodes['node_failure_evictions']:,} NodeFailure evictions, {nodes['restarts_in_place']:,} restarts in "
            f"place, {nodes['failure_lost_gpu_hours']:,} GPU-h of work lost to failures"
        )
    return text


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
