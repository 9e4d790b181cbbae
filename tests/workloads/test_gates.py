"""The scheduling-gate patches, applied with `jsonpatch` as the API server applies them, to pods built from LWS's
and Kueue's examples (../shared/data/crds/leaderworkerset, ../shared/data/manifests/kueue; see their READMEs).

`refused_update` (examples.py) is what kube-apiserver refuses when a gated pod is updated.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from admission.labels import SCHEDULING_GATE
from workloads.gates import (
    GATED_POD,
    gate_patch,
    holds_resources,
    is_gated,
    ungate_patch,
)
from workloads.kind import Placement

from .examples import crd_example, kueue_pods, lws_pods, refused_update, submitted

Obj = dict[str, Any]

FLAVOR = Placement(
    {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kuota.dev/pool": "a"},
    [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
)


def pods() -> list[Obj]:
    _, vllm = crd_example("leaderworkerset/examples/vllm-GPU-lws.yaml")
    return [*lws_pods(submitted(vllm), 0), *kueue_pods("kueue/pods-kueue__kueue-pod-group.yaml")]


@pytest.mark.parametrize("index", range(4))
def test_a_pod_is_created_behind_kuotas_gate_and_let_go_where_its_flavor_is(index: int) -> None:
    pod = pods()[index]
    assert not is_gated(pod) and GATED_POD.suspend_patch(pod) == gate_patch(pod)
    gated = jsonpatch.apply_patch(pod, gate_patch(pod))
    assert gated["spec"]["schedulingGates"] == [{"name": SCHEDULING_GATE}]
    assert is_gated(gated) and not holds_resources(gated) and gate_patch(gated) == []
    let_go = jsonpatch.apply_patch(gated, ungate_patch(gated, FLAVOR))
    assert refused_update(gated, let_go) == []
    assert not is_gated(let_go) and let_go["spec"]["schedulingGates"] == []
    assert let_go["spec"]["nodeSelector"] == FLAVOR.node_selector
    assert let_go["spec"]["tolerations"] == FLAVOR.tolerations
    assert holds_resources(let_go)
    # Nothing but the gate, the selector and the tolerations changed.
    for part in ("schedulingGates", "nodeSelector", "tolerations"):
        let_go["spec"].pop(part)
    assert let_go == pod


def test_the_pods_own_selector_tolerations_and_other_gates_are_kept() -> None:
    pod = pods()[0]
    pod["spec"]["nodeSelector"] = {"kuota.dev/pool": "a", "topology.kubernetes.io/zone": "z1"}
    pod["spec"]["tolerations"] = [{"key": "spot", "operator": "Exists"}, FLAVOR.tolerations[0]]
    pod["spec"]["schedulingGates"] = [{"name": "example.com/first"}, {"name": "example.com/second"}]
    gated = jsonpatch.apply_patch(pod, gate_patch(pod))
    assert [g["name"] for g in gated["spec"]["schedulingGates"]] == [
        "example.com/first",
        "example.com/second",
        SCHEDULING_GATE,
    ]
    let_go = jsonpatch.apply_patch(gated, ungate_patch(gated, FLAVOR))
    assert refused_update(gated, let_go) == []
    assert let_go["spec"]["nodeSelector"] == {
        "kuota.dev/pool": "a",
        "topology.kubernetes.io/zone": "z1",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    assert let_go["spec"]["tolerations"] == pod["spec"]["tolerations"]  # the flavor's was there already
    assert [g["name"] for g in let_go["spec"]["schedulingGates"]] == ["example.com/first", "example.com/second"]


def test_a_gate_that_moved_since_the_patch_was_made_fails_the_patch_instead_of_removing_another() -> None:
    pod = pods()[0]
    pod["spec"]["schedulingGates"] = [{"name": "example.com/first"}, {"name": SCHEDULING_GATE}]
    patch = ungate_patch(pod, FLAVOR)
    moved = copy.deepcopy(pod)
    moved["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]  # the other gate was removed meanwhile
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, patch)


def test_an_update_the_api_server_refuses_is_recognised() -> None:
    gated = jsonpatch.apply_patch(pods()[0], gate_patch(pods()[0]))
    gated["spec"]["nodeSelector"] = {"kuota.dev/pool": "b"}
    changed = copy.deepcopy(gated)
    changed["spec"]["nodeSelector"] = {"kuota.dev/pool": "a"}
    assert refused_update(gated, changed) == ["spec.nodeSelector: only additions"]
    # ...which is why a placement never changes an entry the pod has: it only adds what is missing.
    assert jsonpatch.apply_patch(gated, ungate_patch(gated, FLAVOR))["spec"]["nodeSelector"]["kuota.dev/pool"] == "b"


def test_a_pod_reads_as_one_pod_set_of_one_pod_and_its_phase_says_when_it_ended() -> None:
    pod = pods()[3]
    (template,) = GATED_POD.read_templates(pod)
    assert (template.name, template.path, template.count) == ("main", ("spec",), 1)
    assert GATED_POD.status(pod).finished is None
    pod["status"] = {
        "phase": "Succeeded",
        "containerStatuses": [{"state": {"terminated": {"finishedAt": "2026-03-01T09:00:00Z"}}}],
    }
    status = GATED_POD.status(pod)
    assert status.finished is True and status.stopped and status.finished_at is not None
    pod["status"]["phase"] = "Failed"
    assert GATED_POD.status(pod).finished is False
    with pytest.raises(ValueError):
        GATED_POD.run_patch(pod, {"a": FLAVOR, "b": FLAVOR})
