"""Events are checked values with natural keys: bad ones fail in the caller, equal facts share a key."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from accounting.events import (
    Admitted,
    AuditEntry,
    ConfigApplied,
    Evicted,
    Held,
    PodSetAssignment,
    PreemptionIssued,
    Suspended,
    total_usage,
)
from quota.pod_set import PodSet
from quota.preemption import PreemptionReason
from tests.accounting.builders import GPU, T0, admitted, at, life, seen


def test_times_are_aware_and_normalised_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    event = Evicted(workload_id="a/b", attempt=1, at=datetime(2026, 3, 2, 10, 0, tzinfo=plus_two), reason="x")
    assert event.at == T0 and event.at.tzinfo is not None and event.at.utcoffset() == timedelta(0)
    with pytest.raises(ValueError, match="timezone-aware"):
        Evicted(workload_id="a/b", attempt=1, at=datetime(2026, 3, 2, 8), reason="x")


@pytest.mark.parametrize("bad", [1.5, True, "1000"])
def test_quantities_are_integer_milli_units(bad: object) -> None:
    with pytest.raises(TypeError):
        admitted("a/b", usage={("h100", GPU): bad})  # type: ignore[dict-item]
    with pytest.raises(TypeError):  # a pod set is checked where the ledger records it
        replace(seen("a/b"), pod_sets=(PodSet(name="main", count=1, requests={GPU: bad}),))  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        Suspended(victim="a/b", victim_attempt=1, at=T0, lost_gpu_milliseconds=bad)  # type: ignore[arg-type]


def test_attempts_are_one_based_and_reasons_are_known() -> None:
    with pytest.raises(ValueError, match="1-based"):
        admitted("a/b", attempt=0)
    with pytest.raises(ValueError):
        PreemptionIssued(victim="a/b", victim_attempt=1, preemptor=None, reason="Whim", at=T0)  # type: ignore[arg-type]
    issued = PreemptionIssued(victim="a/b", victim_attempt=1, preemptor=None, reason="Manual", at=T0)  # type: ignore[arg-type]
    assert issued.reason is PreemptionReason.MANUAL


def test_events_copy_what_the_caller_may_mutate() -> None:
    usage = {("h100", GPU): 1000}
    event = admitted("a/b", usage=usage)
    usage[("h100", GPU)] = 9999
    assert event.usage == {("h100", GPU): 1000}
    requests = {GPU: 1000}
    recorded = replace(seen("a/b"), pod_sets=(PodSet(name="main", count=1, requests=requests),))
    requests[GPU] = 9999
    assert recorded.pod_sets[0].requests == {GPU: 1000}
    after = {"held": True}
    entry = AuditEntry(actor="alice", action="hold", target="a/b", before=None, after=after, at=T0)
    after["held"] = False
    assert entry.after == {"held": True}


def test_equal_facts_share_a_key_and_different_ones_do_not() -> None:
    assert seen("a/b").key == seen("a/b", gpus=4).key  # the first record of a workload wins
    assert admitted("a/b", attempt=1).key != admitted("a/b", attempt=2).key
    assert Held(workload_id="a/b", at=T0, actor="x").key != Held(workload_id="a/b", at=at(minutes=1), actor="x").key
    keys = [event.key for event in life("a/b", preempted=True) + life("a/c", preempted=True)]
    assert len(keys) == len(set(keys))
    same = AuditEntry(actor="a", action="b", target="c", before=None, after={"x": 1, "y": 2}, at=T0)
    assert same.key == AuditEntry(actor="a", action="b", target="c", before=None, after={"y": 2, "x": 1}, at=T0).key


def test_config_applied_hashes_its_text() -> None:
    config = ConfigApplied.of("teams: []\n", at=T0, source="file")
    assert len(config.sha256) == 64
    with pytest.raises(ValueError, match="sha256"):
        ConfigApplied(sha256="0" * 64, text="teams: []\n", at=T0, source="file")


def test_total_usage_sums_count_times_request_per_assigned_flavor() -> None:
    usage = total_usage(
        [
            PodSetAssignment(name="driver", count=1, flavors={"cpu": "default"}),
            PodSetAssignment(name="workers", count=3, flavors={GPU: "h100", "cpu": "default"}),
        ],
        {"driver": {"cpu": 2000}, "workers": {GPU: 2000, "cpu": 8000}},
    )
    assert usage == {("default", "cpu"): 26_000, ("h100", GPU): 6_000}


def test_admitted_rejects_keys_that_are_not_flavor_resource_pairs() -> None:
    with pytest.raises(ValueError, match="flavor, resource"):
        Admitted(
            workload_id="a/b",
            attempt=1,
            team="t",
            at=T0,
            pod_sets=(),
            usage={"h100": 1000},  # type: ignore[dict-item]
        )
