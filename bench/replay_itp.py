"""Replay the Microsoft ITP 2021 trace (69,351 jobs, 10 clusters as 10 teams) under three policies, side by side.

The trace has no capacity, so the cluster is sized from the trace itself: `--gpus` GPUs in all (default 1,600,
about 1.4× the trace's average demand of 1,136 GPUs), split between the teams in proportion to their GPU-hours.
Policies, all on the same jobs (classes drawn with the default ITP mapping and `--seed`):

* fifo-no-borrowing — every team standalone, StrictFIFO: a team only ever uses its own quota;
* borrowing — one cohort, BestEffortFIFO, idle quota lent to whoever needs it, owners reclaim it by preemption;
* fair-sharing — the same cohort with fair sharing (DRS ordering and fair preemption) and fair-share credits.

Printed per policy: wall seconds, jobs finished, utilization, mean and p95 wait, Jain's fairness, preemptions and the
GPU-hours they lost. `--victims spec` orders victims by the spec alone (default: checkpoint-aware, kuota's rule).

    .venv/bin/python bench/replay_itp.py [--limit N] [--gpus 1600] [--policies fifo-no-borrowing,borrowing,...]
        [--victims checkpoint-aware|spec]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quota.config import QuotaConfig
from quota.loader import load_config_data
from sim.replay import replay
from sim.traces import TraceJob, parse_mapping, read_trace

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces" / "msft-itp-2021"
ITP = TRACE / "itp_2021_all_clusters.csv"
CLUSTERS = [f"cluster{n:02d}" for n in range(1, 11)]
POLICIES = ("fifo-no-borrowing", "borrowing", "fair-sharing")


def config_for(policy: str, nominal: dict[str, int]) -> QuotaConfig:
    return load_config_data(config_body(policy, nominal))


def config_body(policy: str, nominal: dict[str, int]) -> dict[str, Any]:
    """The quota file of `policy` as YAML-ready data."""
    teams: list[dict[str, Any]] = []
    for name in CLUSTERS:
        team: dict[str, Any] = {
            "name": name,
            "queues": [f"{name}/default"],
            "quotas": [{"flavor": "gpu", "resources": {"nvidia.com/gpu": {"nominal": nominal[name]}}}],
            "queueingStrategy": "StrictFIFO" if policy == "fifo-no-borrowing" else "BestEffortFIFO",
        }
        if policy != "fifo-no-borrowing":
            team["parent"] = "itp"
            team["preemption"] = {"withinTeam": "LowerPriority", "reclaimWithinCohort": "Any"}
        teams.append(team)
    body: dict[str, Any] = {
        "flavors": [{"name": "gpu"}],
        "priorityClasses": [
            {"name": "production", "value": 1000},
            {"name": "research", "value": 100, "default": True},
            {"name": "development", "value": 10, "checkpointTimeout": "2m"},
        ],
        "fairSharing": {"enabled": policy == "fair-sharing", "usageHalfLife": "24h"},
        "cohorts": [{"name": "itp"}] if policy != "fifo-no-borrowing" else [],
        "teams": teams,
    }
    return body


def sized_quotas(jobs: list[TraceJob], gpus: int) -> dict[str, int]:
    demand = {name: 0 for name in CLUSTERS}
    for job in jobs:
        demand[job.team] += job.gpus * job.duration_ms
    total = sum(demand.values()) or 1
    # Every team gets at least the largest job it ever submits, or its queue could block forever.
    largest = {name: 0 for name in CLUSTERS}
    for job in jobs:
        largest[job.team] = max(largest[job.team], job.gpus)
    return {name: max(largest[name], round(gpus * demand[name] / total)) for name in CLUSTERS}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs")
    parser.add_argument("--gpus", type=int, default=1600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--victims", choices=("checkpoint-aware", "spec"), default="checkpoint-aware")
    args = parser.parse_args()

    base = config_for("borrowing", {name: 1 for name in CLUSTERS})
    started = time.perf_counter()
    jobs = read_trace(ITP, "itp", _identity_mapping(base), base, seed=args.seed, limit=args.limit)
    print(f"read {len(jobs)} jobs in {time.perf_counter() - started:.1f} s")
    quotas = sized_quotas(jobs, args.gpus)
    print("nominal GPUs per team:", ", ".join(f"{k[-2:]}={v}" for k, v in quotas.items()))
    header = (
        f"{'policy':<20}{'wall s':>8}{'finished':>10}{'util':>7}{'mean wait s':>13}{'p95 wait s':>12}"
        f"{'Jain':>7}{'preempt':>9}{'lost GPU-h':>12}"
    )
    rows = []
    for policy in args.policies.split(","):
        config = config_for(policy, quotas)
        result = replay(config, jobs, checkpoint_aware_victims=args.victims == "checkpoint-aware")
        summary = result.summary()
        waits = [w for s in result.stats.teams.values() for w in s.waits_ms]
        mean = statistics.fmean(waits) / 1000 if waits else 0.0
        p95 = sorted(waits)[int(len(waits) * 0.95)] / 1000 if waits else 0.0
        preemptions = sum(s.preemptions for s in result.stats.teams.values())
        rows.append(
            f"{policy:<20}{result.wall_seconds:>8.1f}{summary['finished']:>10}{summary['utilization']:>7.1%}"
            f"{mean:>13.0f}{p95:>12.0f}{summary['jain_fairness']:>7.3f}{preemptions:>9}"
            f"{summary['lost_gpu_hours']:>12,.1f}"
        )
        print(rows[-1], flush=True)
    print()
    print(f"victims: {args.victims}")
    print(header)
    for row in rows:
        print(row)


def _identity_mapping(config: QuotaConfig) -> Any:
    """Each ITP cluster is the team of the same name; priority classes and checkpoints as the ITP default."""
    lines = ["team: {column: cluster, map: {" + ", ".join(f"{c}: {c}" for c in CLUSTERS) + "}}"]
    return parse_mapping("\n".join(lines), "itp-identity")


if __name__ == "__main__":
    main()
