"""The admission engine alone at Kueue's own scale shapes.

For each mix (Kueue's baseline: 30 teams in 5 cohorts, 15,000 workloads; large-scale: 1,000 teams in 10 cohorts,
50,000 workloads) every workload is queued at once, then cycles run until the queues drain, finishing the
oldest running work between cycles so quota keeps turning over. Reported: cycles, decisions per second of
engine time, mean/median/p99 cycle time (snapshot + nomination + decisions), engine time per admission, and
peak memory. The first cycle — all 50,000 pending, every team's head considered — is reported on its own: it is
the figure the target speaks of.

    .venv/bin/python bench/engine.py [--mix baseline|large|both] [--cycles N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.cycle import Verdict
from bench.kueue_perf import BASELINE, LARGE, load_mix
from queues.manager import QueueManager, State


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
        for name in [n for n, s in manager.state.items() if s is State.EVICTING]:
            manager.complete_eviction(name)
        # Work finishes in admission order: free about a third of what runs so the next cycle has room.
        for _ in range(len(running) // 3):
            name = running.popleft()
            if manager.state.get(name) is State.ADMITTED:
                manager.finish(name)
                manager.forget(name)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mix", choices=["baseline", "large", "both"], default="both")
    parser.add_argument("--cycles", type=int, default=400, help="stop after this many cycles")
    args = parser.parse_args()
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
