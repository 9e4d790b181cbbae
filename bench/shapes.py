"""The whole ITP 2021 trace (69,351 jobs) through `kuota simulate` on five organisation shapes, fair sharing on and off.

Every run is what `kuota simulate --format itp --config Q --mapping M --trace T` decides: the bench writes the quota
file, the mapping and (for shapes with more teams than ITP clusters) the trace it derives, then runs the command's
own replay function on them (`kuota.commands.simulate._run`, with the command's defaults: 10 s hook delay, no start
delay, checkpoint-aware victims, time 0 at 2021-03-04), with one extra journal that times the engine's cycles.
`--out DIR` keeps those files, so any run can be repeated with the command itself.

Capacity is bench/replay_itp.py's in every shape: `--gpus` (1,600) split between the ten ITP clusters by their
GPU-hours, each cluster at least its largest job (1,653 GPUs in all for the whole trace). Shapes:

* flat — bench/replay_itp.py's file exactly: the ten clusters as ten teams in one cohort (fair off: its `borrowing`
  policy; on: its `fair-sharing` policy, 24 h half-life); GPUs only, three priority classes, teams preempt lower
  priority within themselves and reclaim with `reclaimWithinCohort: Any`.
* regions — the same ten teams and knobs in two regional cohorts that do not share with each other: east
  (cluster01–05), west (cluster06–10). Two levels.
* org-pool — ten teams under east and west under an org cohort that owns a shared pool: each team gives a fifth of its
  GPUs (rounded down) to the org's pool; fair sharing with a 168 h half-life, two priority classes (production,
  research by default), cpu (8 a GPU) and memory (64 Gi a GPU) quotas beside GPUs, `reclaimWithinCohort: Any`.
  Three levels, the organisation issue 16 found too slow.
* cohorts-50 — 50 teams in 10 cohorts, one cohort per ITP cluster holding its teams, cohorts independent (Kueue's
  large-scale shape, scaled down); flat's knobs.
* tree-200 — 200 teams in four levels: org → east/west → one cohort per ITP cluster → teams; flat's knobs.

Teams beyond the ten clusters: a shape's team count is shared out between the clusters by their job counts in the
whole trace (largest remainders, at least one each), and each job goes to one of its cluster's teams by a hash of
`--seed` and its job id, with team i of k drawn with weight 1/i (teams of different sizes, as in an organisation;
the ITP trace names no users or virtual clusters to split by). A cluster's GPUs are split between its teams by their
GPU-hours (largest remainders). The derived trace is the ITP file with the `cluster` cell replaced by the team's name
(`cluster04-07`), read as ITP; the mapping says `team: {column: cluster}`. Priority classes and checkpoints are the
ITP defaults of `kuota simulate` (drawn per row with `--seed`; half the jobs checkpoint every 30 min).

Per run: wall seconds of the replay (what `kuota simulate` prints as wall), its CPU seconds, cycles, mean and p99
engine time per cycle (`Controller.schedule`'s timing of the engine), then the decisions: utilization, mean and p95
wait of first admissions, preemptions, Jain's fairness and the GPU-hours preemptions lost. Then per shape and fair
setting the median and range over `--runs`, and the fair-on/fair-off ratio of wall medians. A run that does not finish
in `--timeout` seconds is stopped (SIGTERM, then SIGKILL) and reported with how far it got: jobs finished, virtual
hours reached, cycles. `--profile` runs each replay under cProfile (CPU time; slower, so its times are not the shape's)
and prints the top functions by cumulative share of the run — also of a run stopped by the timeout.

    nice -n 10 .venv/bin/python bench/shapes.py [--shapes flat,regions,org-pool,cohorts-50,tree-200]
        [--fair on|off|both] [--runs 3] [--timeout 300] [--jobs N] [--gpus 1600] [--seed 0] [--profile]
        [--out DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import cProfile
import csv
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import multiprocessing
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from typing_extensions import override

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replay_itp import CLUSTERS, ITP, config_body, sized_quotas
from kuota.commands.simulate import DEFAULT_START
from queues.journal import NullJournal
from quota.config import QuotaConfig
from quota.loader import load_config_data, load_config_file
from sim.traces import TraceJob, load_mapping, parse_mapping, read_trace, read_trace_detailed

SHAPES = ("flat", "regions", "org-pool", "cohorts-50", "tree-200")
REGIONS = {"east": CLUSTERS[:5], "west": CLUSTERS[5:]}
MAPPING = "team: {column: cluster}\n"
POOL_SHARE = Fraction(1, 5)
"""What each team of a shape with a pool gives to the org's pool."""
CPU_PER_GPU = 8
MEMORY_PER_GPU_GI = 64
HOOK_DELAY_MS = 10_000  # `kuota simulate --hook-delay` default


