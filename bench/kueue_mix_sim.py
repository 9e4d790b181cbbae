"""Kueue's own scheduler-performance mix (perf-baseline: 5 cohorts × 6 teams, 15,000 workloads) in virtual time.

Every workload is submitted at its generator time, runs for its class's runtime, and the controller decides on a
virtual clock; the figures are the ones Kueue's harness checks (../shared/data/manifests/kueue/
perf-baseline__rangespec.yaml): minimum usage of every team over the run, and average time to admission per
workload class, next to Kueue's thresholds. Engine CPU seconds are the process CPU spent deciding.

    .venv/bin/python bench/kueue_mix_sim.py [--mix baseline|large]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kueue_perf import BASELINE, LARGE, load_mix, load_ranges
from clusters.sim.cluster import SimJob, Simulation


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mix", choices=["baseline", "large"], default="baseline")
    parser.add_argument("--backoff-ms", type=int, default=1_000, help="requeue backoff after a preemption")
    args = parser.parse_args()
    mix = load_mix(BASELINE if args.mix == "baseline" else LARGE)
    jobs = [SimJob(j.workload, j.submit_ms, j.runtime_ms, hook_delay_ms=0) for j in mix.jobs]
    klass = {j.workload.name: j.klass for j in mix.jobs}
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    sim = Simulation(mix.config, jobs, backoff_base_ms=args.backoff_ms)
    stats = sim.run()
    cpu, wall = time.process_time() - cpu_start, time.perf_counter() - wall_start

    waits: dict[str, list[int]] = {}
    for name, at in stats.admit_times.items():
        waits.setdefault(klass[name], []).append(at - sim.jobs[name].submit_ms)
    makespan = stats.last_event - (stats.first_submit or 0)
    work = sum(j.runtime_ms * j.workload.pod_sets[0].requests["cpu"] for j in mix.jobs)
    ideal = work / mix.capacity_milli
    print(f"{args.mix}: {len(mix.config.teams)} teams, {len(mix.jobs)} workloads")
    print(
        f"virtual makespan {makespan / 1000:.1f} s; ideal (capacity-bound) {ideal / 1000:.1f} s;"
        f" ratio {makespan / ideal:.2f}"
    )
    print(f"engine: {cpu:.1f} CPU s, {wall:.1f} s wall for the whole replay")
    ranges = load_ranges() if args.mix == "baseline" else {}
    limits = ranges.get("wlClassesMaxAvgTimeToAdmissionMs", {})
    for name in sorted(waits):
        average = statistics.fmean(waits[name])
        limit = limits.get(name)
        verdict = ""
        if limit is not None:
            verdict = f" (Kueue's limit {limit / 1000:.0f} s: {'met' if average <= limit else 'MISSED'})"
        print(f"  {name:<7} average time to admission {average / 1000:8.1f} s over {len(waits[name])}{verdict}")
    min_usage = stats.min_usage_share()
    floor = ranges.get("clusterQueueClassesMinUsage", {}).get("cq")
    verdict = "" if floor is None else f" (Kueue's floor {floor}%: {'met' if min_usage * 100 >= floor else 'MISSED'})"
    print(f"  minimum team usage over the run {min_usage:.1%}{verdict}")


if __name__ == "__main__":
    main()
