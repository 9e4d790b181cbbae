"""Property: a topology that never constrains changes nothing. The same random quota trees and workloads as the
engine's other property tests (cohorts, borrowing and lending limits, fair sharing, partial admission, every
preemption policy), run once as they are and once with every flavor on a topology whose one node per flavor holds
everything: cycle by cycle, the same verdicts, flavors, counts and victims, and every placement on that node."""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.cycle import CycleResult
from admission.nodes import NodeInventory, NodeState
from queues.manager import QueueManager, State
from quota.config import Flavor, QuotaConfig, Topology
from sim.nodes import HOSTNAME_LABEL, RACK_LABEL
from tests.admission.strategies import quota_configs, workloads

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
POOL = "example.com/pool"
#: More than any random workload could ask of any resource.
PLENTY = 10**12


def _with_topology(config: QuotaConfig) -> tuple[QuotaConfig, NodeInventory]:
    topology = Topology(name="fabric", levels=(RACK_LABEL, HOSTNAME_LABEL))
    flavors = tuple(replace_flavor(f) for f in config.flavors)
    placed = config.model_copy(update={"topologies": (topology,), "flavors": flavors})
    resources = {r for t in config.teams for g in t.groups() for r in g.covered_resources}
    nodes = [
        NodeState(
            f"node-{f.name}",
            {**f.node_labels, POOL: f.name, RACK_LABEL: "rack-0", HOSTNAME_LABEL: f"node-{f.name}"},
            {**{r: PLENTY for r in resources}, "pods": PLENTY},
        )
        for f in config.flavors
    ]
    return placed, NodeInventory(nodes)


def replace_flavor(flavor: Flavor) -> Flavor:
    # A label of its own keeps each flavor's pods on its node (the random workloads carry no nodeSelector, so the
    # label rules no flavor in or out).
    return flavor.model_copy(update={"topology": "fabric", "node_labels": {**flavor.node_labels, POOL: flavor.name}})


def _decisions(result: CycleResult) -> list[tuple[object, ...]]:
    return [
        (
            d.workload.name,
            str(d.verdict),
            d.flavors,
            d.counts,
            [(t.workload.name, str(t.reason)) for t in d.victims],
        )
        for d in result.decisions
    ]


@SETTINGS
@given(data=st.data())
def test_a_topology_that_never_constrains_decides_the_same(data: st.DataObject) -> None:
    config = data.draw(quota_configs())
    pending = data.draw(workloads(config, data.draw(st.integers(1, 12))))
    placed_config, inventory = _with_topology(config)
    plain, placed = QueueManager(config), QueueManager(placed_config)
    placed.nodes = inventory
    for workload in pending:
        plain.add(workload)
        placed.add(replace(workload))
    for now in range(5):
        first, second = plain.schedule(1000 + now), placed.schedule(1000 + now)
        assert _decisions(first) == _decisions(second), f"cycle {now}"
        for decision in second.decisions:
            for pod_set, where in decision.placements.items():
                flavor = next(iter(decision.flavors[pod_set].values()))
                assert where.nodes == {f"node-{flavor}": decision.counts[pod_set]}
        for manager in (plain, placed):
            for name, state in list(manager.state.items()):
                if state is State.EVICTING:
                    manager.complete_eviction(name)
