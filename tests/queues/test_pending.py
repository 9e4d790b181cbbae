"""A team's pending queue against a plain model: whatever the pushes, removals, parks and unparks, the head is
the first unparked workload in admission order, parked ones are where the model says, and nothing is lost."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.workload import Workload
from queues.pending import TeamQueue, equivalence, queue_key
from quota.config import QueueingStrategy
from quota.pod_set import PodSet


def workload(index: int, priority: int, gpus: int) -> Workload:
    return Workload(f"ns/w{index}", "t", priority, (PodSet("main", 1, {"nvidia.com/gpu": gpus * 1000}),), index % 5)


steps = st.lists(
    st.tuples(
        st.sampled_from(["push", "remove", "park", "park_twins", "unpark"]),
        st.integers(0, 11),
        st.integers(0, 2),  # priority
        st.integers(1, 2),  # GPUs: with the priority, which workloads are look-alikes
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_queue_agrees_with_a_model(ops: list[tuple[str, int, int, int]]) -> None:
    queue = TeamQueue("t", QueueingStrategy.BEST_EFFORT_FIFO)
    active: dict[str, Workload] = {}
    parked: dict[str, Workload] = {}
    for op, index, priority, gpus in ops:
        name = f"ns/w{index}"
        if op == "push":
            w = workload(index, priority, gpus)
            queue.push(w)
            parked.pop(name, None)
            active[name] = w
        elif op == "remove":
            removed = queue.remove(name)
            expected = active.pop(name, None) or parked.pop(name, None)
            assert removed == expected
        elif op in ("park", "park_twins"):
            head = queue.head()
            expected_head = min(active.values(), key=queue_key, default=None)
            assert head == expected_head
            if head is None:
                continue
            queue.park(head.name)
            parked[head.name] = active.pop(head.name)
            if op == "park_twins":
                queue.park_equivalent(head)
                for twin in [w for w in active.values() if equivalence(w) == equivalence(head)]:
                    parked[twin.name] = active.pop(twin.name)
        else:
            queue.unpark_all()
            active.update(parked)
            parked.clear()
        assert queue.head() == min(active.values(), key=queue_key, default=None)
        assert len(queue) == len(active) + len(parked)
        assert set(queue.inadmissible) == set(parked)
        assert list(queue.ordered()) == sorted(active.values(), key=queue_key) + sorted(parked.values(), key=queue_key)