# -- shapes --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cohort:
    name: str
    parent: str | None
    pool: bool = False


@dataclass(frozen=True)
class TeamNode:
    name: str
    cluster: str
    parent: str | None


@dataclass(frozen=True)
class Shape:
    name: str
    cohorts: tuple[Cohort, ...]
    teams: tuple[TeamNode, ...]
    org_knobs: bool
    """org-pool's knobs (two classes, cpu and memory, 168 h) instead of bench/replay_itp.py's."""

    @property
    def derived(self) -> bool:
        """Whether the shape has other teams than the ten clusters (and so needs a derived trace)."""
        return any(team.name != team.cluster for team in self.teams)


def team_counts(total: int, jobs_per_cluster: dict[str, int]) -> dict[str, int]:
    """`total` teams shared out between the clusters by their job counts: largest remainders, at least one each."""
    if total < len(CLUSTERS):
        raise ValueError(f"{total} teams cannot cover {len(CLUSTERS)} clusters")
    counts = dict.fromkeys(CLUSTERS, 1)
    weights = {c: jobs_per_cluster.get(c, 0) for c in CLUSTERS}
    for cluster, extra in apportion(total - len(CLUSTERS), weights).items():
        counts[cluster] += extra
    return counts


def apportion(total: int, weights: dict[str, int]) -> dict[str, int]:
    """`total` split in proportion to `weights` (largest remainders; ties by name); equal shares if all weigh 0."""
    names = sorted(weights)
    weight_sum = sum(weights.values())
    if weight_sum == 0:
        weights, weight_sum = dict.fromkeys(names, 1), len(names)
    exact = {n: Fraction(total * weights[n], weight_sum) for n in names}
    out = {n: int(exact[n]) for n in names}
    left = total - sum(out.values())
    for name in sorted(names, key=lambda n: (-(exact[n] - out[n]), n))[:left]:
        out[name] += 1
    return out


def shape(name: str, counts_for: dict[int, dict[str, int]]) -> Shape:
    """The tree of shape `name`; `counts_for[n]`: teams per cluster when the shape has n teams (`team_counts`)."""
    if name == "flat":
        return Shape(name, (Cohort("itp", None),), tuple(TeamNode(c, c, "itp") for c in CLUSTERS), False)
    region_of = {c: r for r, members in REGIONS.items() for c in members}
    regions = tuple(Cohort(r, None) for r in REGIONS)
    if name == "regions":
        return Shape(name, regions, tuple(TeamNode(c, c, region_of[c]) for c in CLUSTERS), False)
    under_org = tuple(Cohort(r, "org") for r in REGIONS)
    if name == "org-pool":
        cohorts = (Cohort("org", None, pool=True), *under_org)
        return Shape(name, cohorts, tuple(TeamNode(c, c, region_of[c]) for c in CLUSTERS), True)
    if name == "cohorts-50":
        return Shape(name, tuple(Cohort(c, None) for c in CLUSTERS), _sub_teams(counts_for[50]), False)
    if name == "tree-200":
        cohorts = (Cohort("org", None), *under_org, *(Cohort(c, region_of[c]) for c in CLUSTERS))
        return Shape(name, cohorts, _sub_teams(counts_for[200]), False)
    raise ValueError(f"unknown shape {name!r} (one of {', '.join(SHAPES)})")


TEAMS_OF = {"cohorts-50": 50, "tree-200": 200}


def _sub_teams(counts: dict[str, int]) -> tuple[TeamNode, ...]:
    return tuple(TeamNode(f"{c}-{i:02d}", c, c) for c in CLUSTERS for i in range(1, counts[c] + 1))


