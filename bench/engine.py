"""The admission engine alone at Kueue's own scale shapes.

For each mix (Kueue's baseline: 30 teams in 5 cohorts, 15,000 workloads; large-scale: 1,000 teams in 10 cohorts,
50,000 workloads) every workload is queued at once, then cycles run until the queues drain, finishing the
oldest running work between cycles so quota keeps turning over. Reported: cycles, decisions per second of
engine time, mean/median/p99 cycle time (snapshot + nomination + decisions), engine time per admission, and
peak memory. The first cycle — all 50,000 pending, every team's head considered — is reported on its own: it is
the figure the target speaks of.

With `--growth` (or one `--size` per shape) it measures how a cycle grows instead, on bench/growth_shape.py's
shapes: pending work, teams, tree depth and cohort size. Each size runs `--repeat` times, each time in a fresh
process (so peak memory and the garbage collector's state are its own), and the table gives the median and the
range of: the first cycle; the mean and p99 of `--cycles` cycles with a third of the running work finishing
between cycles; the saturated cycle (on a second manager where nothing ever finishes: cycles run until one admits
nothing, and the mean of the next few is the figure: every quota full, every head blocked or waiting for its
victims, which are never let go); peak resident memory; and the share of
cycle time spent collecting garbage. Cycle times are CPU time of the process (the machine is shared: wall time
measures the neighbours too).

    .venv/bin/python bench/engine.py [--mix baseline|large|both] [--cycles N]
    .venv/bin/python bench/engine.py --growth [--repeat N] [--cycles N]
    .venv/bin/python bench/engine.py --size pending=200000,teams=5000,depth=4,cohort=500[,fair=0] [--repeat N]
        [--tuned-collector] [--park-equivalent]

`--tuned-collector` runs the collector as `kuota serve` does (queues/heap.py); `--park-equivalent` runs the queue
manager as the controller builds it, parking a head's look-alikes with it when it cannot be admitted.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.cycle import Verdict
from bench.growth_shape import Size, shape_config, shape_workloads
from bench.kueue_perf import BASELINE, LARGE, load_mix
from queues.heap import freeze_what_is_alive, tune_collector
from queues.manager import QueueManager, State

#: The growth table's sizes: pending work at 1,000 teams, teams at 50,000 pending, the 4-level tree, cohort size
#: at 5,000 teams, and the goal's 5,000 teams with 200,000 pending; fair sharing on (the nominations' tournament and
#: the fair preemption search run), and the same shapes' classical rows where they differ in kind.
GROWTH = [
    Size(10_000, 1_000),
    Size(50_000, 1_000),
    Size(200_000, 1_000),
    Size(50_000, 100),
    Size(50_000, 5_000),
    Size(50_000, 1_000, depth=4),
    Size(50_000, 5_000, cohort=10),
    Size(50_000, 5_000, cohort=500),
    Size(200_000, 5_000, cohort=500),
    Size(200_000, 5_000, depth=4, cohort=500),
    Size(200_000, 5_000, cohort=500, fair_sharing=False),
]
SATURATED_CYCLES = 4
FILL_CYCLES = 50


def _finish_third(manager: QueueManager, running: deque[str]) -> None:
    """Victims leave; work finishes in admission order: about a third of what runs, so the next cycle has room."""
    for name in [n for n, s in manager.state.items() if s is State.EVICTING]:
        manager.complete_eviction(name)
    for _ in range(len(running) // 3):
        name = running.popleft()
        if manager.state.get(name) is State.ADMITTED:
            manager.finish(name)
            manager.forget(name)


def run(path: Path, max_cycles: int) -> dict[str, float]:
    mix = load_mix(path)
    manager = QueueManager(mix.config)
    for job in mix.jobs:
        manager.add(job.workload)
    running: deque[str] = deque()
    times: list[float] = []
    decisions = admissions = 0
    first_cycle = 0.0
    first_heads = 0
    for cycle in range(max_cycles):
        heads = len(manager.heads())
        if heads == 0:
            break
        start = time.perf_counter()
        result = manager.schedule(now=cycle)
        elapsed = time.perf_counter() - start
        if cycle == 0:
            first_cycle, first_heads = elapsed, heads
        times.append(elapsed)
        decisions += len(result.decisions)
        for d in result.decisions:
            if d.verdict is Verdict.ADMITTED:
                admissions += 1
                running.append(d.workload.name)
        _finish_third(manager, running)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    total = sum(times)
    return {
        "teams": len(mix.config.teams),
        "workloads": len(mix.jobs),
        "cycles": len(times),
        "first_cycle_ms": first_cycle * 1000,
        "first_cycle_heads": first_heads,
        "mean_cycle_ms": statistics.fmean(times) * 1000,
        "median_cycle_ms": statistics.median(times) * 1000,
        "p99_cycle_ms": sorted(times)[int(len(times) * 0.99)] * 1000 if times else 0.0,
        "decisions_per_s": decisions / total if total else 0.0,
        "admissions": admissions,
        "ms_per_admission": total * 1000 / admissions if admissions else 0.0,
        "peak_mib": peak / 2**20,
    }


class _Collections:
    """CPU time the garbage collector spends, from its own start/stop callbacks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start
            self.full += info["generation"] == 2


