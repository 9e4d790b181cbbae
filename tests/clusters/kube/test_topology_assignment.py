"""The `kuota.dev/topology-assignment` annotation: what the admit patch records of a placement, read back exactly
after a restart; the narrowest domain the placed nodes share; the pin a requeued object loses (kuota's only)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.labels import TOPOLOGY_ASSIGNMENT
from admission.nodes import NodeInventory, NodeState
from admission.placement import PodSetPlacement
from clusters.kube.topology_assignment import (
    Assigned,
    AssignmentError,
    assignment_of,
    decode,
    encode,
    narrowest_domain,
    next_nodes,
    pinned,
    read_annotation,
    without_pin,
)
from quota.config import Topology
from quota.loader import load_config_text

BLOCK, RACK, HOST = "topology.kuota.dev/block", "topology.kuota.dev/rack", "kubernetes.io/hostname"
FABRIC = Topology(name="fabric", levels=(BLOCK, RACK, HOST))

QUOTA = f"""apiVersion: kuota.dev/v1
kind: QuotaConfig
topologies:
  - name: fabric
    levels: [{BLOCK}, {RACK}, {HOST}]
flavors:
  - {{name: h100, nodeLabels: {{gpu: h100}}, topology: fabric}}
  - {{name: cpu}}
teams:
  - name: ml
    queues: [ml/ml]
    quotas:
      - flavor: h100
        resources: {{nvidia.com/gpu: {{nominal: 64}}}}