def levels(config: QuotaConfig) -> int:
    """The depth of a quota file's tree, teams counted: 2 for teams in one cohort; 1 for standalone teams."""
    parent = {c.name: c.parent for c in config.cohorts}

    def depth(cohort: str | None) -> int:
        return 0 if cohort is None else 1 + depth(parent[cohort])

    return max(1 + depth(team.parent) for team in config.teams)


def sub_team(cluster: str, job_id: str, teams: int, seed: int) -> int:
    """Which of a cluster's `teams` teams (1-based) a job goes to: team i with weight 1/i, by a hash of seed and id."""
    digest = hashlib.blake2b(f"{seed}/{cluster}/{job_id}".encode(), digest_size=8).digest()
    bounds = _bounds(teams)
    return min(teams, bisect.bisect_right(bounds, Fraction(int.from_bytes(digest, "big"), 2**64) * bounds[-1]) + 1)


@functools.cache
def _bounds(teams: int) -> tuple[Fraction, ...]:
    """Where each team's share of [0, H(teams)) ends, for weights 1, 1/2, … 1/teams."""
    return tuple(itertools.accumulate(Fraction(1, i) for i in range(1, teams + 1)))


def derive_trace(source: Path, target: Path, counts: dict[str, int], seed: int) -> None:
    """The ITP file with each row's cluster replaced by its team's name (`sub_team`), rows in the same order."""
    with source.open(encoding="utf-8", newline="") as inp, target.open("w", encoding="utf-8", newline="") as out:
        reader = csv.reader(inp)
        writer = csv.writer(out, lineterminator="\n")
        header = next(reader)
        writer.writerow(header)
        at_cluster, at_id = header.index("cluster"), header.index("job_id")
        for row in reader:
            cluster = row[at_cluster]
            row[at_cluster] = f"{cluster}-{sub_team(cluster, row[at_id], counts[cluster], seed):02d}"
            writer.writerow(row)


def jobs_per_cluster(path: Path) -> dict[str, int]:
    with path.open(encoding="utf-8", newline="") as handle:
        counts: dict[str, int] = {}
        for row in csv.DictReader(handle):
            counts[row["cluster"]] = counts.get(row["cluster"], 0) + 1
        return counts


# -- quota files ---------------------------------------------------------------------------------------------------


def team_gpus(tree: Shape, jobs: Sequence[TraceJob], gpus: int) -> dict[str, int]:
    """Each team's GPUs: bench/replay_itp.py's split between clusters, each cluster's split by its teams' GPU-hours."""
    cluster_of = {team.name: team.cluster for team in tree.teams}
    per_cluster = sized_quotas([dataclasses.replace(job, team=cluster_of[job.team]) for job in jobs], gpus)
    demand = {team.name: 0 for team in tree.teams}
    for job in jobs:
        demand[job.team] += job.gpus * job.duration_ms
    out: dict[str, int] = {}
    for cluster in CLUSTERS:
        members = {t.name: demand[t.name] for t in tree.teams if t.cluster == cluster}
        out |= apportion(per_cluster[cluster], members)
    return out


def quota_body(tree: Shape, gpus: dict[str, int], fair: bool) -> dict[str, Any]:
    """The quota file of `tree` with these GPUs per team, as YAML-ready data."""
    if tree.name == "flat":
        return config_body("fair-sharing" if fair else "borrowing", gpus)
    pooled = {name: int(value * POOL_SHARE) for name, value in gpus.items()} if tree.org_knobs else {}
    teams = [
        {
            "name": team.name,
            "parent": team.parent,
            "queues": [f"{team.name}/default"],
            "quotas": [{"flavor": "gpu", "resources": _resources(gpus[team.name] - pooled.get(team.name, 0), tree)}],
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinTeam": "LowerPriority", "reclaimWithinCohort": "Any"},
        }
        for team in tree.teams
    ]
    cohorts: list[dict[str, Any]] = []
    for cohort in tree.cohorts:
        entry: dict[str, Any] = {"name": cohort.name}
        if cohort.parent is not None:
            entry["parent"] = cohort.parent
        if cohort.pool:
            entry["quotas"] = [{"flavor": "gpu", "resources": _resources(sum(pooled.values()), tree)}]
        cohorts.append(entry)
    if tree.org_knobs:
        classes = [
            {"name": "production", "value": 1000},
            {"name": "research", "value": 100, "default": True},
        ]
    else:
        classes = config_body("borrowing", dict.fromkeys(CLUSTERS, 0))["priorityClasses"]
    return {
        "flavors": [{"name": "gpu"}],
        "priorityClasses": classes,
        "fairSharing": {"enabled": fair, "usageHalfLife": "168h" if tree.org_knobs else "24h"},
        "cohorts": cohorts,
        "teams": teams,
    }


