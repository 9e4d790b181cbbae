"""A team's pending queue against a plain model: whatever the pushes, removals, parks, unparks and preempting heads,
the head is the preemptor that keeps its turn or else the first unparked workload in admission order, parked ones are
where the model says, and nothing is lost."""

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
        st.sampled_from(["push", "remove", "park", "park_twins", "unpark", "preempting"]),
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
    preemptor: str | None = None

    def expected_head() -> Workload | None:
        if preemptor is not None:
            return active[preemptor]
        return min(active.values(), key=queue_key, default=None)

    for op, index, priority, gpus in ops:
        name = f"ns/w{index}"
        if op == "push":
            w = workload(index, priority, gpus)
            queue.push(w)
            parked.pop(name, None)
            active[name] = w
            if preemptor == name:  # pushed again (a new version): it takes its place in order like any other
                preemptor = None
        elif op == "remove":
            removed = queue.remove(name)
            expected = active.pop(name, None) or parked.pop(name, None)
            assert removed == expected
            if preemptor == name:
                preemptor = None
        elif op == "preempting":
            head = queue.head()
            assert head == expected_head()
            if head is not None:
                queue.preempting(head.name)
                preemptor = preemptor or head.name
        elif op in ("park", "park_twins"):
            head = queue.head()
            assert head == expected_head()
            if head is None:
                continue
            queue.park(head.name)
            parked[head.name] = active.pop(head.name)
            preemptor = None  # only the preemptor can be the head while there is one
            if op == "park_twins":
                queue.park_equivalent(head)
                for twin in [w for w in active.values() if equivalence(w) == equivalence(head)]:
                    parked[twin.name] = active.pop(twin.name)
        else:
            queue.unpark_all()
            active.update(parked)
            parked.clear()
        assert queue.head() == expected_head()
        assert len(queue) == len(active) + len(parked)
        assert set(queue.inadmissible) == set(parked)
        assert list(queue.ordered()) == sorted(active.values(), key=queue_key) + sorted(parked.values(), key=queue_key)


def test_a_preempting_head_keeps_its_turn_when_older_work_is_unparked() -> None:
    queue = TeamQueue("t", QueueingStrategy.BEST_EFFORT_FIFO)
    older, preemptor, newer_urgent = workload(1, 0, 2), workload(2, 0, 1), workload(3, 9, 1)
    for w in (older, preemptor):
        queue.push(w)
    queue.park(older.name)  # does not fit
    assert queue.head() == preemptor
    queue.preempting(preemptor.name)
    queue.unpark_all()  # its victims left
    queue.push(newer_urgent)
    assert queue.head() == preemptor
    # While it waits for its victims (skipped), the team's next head gets its turn.
    assert queue.head(skip={preemptor.name}) == newer_urgent
    queue.remove(preemptor.name)  # admitted
    assert queue.head() == newer_urgent and queue.preemptor is None


def test_under_strict_fifo_the_head_is_always_the_first() -> None:
    queue = TeamQueue("t", QueueingStrategy.STRICT_FIFO)
    first, second = workload(1, 0, 1), workload(2, 0, 1)
    queue.push(first)
    queue.push(second)
    queue.preempting(second.name)
    assert queue.preemptor is None and queue.head() == first