"""


def labels(host: str, rack: str, block: str = "block-00") -> dict[str, str]:
    return {BLOCK: block, RACK: rack, HOST: host}


def test_the_narrowest_domain_the_nodes_share() -> None:
    assert narrowest_domain(FABRIC, {"n1": labels("n1", "rack-000")}) == (HOST, "n1")
    two = {"n1": labels("n1", "rack-000"), "n2": labels("n2", "rack-000")}
    assert narrowest_domain(FABRIC, two) == (RACK, "rack-000")
    racks = {"n1": labels("n1", "rack-000"), "n5": labels("n5", "rack-001")}
    assert narrowest_domain(FABRIC, racks) == (BLOCK, "block-00")
    blocks = {"n1": labels("n1", "rack-000"), "n9": labels("n9", "rack-004", "block-01")}
    assert narrowest_domain(FABRIC, blocks) == (None, None), "no one domain holds them"
    # Rack names repeat under different blocks: one rack value under two blocks is two domains.
    same_name = {"n1": labels("n1", "rack-000"), "n9": labels("n9", "rack-000", "block-01")}
    assert narrowest_domain(FABRIC, same_name) == (None, None)
    assert narrowest_domain(FABRIC, {"n1": {HOST: "n1"}}) == (None, None), "a node without every level label"


def test_an_admissions_node_counts_become_the_assignment_with_its_domain() -> None:
    config = load_config_text(QUOTA)
    inventory = NodeInventory(
        [NodeState(f"n{i}", labels=labels(f"n{i}", f"rack-00{i // 4}")) for i in range(8)],
    )
    flavors = {"worker": {"nvidia.com/gpu": "h100"}, "launcher": {"cpu": "cpu"}}
    placement = {"worker": {"n5": 2, "n4": 2, "n6": 0}, "launcher": {"n0": 1}}
    found = assignment_of(config, flavors, placement, inventory)
    assert found == {"worker": PodSetPlacement("fabric", {"n4": 2, "n5": 2}, RACK, "rack-001")}, (
        "the launcher's flavor has no topology; a node with no pods is not part of it"
    )
    gone = assignment_of(config, flavors, {"worker": {"n4": 2, "gone": 2}}, inventory)
    assert gone == {"worker": PodSetPlacement("fabric", {"gone": 2, "n4": 2}, None, None)}, "unknown labels: no pin"
    assert assignment_of(config, flavors, {}, inventory) == {}


placements = st.builds(
    PodSetPlacement,
    topology=st.sampled_from(["fabric", "nvlink"]),
    nodes=st.dictionaries(st.text(min_size=1, max_size=20), st.integers(1, 64), min_size=1, max_size=8),
    level=st.sampled_from([RACK, HOST]),
    domain=st.text(min_size=1, max_size=20),
) | st.builds(
    PodSetPlacement,
    topology=st.just("fabric"),
    nodes=st.dictionaries(st.text(min_size=1, max_size=20), st.integers(1, 64), min_size=1, max_size=8),
)


@settings(max_examples=200, deadline=None)
@given(
    assignment=st.dictionaries(
        st.text(min_size=1, max_size=20), st.tuples(placements, st.booleans()), min_size=1, max_size=4
    )
)
def test_the_annotation_reads_back_exactly(assignment: dict[str, tuple[PodSetPlacement, bool]]) -> None:
    given_ = {name: Assigned(p, pin and p.level is not None) for name, (p, pin) in assignment.items()}
    text = encode(given_)
    assert text is not None
    assert decode(text) == given_
    assert encode(decode(text)) == text, "the same placement is the same text"


def test_nothing_placed_removes_the_annotation() -> None:
    assert encode({}) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rack-001", "not JSON"),
        ("[1]", "not a mapping of pod sets"),
        ('{"main": 3}', "pod set 'main': not a mapping"),
        ('{"main": {"nodes": {"n1": 1}}}', "topology is not a string"),
        ('{"main": {"topology": "f", "level": "r", "nodes": {"n1": 1}}}', "both or neither"),
        ('{"main": {"topology": "f", "nodes": {"n1": 0}}}', "pod counts above 0"),
        ('{"main": {"topology": "f", "nodes": {"n1": true}}}', "pod counts above 0"),
        ('{"main": {"topology": "f", "nodes": {"n1": 1}, "pinned": true}}', "true only with a domain"),
    ],
)
def test_an_annotation_that_does_not_read_says_why(text: str, problem: str) -> None:
    with pytest.raises(AssignmentError, match=problem):
        decode(text)
    assert read_annotation({TOPOLOGY_ASSIGNMENT: text}) == {}, "a restart goes on without it"


def test_a_pin_is_added_once_and_only_kuotas_pin_is_taken_off_again() -> None:
    rack = PodSetPlacement("fabric", {"n4": 2}, RACK, "rack-001")
    selector, added = pinned({"gpu": "h100"}, rack)
    assert selector == {"gpu": "h100", RACK: "rack-001"} and added
    assert without_pin(selector, Assigned(rack, added)) == {"gpu": "h100"}
    # The owner asked for that rack itself: the pin is not kuota's, and stays when the object is requeued.
    own, added = pinned({RACK: "rack-001"}, rack)
    assert own == {RACK: "rack-001"} and not added
    assert without_pin(own, Assigned(rack, added)) == {RACK: "rack-001"}
    # Spread over several blocks: no pin at all.
    spread = PodSetPlacement("fabric", {"n1": 1, "n9": 1})
    assert pinned({"gpu": "h100"}, spread) == ({"gpu": "h100"}, False)
    # A selector the owner changed since (another rack) is not kuota's pin.
    assert without_pin({RACK: "rack-002"}, Assigned(rack, True)) == {RACK: "rack-002"}


def test_gated_pods_go_to_the_nodes_the_placement_has_left() -> None:
    counts = {"n2": 2, "n1": 1}
    assert next_nodes(counts, {}, 3) == ["n1", "n2", "n2"]
    assert next_nodes(counts, {"n2": 1}, 3) == ["n1", "n2"], "one pod already on n2: two left"
    assert next_nodes(counts, {"n1": 1, "n2": 2}, 1) == [], "a replacement waits while the pod it replaces is there"
    assert next_nodes(counts, {"elsewhere": 5}, 1) == ["n1"]