def _resources(gpus: int, tree: Shape) -> dict[str, Any]:
    resources: dict[str, Any] = {"nvidia.com/gpu": {"nominal": gpus}}
    if tree.org_knobs:
        resources["cpu"] = {"nominal": gpus * CPU_PER_GPU}
        resources["memory"] = {"nominal": f"{gpus * MEMORY_PER_GPU_GI}Gi"}
    return resources


@dataclass(frozen=True)
class ShapeFiles:
    """What `kuota simulate` is given for one shape: the trace, the mapping and the quota file per fair setting."""

    shape: Shape
    trace: Path
    mapping: Path
    configs: dict[bool, Path]
    gpus: int
    """GPUs in all (teams' and pools')."""


def prepare(
    names: Sequence[str], directory: Path, gpus: int, seed: int, limit: int | None, sticky: bool = False
) -> list[ShapeFiles]:
    """Write every file the shapes' runs read into `directory`; sized on the jobs those runs replay. `sticky`: the
    files say `stickyPreemptors: true`."""
    counts_for = {n: team_counts(n, jobs_per_cluster(ITP)) for n in {TEAMS_OF[s] for s in names if s in TEAMS_OF}}
    mapping = directory / "mapping.yaml"
    mapping.write_text(MAPPING, encoding="utf-8")
    out = []
    for name in names:
        tree = shape(name, counts_for)
        trace = ITP
        if tree.derived:
            trace = directory / f"itp-{len(tree.teams)}-teams.csv"
            if not trace.exists():
                derive_trace(ITP, trace, counts_for[len(tree.teams)], seed)
        skeleton = load_config_data(quota_body(tree, {t.name: 1 for t in tree.teams}, False))
        jobs = read_trace(trace, "itp", parse_mapping(MAPPING), skeleton, seed=seed, limit=limit)
        split = team_gpus(tree, jobs, gpus)
        configs = {}
        for fair in (False, True):
            path = directory / f"{name}-fair-{'on' if fair else 'off'}.yaml"
            body = quota_body(tree, split, fair)
            if sticky:
                body = {"stickyPreemptors": True, **body}
            path.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
            configs[fair] = path
        out.append(ShapeFiles(tree, trace, mapping, configs, sum(split.values())))
    return out


# -- one run, in a child process -----------------------------------------------------------------------------------


class CycleTimes(NullJournal):
    """Counts the engine's cycles and times them, and says how far the run got (in shared memory the parent reads)."""

    def __init__(self, progress: Any) -> None:
        self.durations: list[float] = []
        self.progress = progress
        """[cycles, virtual ms reached, jobs finished]."""

    @override
    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None:
        self.durations.append(duration_s)
        self.progress[0] = len(self.durations)
        self.progress[1] = at

    @override
    def finished(self, workload: Any, attempt: int, succeeded: bool, at: int) -> None:
        self.progress[2] += 1


class _Stopped(BaseException):
    """The parent's SIGTERM: the run is over its time."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


@dataclass
class Outcome:
    shape: str
    fair: bool
    done: bool
    """False: stopped at the timeout (or failed: `error`)."""
    wall_s: float
    cpu_s: float
    cycles: int
    mean_cycle_ms: float
    p99_cycle_ms: float
    jobs: int
    finished: int
    virtual_h: float
    span_h: float
    """Virtual hours from the first submission to the last (the whole replay runs a little past it)."""
    figures: dict[str, float] = field(default_factory=dict)
    profile: str = ""
    error: str = ""
    load: tuple[str, str] = ("", "")
    """/proc/loadavg's 1-, 5- and 15-minute averages before and after the run."""


