"""admission/never_fits.py agrees with flavor assignment on an idle cluster: what it calls never-fitting is exactly
what the engine could not place even with every quota free, at the smallest count partial admission allows."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.flavors import FlavorAssigner, Mode, Outcome
from admission.never_fits import Capacity, label_keys, requests_at, selector_admits
from admission.workload import Workload
from quota.config import QuotaConfig
from quota.loader import load_config_text
from quota.pod_set import PodSet
from quota.tree import FlavorResource, Node, QuotaTree
from tests.admission.strategies import quota_configs, workloads

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

GPU = "nvidia.com/gpu"
A100, MIG = "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"

LABELLED = load_config_text(
    f"""
apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors:
  - {{name: default-flavor}}
  - {{name: a100, nodeLabels: {{nvidia.com/gpu.product: {A100}}}}}
  - {{name: mig, nodeLabels: {{nvidia.com/gpu.product: {MIG}}}}}
priorityClasses: [{{name: research, value: 1, default: true}}]
cohorts: [{{name: org}}]
teams:
  - name: gpus
    parent: org
    queues: [ns/q]
    resourceGroups:
      - coveredResources: [cpu, memory]
        flavors: [{{flavor: default-flavor, resources: {{cpu: {{nominal: 16}}, memory: {{nominal: 64Gi}}}}}}]
      - coveredResources: [{GPU}]
        flavors:
          - {{flavor: a100, resources: {{{GPU}: {{nominal: 8, borrowingLimit: 2}}}}}}
          - {{flavor: mig, resources: {{{GPU}: {{nominal: 4, borrowingLimit: 0}}}}}}
  - name: mixed
    parent: org
    queues: [ns/mixed]
    quotas:
      - flavor: a100
        resources: {{cpu: {{nominal: 8}}, {GPU}: {{nominal: 8}}, pods: {{nominal: 3}}}}
      - flavor: mig
        resources: {{cpu: {{nominal: 64}}, {GPU}: {{nominal: 2}}, pods: {{nominal: 10}}}}
  - name: lender
    parent: org
    queues: [ns/lend]
    quotas: [{{flavor: a100, resources: {{{GPU}: {{nominal: 4}}}}}}]
"""
)


def _no_preemption(team: Node, fr: FlavorResource, value: int) -> Outcome:
    raise AssertionError("an idle cluster never needs preemption")


def idle_assignment_mode(config: QuotaConfig, workload: Workload) -> Mode:
    """The engine's flavor assignment with the whole cluster idle, every pod set at its smallest count."""
    smallest = {p.name: p.min_count if p.min_count is not None else p.count for p in workload.pod_sets}
    assigner = FlavorAssigner(config, QuotaTree.from_config(config), workload, _no_preemption)
    return assigner.assign(smallest).mode


def workload(team: str, *pod_sets: PodSet) -> Workload:
    return Workload(name="w", team=team, priority=0, pod_sets=pod_sets)


@SETTINGS
@given(data=st.data())
def test_never_fits_exactly_when_the_idle_engine_cannot_place_it(data: st.DataObject) -> None:
    config = data.draw(quota_configs())
    capacity = Capacity(config)
    for candidate in data.draw(workloads(config, 4)):
        reason = capacity.never_fits(candidate)
        mode = idle_assignment_mode(config, candidate)
        if reason is not None:
            assert mode is Mode.NO_FIT, reason
        elif len(candidate.pod_sets) == 1:
            # Pod sets are judged one by one; the engine adds them up, so only one pod set gives an equivalence.
            assert mode is Mode.FIT


@pytest.mark.parametrize("team", ["gpus", "mixed", "lender"])
@pytest.mark.parametrize("selector", [{}, {"nvidia.com/gpu.product": A100}, {"nvidia.com/gpu.product": MIG},
                                      {"nvidia.com/gpu.product": "H100"}, {"zone": "a"}])  # fmt: skip
