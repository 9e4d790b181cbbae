"""Events → the rows and row changes they mean. Pure: the writer turns a plan into SQL.

Grouping a batch by kind is what makes one transaction per batch cheap (one executemany per statement), and it
is safe because every change is keyed: an eviction closes the intervals of *its* admission attempt, a checkpoint
step fills *its* preemption's column only while empty. The one order that matters is kept by the writer:
rows are inserted before anything updates them, and evictions close before ``Finished`` closes what is left.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import orjson

from accounting.events import (
    Admitted,
    AuditEntry,
    CheckpointAcked,
    CheckpointRequested,
    CheckpointTimedOut,
    ConfigApplied,
    Evicted,
    Finished,
    Held,
    IntervalsClosedOnRecovery,
    LedgerEvent,
    NodeFailed,
    PreemptionIssued,
    Released,
    Requeued,
    Suspended,
    WorkloadSeen,
    workload_kind,
)
from quota.pod_set import PodSet
from quota.tree import FlavorResource

Row = dict[str, Any]

_FLAVOR_RESOURCE_FIELDS = frozenset({"usage", "borrowed"})


_FIELDS: dict[type, tuple[str, ...]] = {
    # A pod set as submitted; its node selector only rules flavors in or out for the engine, and the ledger has
    # never stored it.
    PodSet: ("name", "count", "requests", "min_count"),
}


def _dataclass_fields(value: Any) -> dict[str, Any]:
    kind = type(value)
    names = _FIELDS.get(kind)
    if names is None:
        if not is_dataclass(value):
            raise TypeError(f"{kind.__name__} is not JSON serializable")
        names = _FIELDS[kind] = tuple(f.name for f in fields(value))
    return {
        name: flavor_resource_list(getattr(value, name)) if name in _FLAVOR_RESOURCE_FIELDS else getattr(value, name)
        for name in names
    }


def as_json(value: Any) -> orjson.Fragment:
    """An event, or a part of one, as JSON text ready to store: times in ISO 8601, enums as their values.

    orjson does the walk (this runs for every event on the writer's path); dataclasses come back here only to
    turn {(flavor, resource): milli} into a list, as JSON keys must be strings.
    """
    return orjson.Fragment(orjson.dumps(value, default=_dataclass_fields, option=orjson.OPT_PASSTHROUGH_DATACLASS))


def flavor_resource_list(amounts: Mapping[FlavorResource, int]) -> list[Row]:
    """{(flavor, resource): milli} as JSON, which has no tuple keys: [{flavor, resource, milli}, ...]."""
    return [{"flavor": f, "resource": r, "milli": m} for (f, r), m in sorted(amounts.items())]


def flavor_resource_map(items: Iterable[Mapping[str, Any]]) -> dict[FlavorResource, int]:
    return {(item["flavor"], item["resource"]): int(item["milli"]) for item in items}


@dataclass
class WritePlan:
    workloads: list[Row] = field(default_factory=list)
    workload_events: list[Row] = field(default_factory=list)
    admissions: list[Row] = field(default_factory=list)
    intervals: list[Row] = field(default_factory=list)
    preemptions: list[Row] = field(default_factory=list)
    checkpoint_requests: list[Row] = field(default_factory=list)
    checkpoint_acks: list[Row] = field(default_factory=list)
    checkpoint_timeouts: list[Row] = field(default_factory=list)
    suspensions: list[Row] = field(default_factory=list)
    node_failures: list[Row] = field(default_factory=list)
    requeues: list[Row] = field(default_factory=list)
    evictions: list[Row] = field(default_factory=list)
    finishes: list[Row] = field(default_factory=list)
    recoveries: list[Row] = field(default_factory=list)
    config_versions: list[Row] = field(default_factory=list)
    audit_entries: list[Row] = field(default_factory=list)

    def sort(self) -> None:
        # Concurrent writers that touch the same keys in the same order wait for each other instead of
        # deadlocking.
        self.workloads.sort(key=lambda r: r["id"])
        self.workload_events.sort(key=lambda r: (r["workload_id"], r["event_key"]))
        self.admissions.sort(key=lambda r: (r["workload_id"], r["attempt"]))
        self.intervals.sort(key=lambda r: (r["workload_id"], r["attempt"], r["flavor"], r["resource"]))
        self.preemptions.sort(key=lambda r: (r["victim"], r["victim_attempt"]))
        self.config_versions.sort(key=lambda r: (r["sha256"], r["applied_at"]))
        self.audit_entries.sort(key=lambda r: r["entry_key"])


def plan_writes(events: Iterable[LedgerEvent]) -> WritePlan:
    plan = WritePlan()
    seen_keys: set[str] = set()
    for event in events:
        if event.key in seen_keys:
            continue
        seen_keys.add(event.key)
        _add(plan, event)
    plan.sort()
    return plan


def _add(plan: WritePlan, event: LedgerEvent) -> None:
    if isinstance(event, ConfigApplied):
        plan.config_versions.append(
            {"sha256": event.sha256, "text": event.text, "applied_at": event.at, "source": event.source}
        )
        return
    if isinstance(event, AuditEntry):
        plan.audit_entries.append(
            {
                "entry_key": event.key,
                "actor": event.actor,
                "action": event.action,
                "target": event.target,
                "before": event.before,
                "after": event.after,
                "at": event.at,
            }
        )
        return

    plan.workload_events.append(
        {
            "event_key": event.key,
            "workload_id": event.workload,
            "kind": event.kind,
            "at": event.occurred_at,
            "payload": as_json(event),
        }
    )
    match event:
        case WorkloadSeen():
            plan.workloads.append(
                {
                    "id": event.workload_id,
                    "kind": workload_kind(event.workload_id),
                    "name": event.name,
                    "namespace": event.namespace,
                    "team": event.team,
                    "queue": event.queue,
                    "priority": event.priority,
                    "priority_class": event.priority_class,
                    "pod_sets": as_json(event.pod_sets),
                    "created_at": event.created_at,
                }
            )
        case Admitted():
            plan.admissions.append(
                {
                    "workload_id": event.workload_id,
                    "attempt": event.attempt,
                    "team": event.team,
                    "admitted_at": event.at,
                    "pod_sets": as_json(event.pod_sets),
                    "usage": flavor_resource_list(event.usage),
                    "borrowed": flavor_resource_list(event.borrowed),
                }
            )
            plan.intervals.extend(
                {
                    "workload_id": event.workload_id,
                    "attempt": event.attempt,
                    "team": event.team,
                    "flavor": flavor,
                    "resource": resource,
                    "quantity_milli": milli,
                    "started_at": event.at,
                }
                for (flavor, resource), milli in event.usage.items()
                if milli > 0
            )
        case Evicted():
            plan.evictions.append(
                {
                    "b_workload": event.workload_id,
                    "b_attempt": event.attempt,
                    "b_at": event.at,
                    "b_reason": event.reason,
                }
            )
        case Finished():
            plan.finishes.append({"b_workload": event.workload_id, "b_at": event.at, "b_succeeded": event.succeeded})
        case IntervalsClosedOnRecovery():
            plan.recoveries.append({"b_workload": event.workload_id, "b_at": event.at})
        case Requeued():
            plan.requeues.append({"b_victim": event.workload_id, "b_attempt": event.attempt, "b_at": event.at})
        case PreemptionIssued():
            plan.preemptions.append(
                {
                    "victim": event.victim,
                    "victim_attempt": event.victim_attempt,
                    "preemptor": event.preemptor,
                    "reason": event.reason.value,
                    "issued_at": event.at,
                }
            )
        case CheckpointRequested():
            plan.checkpoint_requests.append({**_step(event), "b_deadline": event.deadline, "b_via": event.via.value})
        case CheckpointAcked():
            plan.checkpoint_acks.append({**_step(event), "b_checkpoint_id": event.checkpoint_id})
        case CheckpointTimedOut():
            plan.checkpoint_timeouts.append(_step(event))
        case Suspended():
            plan.suspensions.append({**_step(event), "b_lost": event.lost_gpu_milliseconds})
        case NodeFailed():
            plan.node_failures.append({**_step(event), "b_node": event.node})
        case Held() | Released():
            pass  # history only


def _step(event: CheckpointRequested | CheckpointAcked | CheckpointTimedOut | Suspended | NodeFailed) -> Row:
    return {"b_victim": event.victim, "b_attempt": event.victim_attempt, "b_at": event.at}
