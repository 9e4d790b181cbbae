"""Hypothesis strategies: random cohort trees, quotas and workloads that are valid quota files."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from admission.workload import Workload
from quota.config import QuotaConfig
from quota.loader import load_config_data
from quota.pod_set import PodSet

FLAVORS = ("h100", "a100")
RESOURCES = ("nvidia.com/gpu", "cpu")
WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "Any")


@st.composite
def quota_configs(draw: st.DrawFn, fair_sharing: bool | None = None) -> QuotaConfig:
    cohort_count = draw(st.integers(0, 3))
    cohorts: list[dict[str, Any]] = []
    for index in range(cohort_count):
        cohort: dict[str, Any] = {"name": f"c{index}"}
        if index > 0 and draw(st.booleans()):
            cohort["parent"] = f"c{draw(st.integers(0, index - 1))}"
        if draw(st.integers(0, 3)) == 0:
            cohort["quotas"] = [
                {"flavor": FLAVORS[0], "resources": {RESOURCES[0]: _limits(draw, "parent" in cohort, 4)}}
            ]
        cohorts.append(cohort)
    flavors = list(FLAVORS[: draw(st.integers(1, 2))])
    resources = list(RESOURCES[: draw(st.integers(1, 2))])
    teams = []
    for index in range(draw(st.integers(1, 5))):
        parent = f"c{draw(st.integers(0, cohort_count - 1))}" if cohort_count and draw(st.integers(0, 4)) else None
        team: dict[str, Any] = {
            "name": f"t{index}",
            "queues": [f"ns{index}/q"],
            "quotas": [
                {"flavor": f, "resources": {r: _limits(draw, parent is not None, 8) for r in resources}}
                for f in flavors
            ],
            "preemption": {
                "withinTeam": draw(st.sampled_from(WITHIN)),
                "reclaimWithinCohort": draw(st.sampled_from(RECLAIM)),
                "borrowWithinCohort": draw(
                    st.sampled_from(
                        [
                            {"policy": "Never"},
                            {"policy": "LowerPriority"},
                            {"policy": "LowerPriority", "maxPriorityThreshold": 1},
                        ]
                    )
                ),
            },
            "flavorFungibility": {
                "whenCanBorrow": draw(st.sampled_from(["MayStopSearch", "TryNextFlavor"])),
                "whenCanPreempt": draw(st.sampled_from(["MayStopSearch", "TryNextFlavor"])),
                "preference": draw(st.sampled_from(["BorrowingOverPreemption", "PreemptionOverBorrowing"])),
            },
            "queueingStrategy": draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
            "fairSharing": {"weight": draw(st.sampled_from([0, 1, 1, 2]))},
        }
        if parent is not None:
            team["parent"] = parent
        teams.append(team)
    enabled = draw(st.booleans()) if fair_sharing is None else fair_sharing
    body = {
        "flavors": [{"name": f} for f in FLAVORS],
        "priorityClasses": [
            {"name": "low", "value": 0},
            {"name": "high", "value": 10},
            {"name": "pinned", "value": 5, "preemptible": False},
        ],
        "fairSharing": {"enabled": enabled},
        "cohorts": cohorts,
        "teams": teams,
    }
    return load_config_data(body)


def _limits(draw: st.DrawFn, has_parent: bool, most: int) -> dict[str, int]:
    nominal = draw(st.integers(0, most))
    limits = {"nominal": nominal}
    if has_parent and draw(st.booleans()):
        limits["borrowingLimit"] = draw(st.integers(0, most))
    if has_parent and draw(st.booleans()):
        limits["lendingLimit"] = draw(st.integers(0, nominal))
    return limits


@st.composite
def workloads(
    draw: st.DrawFn, config: QuotaConfig, count: int, *, small: bool = False, prefix: str = "w"
) -> list[Workload]:
    """`small`: one-pod jobs of at most two units of each resource, many look-alikes per team as in real traces."""
    out = []
    resources = sorted({r for t in config.teams for g in t.groups() for r in g.covered_resources})
    for index in range(count):
        team = draw(st.sampled_from(config.teams))
        klass = draw(st.sampled_from(config.priority_classes))
        pod_sets = []
        if small:
            pod_sets.append(PodSet("main", 1, {r: draw(st.integers(0, 2)) * 1000 for r in resources}))
        for p_index in range(0 if small else draw(st.integers(1, 2))):
            pods = draw(st.integers(1, 4))
            requests = {r: draw(st.integers(0, 3)) * 1000 for r in resources}
            min_count = draw(st.one_of(st.none(), st.integers(1, pods)))
            pod_sets.append(PodSet(f"p{p_index}", pods, requests, min_count))
        out.append(
            Workload(
                name=f"{prefix}{index:03d}",
                team=team.name,
                priority=klass.value,
                priority_class=klass.name,
                preemptible=klass.preemptible,
                pod_sets=tuple(pod_sets),
                created_at=draw(st.integers(0, 20)),
                queue=team.queues[0],
            )
        )
    return out