@pytest.mark.parametrize("gpus", [0, 1, 3, 5])
@pytest.mark.parametrize(("count", "min_count"), [(1, None), (2, None), (4, None), (4, 1), (4, 3)])
def test_node_selectors_and_the_pods_resource(
    team: str, selector: dict[str, str], gpus: int, count: int, min_count: int | None
) -> None:
    pod_set = PodSet("main", count, {"cpu": 2000, GPU: gpus * 1000}, min_count, selector)
    candidate = workload(team, pod_set)
    reason = Capacity(LABELLED).never_fits(candidate)
    mode = idle_assignment_mode(LABELLED, candidate)
    assert (reason is None) == (mode is Mode.FIT), (reason, mode)


def test_reasons_name_what_is_short() -> None:
    capacity = Capacity(LABELLED)
    too_many = capacity.never_fits(workload("gpus", PodSet("main", 11, {GPU: 1000})))
    assert too_many is not None and "11 nvidia.com/gpu" in too_many and "more than 10" in too_many
    other_label = capacity.never_fits(workload("gpus", PodSet("main", 1, {GPU: 1000}, None, {"zone": "x"})))
    assert other_label is None  # a label no flavor of the group sets rules nothing out
    no_flavor = capacity.never_fits(
        workload("gpus", PodSet("main", 1, {GPU: 1000}, None, {"nvidia.com/gpu.product": "H100"}))
    )
    assert no_flavor is not None and "matches none" in no_flavor
    pods = capacity.never_fits(workload("mixed", PodSet("main", 7, {GPU: 1000})))
    assert pods is not None and "one flavor" in pods
    assert capacity.never_fits(workload("nobody", PodSet("main", 99, {GPU: 1000}))) is None


def test_the_shared_pieces() -> None:
    assert requests_at({"cpu": 500, GPU: 0}, 3, counts_pods=False) == {"cpu": 1500}
    assert requests_at({"cpu": 500}, 3, counts_pods=True) == {"cpu": 1500, "pods": 3000}
    assert requests_at({"cpu": 500}, 0, counts_pods=True) == {"cpu": 0}
    labels = {"a100": {"gpu": "a100"}, "plain": {}}
    keys = label_keys(["a100", "plain"], labels)
    assert keys == {"gpu"}
    assert selector_admits(labels["a100"], {"gpu": "a100", "zone": "x"}, keys)
    assert not selector_admits(labels["plain"], {"gpu": "a100"}, keys)
    assert selector_admits(labels["plain"], {"zone": "x"}, keys)


def test_a_gang_whose_pod_sets_each_fit_but_never_together() -> None:
    capacity = Capacity(LABELLED)
    on_a100 = {"nvidia.com/gpu.product": A100}
    # Team gpus may ever hold 10 A100s (8 + borrowing 2) and 4 MIG slices.
    both_on_a100 = workload(
        "gpus", PodSet("launcher", 1, {GPU: 8000}, None, on_a100), PodSet("w", 4, {GPU: 1000}, None, on_a100)
    )
    reason = capacity.never_fits(both_on_a100)
    assert reason is not None and "2 pod sets need 12 nvidia.com/gpu together (8 + 4)" in reason, reason
    assert "at most" not in reason and "more than 10" in reason and "a100: 10" in reason
    assert idle_assignment_mode(LABELLED, both_on_a100) is Mode.NO_FIT
    # Without selectors the pod sets may take different flavors: 8 on a100 and 4 on mig fit, and are not refused.
    spread = workload("gpus", PodSet("launcher", 1, {GPU: 8000}), PodSet("w", 4, {GPU: 1000}))
    assert capacity.never_fits(spread) is None
    assert idle_assignment_mode(LABELLED, spread) is Mode.FIT
    beyond_both = workload("gpus", PodSet("launcher", 1, {GPU: 10000}), PodSet("w", 5, {GPU: 1000}))
    reason = capacity.never_fits(beyond_both)
    assert reason is not None and "more than 14" in reason, reason