def _run_child(files: ShapeFiles, fair: bool, opts: argparse.Namespace, progress: Any, conn: Connection) -> None:
    signal.signal(signal.SIGTERM, _stop)
    from kuota.commands.simulate import _run
    from kuota.commands.usage import parse_time
    from quota.budgets import epoch_ms_of

    journal = CycleTimes(progress)
    # CPU time, not wall: on a loaded machine the wall clock counts the other processes' turns too.
    profiler = cProfile.Profile(time.process_time) if opts.profile else None
    started = time.perf_counter()
    cpu = time.process_time()
    jobs: list[TraceJob] = []
    result: Any = None
    error = ""
    try:
        quota = load_config_file(files.configs[fair])
        jobs = read_trace_detailed(
            files.trace, "itp", load_mapping(files.mapping), quota, seed=opts.seed, limit=opts.jobs
        ).jobs
        started, cpu = time.perf_counter(), time.process_time()  # the replay's time, as `kuota simulate` prints it
        timing = (HOOK_DELAY_MS, 0, epoch_ms_of(parse_time("--start", DEFAULT_START)))
        if profiler is not None:
            profiler.enable()
        result = _run(quota, jobs, timing, journal, False, True)
    except _Stopped:
        pass
    except Exception as exc:  # a shape that cannot run is reported, not a traceback that hides the other shapes
        error = f"{type(exc).__name__}: {exc}"
    finally:
        if profiler is not None:
            profiler.disable()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    durations = sorted(journal.durations)
    submits = [job.submit_ms for job in jobs]
    outcome = Outcome(
        shape=files.shape.name,
        fair=fair,
        done=result is not None,
        wall_s=result.wall_seconds if result is not None else wall,
        cpu_s=cpu,
        cycles=len(durations),
        mean_cycle_ms=statistics.fmean(durations) * 1000 if durations else 0.0,
        p99_cycle_ms=durations[min(len(durations) - 1, int(len(durations) * 0.99))] * 1000 if durations else 0.0,
        jobs=len(jobs),
        finished=int(progress[2]),
        virtual_h=progress[1] / 3_600_000,
        span_h=(max(submits) - min(submits)) / 3_600_000 if submits else 0.0,
        figures=decision_figures(result) if result is not None else {},
        profile=_profile_text(profiler, cpu) if profiler is not None else "",
        error=error,
    )
    conn.send(outcome)
    conn.close()


def decision_figures(result: Any) -> dict[str, float]:
    """What a run decided, from the summary `kuota simulate` prints and the per-team waits behind it."""
    summary = result.summary()
    waits = sorted(w for s in result.stats.teams.values() for w in s.waits_ms)
    return {
        "utilization": summary["utilization"],
        "mean_wait_s": statistics.fmean(waits) / 1000 if waits else 0.0,
        "p95_wait_s": waits[min(len(waits) - 1, int(len(waits) * 0.95))] / 1000 if waits else 0.0,
        "preemptions": sum(s.preemptions for s in result.stats.teams.values()),
        "jain": summary["jain_fairness"],
        "lost_gpu_hours": summary["lost_gpu_hours"],
        "finished": summary["finished"],
    }


PROFILE_ROWS = 30


def _profile_text(profiler: cProfile.Profile, total: float) -> str:
    """The top functions by cumulative time, each with its share of the profiled run's `total` CPU seconds (not the
    largest cumulative: a run stopped by the signal can leave a frame counted past its end)."""
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][3])  # type: ignore[attr-defined]
    lines = [f"{'cum %':>6}{'cum s':>9}{'self s':>9}{'calls':>11}  function"]
    for (path, line, function), (_, calls, own, cumulative, _) in rows[:PROFILE_ROWS]:
        where = f"{_short(path)}:{line} {function}" if line else function
        share = cumulative / total if total else 0.0
        lines.append(f"{share:>6.1%}{cumulative:>9.2f}{own:>9.2f}{calls:>11,}  {where}")
    return "\n".join(lines)


def _short(path: str) -> str:
    root = str(Path(__file__).resolve().parents[1]) + os.sep
    return path.removeprefix(root)


