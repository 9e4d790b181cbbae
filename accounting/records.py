"""What reads of the ledger return: plain frozen values, detached from the database."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accounting.events import JsonValue, WorkloadId
from quota.tree import FlavorResource


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    workload_id: WorkloadId
    name: str
    namespace: str
    team: str
    queue: str
    priority: int
    priority_class: str | None
    pod_sets: list[dict[str, Any]]  # [{name, count, min_count, requests: {resource: milli}}]
    created_at: datetime
    finished_at: datetime | None
    succeeded: bool | None


@dataclass(frozen=True, slots=True)
class AdmissionRecord:
    workload_id: WorkloadId
    attempt: int
    team: str
    admitted_at: datetime
    pod_sets: list[dict[str, Any]]  # [{name, count, flavors: {resource: flavor}}]
    usage: Mapping[FlavorResource, int]
    borrowed: Mapping[FlavorResource, int]
    ended_at: datetime | None
    end_reason: str | None  # the eviction reason, "Finished" or "Recovered"; None while running


@dataclass(frozen=True, slots=True)
class UsageIntervalRecord:
    workload_id: WorkloadId
    attempt: int
    team: str
    flavor: str
    resource: str
    quantity_milli: int
    started_at: datetime
    ended_at: datetime | None  # None: still running


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    victim: WorkloadId
    victim_attempt: int
    victim_team: str | None  # the team the victim's admission was charged to
    preemptor: WorkloadId | None
    reason: str
    issued_at: datetime
    checkpoint_via: str | None
    checkpoint_deadline: datetime | None
    checkpoint_requested_at: datetime | None
    checkpoint_acked_at: datetime | None
    checkpoint_timed_out_at: datetime | None
    checkpoint_id: str | None
    suspended_at: datetime | None
    requeued_at: datetime | None
    lost_gpu_milliseconds: int | None  # thousandths of a GPU-second
    node: str | None = None  # the failed node, for reason NodeFailure


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """One line of a workload's history; ``key`` is the event's idempotency key, ``data`` its fields as JSON
    (times in ISO 8601)."""

    kind: str
    at: datetime
    key: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class WorkloadDetail:
    workload: WorkloadRecord | None  # None when only later events (not WorkloadSeen) reached the ledger
    admissions: list[AdmissionRecord]
    preemptions: list[PreemptionRecord]
    history: list[RecordedEvent]  # by time; same instant: lifecycle order (WORKLOAD_EVENT_TYPES)


@dataclass(frozen=True, slots=True)
class ConfigVersionRecord:
    sha256: str
    text: str
    applied_at: datetime
    source: str


@dataclass(frozen=True, slots=True)
class AuditRecord:
    actor: str
    action: str
    target: str
    before: JsonValue
    after: JsonValue
    at: datetime