def _timed(collections: _Collections, step: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds of `step`, of which collecting garbage)."""
    before = collections.seconds
    start = time.process_time()
    step()
    return time.process_time() - start, collections.seconds - before


def grow(
    size: Size, cycles: int, progress: bool = False, saturate: bool = True, tuned: bool = False, park: bool = False
) -> dict[str, float]:
    """One size, in this process: the figures of the growth table (`progress`: each cycle on stderr; `tuned` and
    `park`: see `_Cycles`).

    Turnover and saturation run on two managers built alike: with a third finishing between cycles the pending
    work of a small queue may run out before any quota is full."""
    collections = _Collections()
    gc.callbacks.append(collections)
    turning = _Cycles(size, collections, progress, tuned, park)
    heads = len(turning.manager.heads())
    first, first_gc, first_admitted = turning.cycle()
    turnover: list[tuple[float, float, int]] = []
    for _ in range(cycles):
        _finish_third(turning.manager, turning.running)
        turnover.append(turning.cycle())
    del turning
    gc.collect()
    filled = saturated_heads = 0
    saturated: list[tuple[float, float, int]] = []
    if saturate:
        filling = _Cycles(size, collections, progress, tuned, park)
        while filled < FILL_CYCLES and filling.cycle()[2]:  # nothing finishes: fill every quota first
            filled += 1
        saturated = [filling.cycle() for _ in range(SATURATED_CYCLES)]
        saturated_heads = len(filling.manager.heads())
    gc.callbacks.remove(collections)
    times = sorted(t for t, _, _ in turnover)
    busy = [first, *times, *(t for t, _, _ in saturated)]
    collected = first_gc + sum(g for _, g, _ in turnover) + sum(g for _, g, _ in saturated)
    return {
        "heads": heads,
        "first_ms": first * 1000,
        "first_admitted": first_admitted,
        "mean_ms": statistics.fmean(times) * 1000,
        "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))] * 1000,
        "saturated_ms": statistics.fmean(t for t, _, _ in saturated) * 1000 if saturated else float("nan"),
        "saturated_heads": saturated_heads,
        "saturated_admitted": sum(a for _, _, a in saturated),
        "filling_cycles": filled,
        "gc_share": collected / sum(busy),
        "full_collections": collections.full,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        # What the run was, as measured (not as asked): the young generation's threshold and the parking.
        "collector_threshold": gc.get_threshold()[0],
        "park_equivalent": park,
    }


class _Cycles:
    """A manager with every workload of `size` queued, and its cycles timed. `tuned`: the collector as `kuota
    serve` runs it (larger thresholds from start-up, everything alive frozen after the first large load). `park`:
    the manager as the controller builds it, parking a head's look-alikes with it when it cannot be admitted
    (Kueue's equivalence parking); without, the manager of scenario runs, which tries every look-alike in turn."""

    def __init__(self, size: Size, collections: _Collections, progress: bool, tuned: bool, park: bool) -> None:
        self.manager = QueueManager(shape_config(size), park_equivalent=park)
        for workload in shape_workloads(size):
            self.manager.add(workload)
        if tuned:
            tune_collector()
            freeze_what_is_alive()
        self.collections = collections
        self.progress = progress
        self.running: deque[str] = deque()
        self.clock = 0

    def cycle(self) -> tuple[float, float, int]:
        """(CPU seconds, of which collecting garbage, admissions)."""
        admitted = 0

        def step() -> None:
            nonlocal admitted
            result = self.manager.schedule(now=self.clock)
            for d in result.decisions:
                if d.verdict is Verdict.ADMITTED:
                    admitted += 1
                    self.running.append(d.workload.name)

        seconds, collecting = _timed(self.collections, step)
        self.clock += 1
        if self.progress:
            print(f"cycle {self.clock}: {seconds * 1000:.0f} ms, {admitted} admitted", file=sys.stderr, flush=True)
        return seconds, collecting, admitted


def _spread(values: list[float], unit: str = "", digits: int = 1) -> str:
    if any(math.isnan(v) for v in values):
        return "—"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}{unit}"
    return f"{statistics.median(values):.{digits}f}{unit} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def growth_table(
    sizes: list[Size], repeat: int, cycles: int, saturate: bool = True, tuned: bool = False, park: bool = False
) -> None:
    """Every size `repeat` times, each in a fresh interpreter, then the table of medians and ranges."""
    with open("/proc/loadavg") as loadavg:
        print(f"load average before: {' '.join(loadavg.read().split()[:3])}")
    collector = "the controller's collector settings" if tuned else "Python's default collector"
    parking = "look-alikes parked with their head (the controller's manager)" if park else "no equivalence parking"
    print(
        f"{repeat} run(s) per size, median (range); CPU ms per cycle; {cycles} turnover cycles; {collector}; {parking}"
    )
    header = "| size | heads | first cycle | mean | p99 | saturated (heads) | peak MiB | GC share |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for size in sizes:
        runs = []
        for _ in range(repeat):
            child = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    json.dumps(asdict(size)),
                    "--cycles",
                    str(cycles),
                    *([] if saturate else ["--without-saturated"]),
                    *(["--tuned-collector"] if tuned else []),
                    *(["--park-equivalent"] if park else []),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            runs.append(json.loads(child.stdout))
        column = {key: [float(r[key]) for r in runs] for key in runs[0]}
        saturated = f"{_spread(column['saturated_ms'])} ({int(column['saturated_heads'][0]):,})"
        print(
            f"| {size.label()} | {int(column['heads'][0]):,} | {_spread(column['first_ms'])} |"
            f" {_spread(column['mean_ms'])} | {_spread(column['p99_ms'])} | {saturated} |"
            f" {_spread(column['peak_mib'], digits=0)} | {_spread([g * 100 for g in column['gc_share']], '%', 0)} |",
            flush=True,
        )
    with open("/proc/loadavg") as loadavg:
        print(f"load average after: {' '.join(loadavg.read().split()[:3])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mix", choices=["baseline", "large", "both"], default="both")
    parser.add_argument("--cycles", type=int, help="stop after this many cycles (400; 20 turnover cycles with sizes)")
    parser.add_argument("--growth", action="store_true", help="the growth table over the default sizes")
    parser.add_argument("--size", action="append", type=Size.parse, default=[], help="one size (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (growth table)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--progress", action="store_true", help="with --one: each cycle's time on stderr")
    parser.add_argument(
        "--tuned-collector", action="store_true", help="the collector as kuota serve tunes it (queues/heap.py)"
    )
    parser.add_argument(
        "--without-saturated", action="store_true", help="skip the saturated cycles (fair preemption searches)"
    )
    parser.add_argument(
        "--park-equivalent",
        action="store_true",
        help="the queue manager as the controller builds it: a head that cannot be admitted parks its look-alikes",
    )
    args = parser.parse_args()
    if args.one is not None:
        size = Size(**json.loads(args.one))
        saturate, tuned, park = not args.without_saturated, args.tuned_collector, args.park_equivalent
        figures = grow(size, args.cycles or 20, args.progress, saturate, tuned, park)
        print(json.dumps(figures))
        return
    if args.growth or args.size:
        growth_table(
            args.size or GROWTH,
            args.repeat,
            args.cycles or 20,
            not args.without_saturated,
            args.tuned_collector,
            args.park_equivalent,
        )
        return
    args.cycles = args.cycles or 400
    mixes = {"baseline": BASELINE, "large": LARGE}
    chosen = list(mixes) if args.mix == "both" else [args.mix]
    for name in chosen:
        figures = run(mixes[name], args.cycles)
        print(f"== {name}: {figures['teams']} teams, {figures['workloads']} workloads")
        print(
            f"  first cycle: {figures['first_cycle_ms']:.1f} ms over {figures['first_cycle_heads']} heads"
            f" (target < 200 ms at 1,000 teams / 50,000 pending)"
        )
        print(
            f"  {figures['cycles']} cycles: mean {figures['mean_cycle_ms']:.1f} ms,"
            f" median {figures['median_cycle_ms']:.1f} ms, p99 {figures['p99_cycle_ms']:.1f} ms"
        )
        print(
            f"  {figures['decisions_per_s']:.0f} decisions/s of engine time; {figures['admissions']} admissions,"
            f" {figures['ms_per_admission']:.3f} ms engine time per admission (target < 1 ms)"
        )
        print(f"  peak resident memory (whole process) {figures['peak_mib']:.1f} MiB")


if __name__ == "__main__":
    main()