def run_one(files: ShapeFiles, fair: bool, opts: argparse.Namespace) -> Outcome:
    """One run in a child process: stopped after `opts.timeout` seconds, whatever it is doing."""
    context = multiprocessing.get_context("fork")
    progress = context.RawArray("q", 3)
    receive, send = context.Pipe(duplex=False)
    before = _load()
    child = context.Process(target=_run_child, args=(files, fair, opts, progress, send), daemon=True)
    started = time.perf_counter()
    child.start()
    send.close()
    outcome: Outcome | None = None
    if receive.poll(opts.timeout):
        outcome = _receive(receive)
    else:
        child.terminate()  # SIGTERM: the child stops between two bytecodes and reports how far it got
        if receive.poll(10):
            outcome = _receive(receive)
    child.join(5)
    if child.is_alive():
        child.kill()
        child.join()
    if outcome is None:
        killed = child.exitcode in (-signal.SIGTERM, -signal.SIGKILL)
        outcome = Outcome(
            shape=files.shape.name,
            fair=fair,
            done=False,
            wall_s=time.perf_counter() - started,
            cpu_s=0.0,
            cycles=int(progress[0]),
            mean_cycle_ms=0.0,
            p99_cycle_ms=0.0,
            jobs=0,
            finished=int(progress[2]),
            virtual_h=progress[1] / 3_600_000,
            span_h=0.0,
            error="" if killed else f"the run ended with exit code {child.exitcode} and no figures",
        )
    outcome.load = (before, _load())
    return outcome


def _receive(connection: Connection) -> Outcome | None:
    try:
        received = connection.recv()
    except EOFError:
        return None
    assert isinstance(received, Outcome)
    return received


def _load() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text(encoding="ascii").split()[:3])
    return "?"


# -- output --------------------------------------------------------------------------------------------------------

HEADER = (
    f"{'shape':<11}{'fair':>5}{'wall s':>9}{'CPU s':>8}{'cycles':>9}{'mean ms':>9}{'p99 ms':>9}{'util':>7}"
    f"{'mean wait s':>12}{'p95 wait s':>11}{'preempt':>8}{'Jain':>7}{'lost GPU-h':>11}  load"
)


def row(outcome: Outcome) -> str:
    """One run as a line of the table; a run that did not finish says how far it got instead of decisions."""
    head = (
        f"{outcome.shape:<11}{'on' if outcome.fair else 'off':>5}{outcome.wall_s:>9.1f}{outcome.cpu_s:>8.1f}"
        f"{outcome.cycles:>9,}{outcome.mean_cycle_ms:>9.2f}{outcome.p99_cycle_ms:>9.2f}"
    )
    f = outcome.figures
    if outcome.done:
        tail = (
            f"{f['utilization']:>7.1%}{f['mean_wait_s']:>12,.0f}{f['p95_wait_s']:>11,.0f}{int(f['preemptions']):>8,}"
            f"{f['jain']:>7.3f}{f['lost_gpu_hours']:>11,.1f}"
        )
    elif outcome.error:
        tail = f"  FAILED: {outcome.error}"
    else:
        tail = (
            f"  TIMED OUT: finished {outcome.finished:,} of {outcome.jobs:,} jobs, virtual {outcome.virtual_h:,.0f} h "
            f"of {outcome.span_h:,.0f} h"
        )
    return f"{head}{tail}  {outcome.load[0]} → {outcome.load[1]}"


