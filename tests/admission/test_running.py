"""The running-workload index keeps the candidate order exact through every start, change and stop."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.running import RunningWorkloads, candidate_sort_key
from admission.workload import Admission, Workload
from quota.pod_set import PodSet


def running(name: str, priority: int, admitted_at: int, evicting: bool = False) -> Workload:
    return Workload(
        name=name,
        team="t",
        priority=priority,
        pod_sets=(PodSet("main", 1, {"cpu": 1000}),),
        admission=Admission({"main": {"cpu": "f"}}, {"main": 1}, admitted_at),
        evicting=evicting,
    )


def expected(workloads: dict[str, Workload], evicting: bool, below: int | None) -> list[str]:
    chosen = [w for w in workloads.values() if w.evicting == evicting and (below is None or w.priority < below)]
    return [w.name for w in sorted(chosen, key=candidate_sort_key)]


operations = st.lists(
    st.tuples(
        st.sampled_from(["set", "delete", "evict", "read"]),
        st.integers(0, 7),  # which workload
        st.integers(-3, 3),  # priority
        st.integers(0, 5),  # admitted at
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations, st.one_of(st.none(), st.integers(-3, 4)))
def test_order_matches_a_full_sort_after_any_sequence_of_changes(
    steps: list[tuple[str, int, int, int]], below: int | None
) -> None:
    index = RunningWorkloads()
    model: dict[str, Workload] = {}
    for op, which, priority, admitted_at in steps:
        name = f"w{which}"
        if op == "set":
            workload = running(name, priority, admitted_at)
            index[name] = workload
            model[name] = workload
        elif op == "delete" and name in model:
            del index[name]
            del model[name]
        elif op == "evict" and name in model:
            index[name] = model[name] = replace(model[name], evicting=True)
        elif op == "read":
            for evicting in (True, False):
                keys = index.candidate_order(evicting=evicting, below_priority=below)
                assert [k[3] for k in keys] == expected(model, evicting, below)
        assert dict(index.items()) == model
    for evicting in (True, False):
        keys = index.candidate_order(evicting=evicting, below_priority=below)
        assert [k[3] for k in keys] == expected(model, evicting, below)


def test_the_order_is_a_copy_a_search_may_change_the_team_under() -> None:
    index = RunningWorkloads([running("a", 1, 0), running("b", 2, 0), running("c", 0, 0, evicting=True)])
    keys = index.candidate_order(evicting=False)
    assert [k[3] for k in keys] == ["a", "b"]
    del index["a"]
    index["d"] = running("d", 0, 9)
    assert [k[3] for k in keys] == ["a", "b"]
    assert [k[3] for k in index.candidate_order(evicting=False)] == ["d", "b"]
    assert [k[3] for k in index.candidate_order(evicting=True)] == ["c"]


def test_within_a_priority_the_most_recently_admitted_comes_first() -> None:
    index = RunningWorkloads([running("old", 5, 10), running("new", 5, 20), running("low", 1, 0)])
    assert [k[3] for k in index.candidate_order(evicting=False)] == ["low", "new", "old"]
    assert [k[3] for k in index.candidate_order(evicting=False, below_priority=5)] == ["low"]


@settings(max_examples=300, deadline=None)
@given(operations, st.one_of(st.none(), st.integers(-3, 4)), st.lists(st.sampled_from(["take", "give back", "keep"])))
def test_a_walk_gives_the_copys_keys_while_the_reader_takes_and_gives_back_what_it_read(
    steps: list[tuple[str, int, int, int]], below: int | None, actions: list[str]
) -> None:
    """A preemption search walks a team's order and removes the victims it takes, putting some back as it goes
    (and all of them once it gives up): the walk must still give every key of the copy taken at its start."""
    index = RunningWorkloads()
    for op, which, priority, admitted_at in steps:
        name = f"w{which}"
        if op in ("set", "read"):
            index[name] = running(name, priority, admitted_at, evicting=op == "read")
        elif op == "delete" and name in index:
            del index[name]
    for evicting in (True, False):
        copy = [k[3] for k in index.candidate_order(evicting=evicting, below_priority=below)]
        walk = index.walk_candidates(evicting=evicting, below_priority=below)
        assert (walk is None) == (not copy)
        walked: list[str] = []
        taken: list[Workload] = []
        for position, key in enumerate(walk or ()):
            walked.append(key[3])
            action = actions[position % len(actions)] if actions else "take"
            if action in ("take", "give back"):
                taken.append(index[key[3]])
                del index[key[3]]
            if action == "give back" and len(taken) > 1:
                back = taken.pop(0)
                index[back.name] = back
        assert walked == copy
        for workload in taken:
            index[workload.name] = workload
