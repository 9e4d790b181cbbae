"""The node inventory: bindings set and cleared as a whole, free capacity, taints and tolerations."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from admission.nodes import NodeInventory, NodeState, Taint, TaintEffect, Toleration, tolerated

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8) -> NodeState:
    return NodeState(name, {"rack": "r1"}, {GPU: gpus * 1000, "cpu": 64_000})


def test_free_is_allocatable_less_bound() -> None:
    inventory = NodeInventory([node("a"), node("b")])
    inventory.bind("pod-1", "a", {GPU: 3000, "cpu": 1000})
    inventory.bind("pod-2", "a", {GPU: 2000})
    assert inventory.free("a") == {GPU: 3000, "cpu": 63_000}
    assert inventory.free("b") == {GPU: 8000, "cpu": 64_000}
    assert inventory.owners_on("a") == {"pod-1", "pod-2"}


def test_binding_again_replaces_instead_of_adding() -> None:
    inventory = NodeInventory([node("a")])
    inventory.bind("pod-1", "a", {GPU: 3000})
    inventory.bind("pod-1", "a", {GPU: 3000})
    assert inventory.free("a")[GPU] == 5000
    inventory.unbind("pod-1")
    assert inventory.free("a")[GPU] == 8000
    assert inventory.nodes_of("pod-1") == frozenset()


def test_removing_a_node_forgets_its_bindings() -> None:
    inventory = NodeInventory([node("a"), node("b")])
    inventory.bind("w", "a", {GPU: 8000})
    inventory.bind("w", "b", {GPU: 8000})
    inventory.remove_node("a")
    assert inventory.nodes_of("w") == {"b"}
    assert inventory.node("a") is None and inventory.free("a") == {}
    assert len(inventory) == 1


def test_overbooked_node_has_zero_free_not_negative() -> None:
    inventory = NodeInventory([node("a", gpus=2)])
    inventory.bind("p", "a", {GPU: 4000})
    assert inventory.free("a")[GPU] == 0


def test_copy_is_independent() -> None:
    inventory = NodeInventory([node("a")])
    inventory.bind("p", "a", {GPU: 1000})
    other = inventory.copy()
    other.bind("q", "a", {GPU: 1000})
    other.unbind("p")
    assert inventory.free("a")[GPU] == 7000
    assert other.free("a")[GPU] == 7000
    assert inventory.owners_on("a") == {"p"} and other.owners_on("a") == {"q"}


def test_cordoned_or_not_ready_nodes_are_not_schedulable() -> None:
    assert node("a").schedulable
    assert not NodeState("a", unschedulable=True).schedulable
    assert not NodeState("a", ready=False).schedulable


def test_tolerations_match_as_kubernetes_matches_them() -> None:
    gpu_only = Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE)
    soft = Taint("spot", "", TaintEffect.PREFER_NO_SCHEDULE)
    assert not tolerated([gpu_only], [])
    assert tolerated([soft], [])
    assert tolerated([gpu_only], [Toleration("nvidia.com/gpu", "Exists")])
    assert tolerated([gpu_only], [Toleration("nvidia.com/gpu", "Equal", "present")])
    assert not tolerated([gpu_only], [Toleration("nvidia.com/gpu", "Equal", "absent")])
    assert not tolerated([gpu_only], [Toleration("nvidia.com/gpu", "Exists", effect="NoExecute")])
    assert tolerated([gpu_only], [Toleration(operator="Exists")])


@given(
    st.lists(
        st.tuples(st.sampled_from(["p", "q", "r"]), st.sampled_from(["a", "b"]), st.integers(0, 9000), st.booleans())
    )
)
def test_used_is_always_the_sum_of_current_bindings(steps: list[tuple[str, str, int, bool]]) -> None:
    inventory = NodeInventory([node("a"), node("b")])
    expected: dict[tuple[str, str], int] = {}
    for owner, name, gpus, binds in steps:
        if binds:
            inventory.bind(owner, name, {GPU: gpus})
            expected[(owner, name)] = gpus
        else:
            inventory.unbind(owner)
            expected = {k: v for k, v in expected.items() if k[0] != owner}
    for name in ("a", "b"):
        total = sum(v for (_, n), v in expected.items() if n == name)
        assert inventory.used(name).get(GPU, 0) == total
