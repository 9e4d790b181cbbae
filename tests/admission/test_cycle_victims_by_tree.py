"""A cycle judges each head with only its own tree's victims taken out, not every victim chosen so far.

`admission/cycle.py` `_Preempted.affecting` relies on usage living on the path from a team to its root: a victim
in another tree changes neither whether a head fits nor what a search for it finds. The plain reference takes out
every victim of the cycle for every head, as the engine once did; on random forests (up to three cohorts, teams in
them or alone, borrowing and lending limits, every preemption policy, fair sharing on or off) with running work,
evictions under way and new heads, both must give the same decisions, flavors, counts and victims.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from admission import cycle
from admission.cycle import run_cycle
from admission.workload import Workload
from quota.config import QuotaConfig
from quota.loader import load_config_data
from quota.tree import Node
from tests.admission.strategies import quota_configs, workloads
from tests.admission.test_properties import SETTINGS, drive


def _every_victim(self: cycle._Preempted, team: Node, placed: bool) -> Iterable[Workload]:
    return self.names.values()


@st.composite
def busy_forests(draw: st.DrawFn) -> QuotaConfig:
    """Two or three trees of two or three teams under one cohort, all preempting freely: so that several heads
    of one tree preempt in the same cycle, each judged with the victims chosen before it already gone."""
    cohorts: list[dict[str, Any]] = []
    teams: list[dict[str, Any]] = []
    for tree in range(draw(st.integers(2, 3))):
        cohorts.append({"name": f"c{tree}"})
        for index in range(draw(st.integers(2, 3))):
            limits: dict[str, int] = {"nominal": draw(st.integers(0, 4))}
            if draw(st.booleans()):
                limits["borrowingLimit"] = draw(st.integers(0, 4))
            if draw(st.booleans()):
                limits["lendingLimit"] = draw(st.integers(0, limits["nominal"]))
            teams.append(
                {
                    "name": f"t{tree}{index}",
                    "parent": f"c{tree}",
                    "queues": [f"ns{tree}{index}/q"],
                    "quotas": [{"flavor": "f", "resources": {"nvidia.com/gpu": limits}}],
                    "preemption": {
                        "withinTeam": draw(st.sampled_from(["LowerPriority", "LowerOrNewerEqualPriority"])),
                        "reclaimWithinCohort": draw(st.sampled_from(["Any", "LowerPriority"])),
                        "borrowWithinCohort": {"policy": draw(st.sampled_from(["Never", "LowerPriority"]))},
                    },
                }
            )
    body = {
        "flavors": [{"name": "f"}],
        "priorityClasses": [{"name": "low", "value": 0}, {"name": "high", "value": 10}],
        "fairSharing": {"enabled": draw(st.booleans())},
        "cohorts": cohorts,
        "teams": teams,
    }
    return load_config_data(body)


@SETTINGS
@given(data=st.data())
def test_taking_out_only_the_own_trees_victims_decides_as_taking_out_all(data: st.DataObject) -> None:
    config = data.draw(st.one_of(quota_configs(), busy_forests()))
    # Many small running jobs, then more work: heads that preempt, often two in one tree in one cycle.
    first = data.draw(workloads(config, data.draw(st.integers(4, 24)), small=True))
    manager = drive(config, first, cycles=3)
    top = max(c.value for c in config.priority_classes)
    late = data.draw(workloads(config, data.draw(st.integers(2, 10)), small=data.draw(st.booleans()), prefix="late"))
    for workload in late:
        manager.add(replace(workload, priority=top) if data.draw(st.booleans()) else workload)
    heads = manager.heads()

    def decide() -> list[tuple[object, ...]]:
        snapshot = manager.snapshot()
        snapshot.now = 5000
        result = run_cycle(snapshot, heads)
        return [
            (d.workload.name, str(d.verdict), d.flavors, d.counts, sorted(t.workload.name for t in d.victims))
            for d in result.decisions
        ]

    kept = decide()
    with mock.patch.object(cycle._Preempted, "affecting", _every_victim):
        reference = decide()
    assert kept == reference
