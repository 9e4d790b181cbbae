"""Organisation shapes of any size for the engine's growth table: teams, pending work, tree depth, cohort size.

Every team is one of Kueue's large-scale queues (20 cpu nominal, may borrow 100 more, reclaims from its cohort,
preempts lower priority in its own queue) with that mix's workload classes in its proportions (per 50: 35 small
of 1 cpu, 11 medium of 5 cpu, 4 large of 20 cpu, priorities 50 / 100 / 200). Teams sit in leaf cohorts of
`cohort` teams. A 2-level tree is leaf cohorts and their teams (each cohort its own tree, as in Kueue's mix); a
4-level tree puts the leaf cohorts under regions under one organisation root, so every team shares one tree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from admission.workload import Workload
from quota.config import QuotaConfig
from quota.loader import load_config_data
from quota.pod_set import PodSet

# (class, cpu, priority, how many in every 50), Kueue's perf-large-scale generator.
CLASSES = (("small", 1, 50, 35), ("medium", 5, 100, 11), ("large", 20, 200, 4))
PATTERN = [c for c in CLASSES for _ in range(c[3])]


@dataclass(frozen=True)
class Size:
    pending: int
    teams: int
    depth: int = 2
    cohort: int = 100
    fair_sharing: bool = True

    def label(self) -> str:
        fair = "fair" if self.fair_sharing else "classical"
        shape = f"depth {self.depth} / cohorts of {self.cohort}"
        return f"{self.pending:,} pending / {self.teams:,} teams / {shape} / {fair}"

    @classmethod
    def parse(cls, text: str) -> Size:
        """`pending=50000,teams=1000,depth=2,cohort=100,fair=1`; omitted fields keep their defaults."""
        fields: dict[str, Any] = {}
        for part in text.split(","):
            key, _, value = part.partition("=")
            key = key.strip()
            if key == "fair":
                fields["fair_sharing"] = value.strip() not in ("0", "no", "false")
            elif key in ("pending", "teams", "depth", "cohort"):
                fields[key] = int(value)
            else:
                raise ValueError(f"unknown size field {key!r} (pending, teams, depth, cohort, fair)")
        return cls(**fields)


def shape_config(size: Size) -> QuotaConfig:
    if size.depth not in (2, 4):
        raise ValueError("depth is 2 (cohorts of teams) or 4 (organisation, regions, cohorts, teams)")
    leaves = math.ceil(size.teams / size.cohort)
    cohorts: list[dict[str, Any]] = []
    parent_of_leaf: list[str | None] = [None] * leaves
    if size.depth == 4:
        cohorts.append({"name": "org"})
        per_region = max(1, math.isqrt(leaves))
        for region in range(math.ceil(leaves / per_region)):
            cohorts.append({"name": f"region-{region}", "parent": "org"})
        parent_of_leaf = [f"region-{leaf // per_region}" for leaf in range(leaves)]
    for leaf, parent in enumerate(parent_of_leaf):
        cohorts.append({"name": f"cohort-{leaf}", **({"parent": parent} if parent else {})})
    teams = [
        {
            "name": team_name(index),
            "parent": f"cohort-{index // size.cohort}",
            "queues": [f"{team_name(index)}/main"],
            "quotas": [{"flavor": "default", "resources": {"cpu": {"nominal": 20, "borrowingLimit": 100}}}],
            "preemption": {"reclaimWithinCohort": "Any", "withinTeam": "LowerPriority"},
        }
        for index in range(size.teams)
    ]
    data = {
        "flavors": [{"name": "default"}],
        "cohorts": cohorts,
        "teams": teams,
        "fairSharing": {"enabled": size.fair_sharing},
    }
    return load_config_data(data)


def team_name(index: int) -> str:
    return f"team-{index}"


def shape_workloads(size: Size) -> list[Workload]:
    """`pending` workloads spread evenly over the teams (the first teams get one more when it does not divide)."""
    out = []
    for n in range(size.pending):
        index = n % size.teams
        number = n // size.teams
        klass, cpu, priority, _ = PATTERN[(number * 7 + index) % len(PATTERN)]
        team = team_name(index)
        out.append(
            Workload(
                name=f"{team}/{klass}-{number}",
                team=team,
                priority=priority,
                pod_sets=(PodSet("main", 1, {"cpu": cpu * 1000}),),
                created_at=number,
                queue=f"{team}/main",
            )
        )
    return out