def _spread(values: Sequence[float], digits: int = 1) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def grid(outcomes: Sequence[Outcome], timeout: float) -> list[str]:
    """Per shape and fair setting: medians and ranges over the runs; then fair on / fair off per shape, of the wall
    and of the CPU medians (on a loaded machine the wall mostly measures the load)."""
    lines = []
    keys = list(dict.fromkeys((o.shape, o.fair) for o in outcomes))
    medians: dict[tuple[str, bool], tuple[float, float] | None] = {}
    """(wall, CPU) medians; None when a run did not finish."""
    stopped: dict[tuple[str, bool], tuple[float, float]] = {}
    """The least replay wall and CPU time of the runs stopped at the timeout."""
    for shape_name, fair in keys:
        runs = [o for o in outcomes if o.shape == shape_name and o.fair == fair]
        done = [o for o in runs if o.done]
        label = f"{shape_name} fair {'on' if fair else 'off'}"
        if len(done) < len(runs):
            far = max(runs, key=lambda o: o.finished)
            medians[shape_name, fair] = None
            cut = [o for o in runs if not o.done]
            stopped[shape_name, fair] = (min(o.wall_s for o in cut), min(o.cpu_s for o in cut))
            lines.append(
                f"{label}: {len(runs) - len(done)} of {len(runs)} runs did not finish in {timeout:.0f} s "
                f"(furthest: {far.finished:,} of {far.jobs:,} jobs, {far.cycles:,} cycles)"
            )
            if not done:
                continue
        walls, cpus = [o.wall_s for o in done], [o.cpu_s for o in done]
        medians.setdefault((shape_name, fair), (statistics.median(walls), statistics.median(cpus)))
        decided = {json.dumps(o.figures, sort_keys=True) for o in done}
        same = "" if len(decided) == 1 else "  (DECISIONS DIFFER BETWEEN RUNS)"
        lines.append(
            f"{label}: wall {_spread(walls)} s, CPU {_spread(cpus)} s, cycles {done[0].cycles:,}, mean cycle "
            f"{_spread([o.mean_cycle_ms for o in done], 2)} ms, p99 {_spread([o.p99_cycle_ms for o in done], 2)} ms "
            f"over {len(done)} run(s){same}"
        )
    for shape_name in dict.fromkeys(s for s, _ in keys):
        if (shape_name, True) not in medians or (shape_name, False) not in medians:
            continue
        on, off = medians[shape_name, True], medians[shape_name, False]
        if off is None:
            lines.append(f"{shape_name}: fair on / off unknown (fair off did not finish)")
        elif on is None:
            wall, cpu = stopped[shape_name, True]
            lines.append(
                f"{shape_name}: fair on / off > {wall / off[0]:.2f}× wall, > {cpu / off[1]:.2f}× CPU (fair sharing "
                "did not finish)"
            )
        else:
            lines.append(f"{shape_name}: fair on / off {on[0] / off[0]:.2f}× wall, {on[1] / off[1]:.2f}× CPU")
    return lines


# -- main ----------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--fair", choices=("on", "off", "both"), default="both")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a run may take (reading included)")
    parser.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs")
    parser.add_argument("--gpus", type=int, default=1600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="run under cProfile and print the top functions")
    parser.add_argument(
        "--sticky-preemptors", action="store_true", help="stickyPreemptors: true in every quota file (Kueue's order)"
    )
    parser.add_argument("--out", type=Path, default=None, help="keep the quota files, mapping and traces here")
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here (after each run)")
    parser.add_argument("--summarize", type=Path, default=None, help="print the grid of a --json file and stop")
    opts = parser.parse_args(argv)
    unknown = [s for s in opts.shapes.split(",") if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)} (of {', '.join(SHAPES)})")
    return opts


def main(argv: Sequence[str] | None = None) -> list[Outcome]:
    opts = parse_args(argv)
    if opts.summarize is not None:
        saved = [Outcome(**{**o, "load": tuple(o["load"])}) for o in json.loads(opts.summarize.read_text())]
        for line in grid(saved, opts.timeout):
            print(line)
        return saved
    fairs = {"on": [True], "off": [False], "both": [False, True]}[opts.fair]
    with _directory(opts.out) as directory:
        prepared = prepare(opts.shapes.split(","), directory, opts.gpus, opts.seed, opts.jobs, opts.sticky_preemptors)
        for files in prepared:
            config = load_config_file(files.configs[True])
            print(
                f"{files.shape.name}: {len(config.teams)} teams, {len(config.cohorts)} cohorts, {levels(config)} "
                f"levels, {files.gpus:,} GPUs; kuota simulate --format itp --trace {files.trace} --mapping "
                f"{files.mapping} --config {files.configs[True]} (fair on; -off.yaml fair off)"
            )
        print(HEADER, flush=True)
        outcomes = []
        for _ in range(opts.runs):  # runs interleaved, so that a noisy spell does not fall on one shape only
            for files in prepared:
                for fair in fairs:
                    outcome = run_one(files, fair, opts)
                    outcomes.append(outcome)
                    print(row(outcome), flush=True)
                    if opts.json is not None:  # after every run: a long session stopped midway keeps what it measured
                        opts.json.write_text(json.dumps([dataclasses.asdict(o) for o in outcomes], indent=1))
                    if outcome.profile:
                        print(outcome.profile, flush=True)
    print()
    for line in grid(outcomes, opts.timeout):
        print(line)
    return outcomes


@contextlib.contextmanager
def _directory(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="shapes-") as temporary:
        yield Path(temporary)


if __name__ == "__main__":
    main()
