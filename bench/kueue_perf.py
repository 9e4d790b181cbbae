"""Kueue's scheduler-performance mixes (test/performance/scheduler/configs) as kuota configs and workloads.

A generator file lists cohort classes × queue sets (nominal quota, borrowing limit, preemption policies) and, per
queue, workload sets (count, creation interval, runtime, priority, request). Kueue's harness requests `cpu`
in whole units from a single flavor; so does this.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from admission.workload import Workload
from quota.config import QuotaConfig
from quota.loader import load_config_data
from quota.pod_set import PodSet

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
KUEUE = SHARED / "data" / "manifests" / "kueue"
BASELINE = KUEUE / "perf-baseline__generator.yaml"
LARGE = KUEUE / "perf-large-scale__generator.yaml"
BASELINE_RANGES = KUEUE / "perf-baseline__rangespec.yaml"


@dataclass(frozen=True)
class PerfJob:
    workload: Workload
    submit_ms: int
    runtime_ms: int
    klass: str


@dataclass(frozen=True)
class PerfMix:
    config: QuotaConfig
    jobs: list[PerfJob]
    capacity_milli: int
    """Total nominal cpu of all teams: the most that can run at once."""


def load_mix(path: Path = BASELINE) -> PerfMix:
    spec: dict[str, Any] = yaml.safe_load(path.read_text())
    cohorts: list[dict[str, Any]] = []
    teams: list[dict[str, Any]] = []
    jobs: list[PerfJob] = []
    capacity = 0
    for cohort_class in spec["cohorts"]:
        for c in range(cohort_class["count"]):
            cohort = f"{cohort_class['className']}-{c}"
            cohorts.append({"name": cohort})
            for queue_set in cohort_class["queuesSets"]:
                for q in range(queue_set["count"]):
                    team = f"{cohort}-{queue_set['className']}-{q}"
                    capacity += int(queue_set["nominalQuota"]) * 1000
                    teams.append(
                        {
                            "name": team,
                            "parent": cohort,
                            "queues": [f"{team}/main"],
                            "quotas": [
                                {
                                    "flavor": "default",
                                    "resources": {
                                        "cpu": {
                                            "nominal": queue_set["nominalQuota"],
                                            "borrowingLimit": queue_set["borrowingLimit"],
                                        }
                                    },
                                }
                            ],
                            "preemption": {
                                "reclaimWithinCohort": queue_set.get("reclaimWithinCohort", "Never"),
                                "withinTeam": queue_set.get("withinClusterQueue", "Never"),
                            },
                        }
                    )
                    jobs.extend(_team_jobs(team, queue_set["workloadsSets"]))
    config = load_config_data({"flavors": [{"name": "default"}], "cohorts": cohorts, "teams": teams})
    jobs.sort(key=lambda j: (j.submit_ms, j.workload.name))
    return PerfMix(config, jobs, capacity)


def _team_jobs(team: str, sets: list[dict[str, Any]]) -> list[PerfJob]:
    out = []
    for s_index, workload_set in enumerate(sets):
        for n in range(workload_set["count"]):
            submit = n * int(workload_set["creationIntervalMs"])
            for w in workload_set["workloads"]:
                name = f"{team}/{w['className']}-{s_index}-{n}"
                workload = Workload(
                    name=name,
                    team=team,
                    priority=int(w["priority"]),
                    pod_sets=(PodSet("main", 1, {"cpu": int(w["request"]) * 1000}),),
                    created_at=submit,
                    queue=f"{team}/main",
                )
                out.append(PerfJob(workload, submit, int(w["runtimeMs"]), w["className"]))
    return out


def load_ranges(path: Path = BASELINE_RANGES) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))
