"""The Microsoft ITP 2021 trace on nodes: single-rack placement with topology on and off, and what node failures
cost with and without checkpoints.

The cluster is `bench/replay_itp.py`'s borrowing cohort (10 clusters as 10 teams, `--gpus` GPUs split by demand),
placed on 8-GPU nodes, 4 a rack, 8 racks a block (as many nodes as the quota fills: 200 for 1,600 GPUs). A job
with more than 8 GPUs (806 of the trace's 69,351) becomes a gang of 8-GPU pods (sim/topology.py).

* placement — the same jobs with `--topology required`, `preferred` and `off`, no failures: multi-node admissions
  and the share placed in a single rack, fragmentation, utilization and waits; wall time, median and range of
  `--runs` runs (preferred: one run).
* failures — `--topology required` with node failures, once with the trace's checkpoints (the ITP default
  mapping: half the jobs checkpoint every 30 minutes) and once with none, over `--seeds` failure seeds: node
  failures, NodeFailure evictions, GPU-hours of work lost to failures (median and range over the seeds).

Node MTBF. Meta's Llama 3 report (Dubey et al., "The Llama 3 Herd of Models", 2024, section 3.3.4) counts 419
unexpected interruptions in a 54-day period of pre-training on 16,384 H100 GPUs, i.e. 2,048 8-GPU servers:
2,048 × 54 / 419 = 264 node-days between interruptions per server, 78 % of them attributed to hardware. That is
the default `--mtbf 6336h` (264 days; every interruption counted as a node failure, so if anything pessimistic
for a modern fleet). `--mtbf 720h` (30 days), the short end of "weeks to months", is run beside it as a harsher,
older fleet. Repair: exponential with a mean of `--repair 24h`, an assumption (the report gives no repair time).
The grace period is nodeFailure's default, 5 minutes.

    .venv/bin/python bench/topology_itp.py [--limit N] [--days D] [--gpus 1600] [--runs 3] [--seeds 0,1,2]
        [--mtbf 6336h,720h] [--repair 24h] [--parts placement,failures]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replay_itp import CLUSTERS, ITP, _identity_mapping, config_for, sized_quotas
from clusters.sim.failures import FailureModel
from quota.duration import parse_duration_ms
from sim.replay import replay
from sim.topology import NodeLayout, NodeSetup, TopologyMode, multi_node_jobs
from sim.traces import TraceJob, read_trace

LAYOUT = NodeLayout(None, gpus_per_node=8, nodes_per_rack=4, racks_per_block=8)


def _spread(values: Sequence[float], digits: int = 1) -> str:
    """Median and range, as the README writes them."""
    if len(values) == 1:
        return f"{values[0]:,.{digits}f}"
    return f"{statistics.median(values):,.{digits}f} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


def _run(config: Any, jobs: list[TraceJob], setup: NodeSetup) -> tuple[float, dict[str, Any]]:
    result = replay(config, jobs, nodes=setup)
    summary = result.summary()
    waits = [w for s in result.stats.teams.values() for w in s.waits_ms]
    summary["mean_wait_s"] = statistics.fmean(waits) / 1000 if waits else 0.0
    return result.wall_seconds, summary


def placement(config: Any, jobs: list[TraceJob], runs: int) -> None:
    print(f"\n== placement: {multi_node_jobs(jobs, LAYOUT.gpus_per_node)} multi-node jobs of {len(jobs)}", flush=True)
    header = (
        f"{'topology':<10}{'wall s':>26}{'finished':>10}{'util':>7}{'mean wait s':>13}{'multi-node':>12}"
        f"{'one rack':>10}{'share':>8}{'stranded':>10}{'free racks':>12}"
    )
    print(header)
    for mode in (TopologyMode.required, TopologyMode.preferred, TopologyMode.off):
        walls: list[float] = []
        summary: dict[str, Any] = {}
        # The wall time compares topology on and off; preferred runs once, for its placement figures.
        for _ in range(runs if mode is not TopologyMode.preferred else 1):
            wall, summary = _run(config, jobs, NodeSetup(LAYOUT, mode))
            walls.append(wall)
        nodes = summary["nodes"]
        print(
            f"{mode.value:<10}{_spread(walls):>26}{summary['finished']:>10}{summary['utilization']:>7.1%}"
            f"{summary['mean_wait_s']:>13,.0f}{nodes['multi_node_admissions']:>12}{nodes['single_rack_admissions']:>10}"
            f"{nodes['single_rack_share']:>8.1%}{nodes['mean_stranded_free_gpu_share']:>10.1%}"
            f"{nodes['mean_free_racks']:>12}",
            flush=True,
        )


def failures(config: Any, jobs: list[TraceJob], mtbfs: list[str], repair: str, seeds: list[int]) -> None:
    print(f"\n== failures: topology required, repair exponential, mean {repair}; seeds {seeds}", flush=True)
    header = (
        f"{'MTBF':<8}{'checkpoints':<13}{'failures':>22}{'evictions':>20}{'lost to failures GPU-h':>30}"
        f"{'all lost GPU-h':>28}{'util':>22}"
    )
    print(header)
    without = [dataclasses.replace(job, checkpoint_interval_ms=None) for job in jobs]
    for mtbf in mtbfs:
        for label, trace in (("as mapped", jobs), ("none", without)):
            rows: dict[str, list[float]] = {}
            for seed in seeds:
                model = FailureModel(parse_duration_ms(mtbf), parse_duration_ms(repair), True, seed)
                _, summary = _run(config, trace, NodeSetup(LAYOUT, TopologyMode.required, model))
                nodes = summary["nodes"]
                for key, value in (
                    ("failures", nodes["node_failures"]),
                    ("evictions", nodes["node_failure_evictions"]),
                    ("lost", nodes["failure_lost_gpu_hours"]),
                    ("all", summary["lost_gpu_hours"]),
                    ("util", 100 * summary["utilization"]),
                ):
                    rows.setdefault(key, []).append(float(value))
            print(
                f"{mtbf:<8}{label:<13}{_spread(rows['failures'], 0):>22}{_spread(rows['evictions'], 0):>20}"
                f"{_spread(rows['lost']):>30}{_spread(rows['all']):>28}{_spread(rows['util']):>22}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs of the file")
    parser.add_argument("--days", type=float, default=None, help="only jobs submitted in the first D days")
    parser.add_argument("--gpus", type=int, default=1600)
    parser.add_argument("--seed", type=int, default=0, help="the mapping's draws (classes, checkpoints)")
    parser.add_argument("--runs", type=int, default=3, help="placement runs per mode, for the wall time")
    parser.add_argument("--seeds", default="0,1,2", help="failure seeds")
    parser.add_argument("--mtbf", default="6336h,720h")
    parser.add_argument("--repair", default="24h")
    parser.add_argument("--parts", default="placement,failures")
    args = parser.parse_args()

    base = config_for("borrowing", {name: 1 for name in CLUSTERS})
    jobs = read_trace(ITP, "itp", _identity_mapping(base), base, seed=args.seed, limit=args.limit)
    if args.days is not None:
        jobs = [job for job in jobs if job.submit_ms < args.days * 86_400_000]
    config = config_for("borrowing", sized_quotas(jobs, args.gpus))
    load = os.getloadavg()
    print(f"{len(jobs)} jobs; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start", flush=True)
    started = time.perf_counter()
    parts = args.parts.split(",")
    if "placement" in parts:
        placement(config, jobs, args.runs)
    if "failures" in parts:
        seeds = [int(s) for s in args.seeds.split(",")]
        failures(config, jobs, args.mtbf.split(","), args.repair, seeds)
    load = os.getloadavg()
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()
