"""What the ledger records: immutable values, no I/O.

Every event carries a natural idempotency key (``event.key``): recording the same fact twice — a replay
after a crash, a retry after a dropped connection, two controller replicas racing — writes it once.

Conventions, checked at construction so a bad event fails in the caller and never reaches the outbox:
- times are timezone-aware datetimes, normalised to UTC (the simulator passes virtual times as datetimes);
- quantities are ``int`` milli-units (Kubernetes quantity × 1000: 1 GPU = 1000, 512Mi = 536870912000),
  never floats;
- an admission *attempt* is the 1-based sequence number of a workload's admissions. Eviction, preemption and
  requeue events name the attempt they end, so a late replay can never close a later admission's usage.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import ClassVar, TypeAlias

from quota.pod_set import PodSet
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource

WorkloadId: TypeAlias = str
"""Stable workload identity: ``"KIND/NAMESPACE/NAME"`` (e.g. ``"JobSet/nlp/pretrain"``); never reused."""


def workload_kind(workload_id: WorkloadId) -> str:
    """The kind an identity names: its first part of `KIND/NAMESPACE/NAME`; identities of the older
    `NAMESPACE/NAME` form (and the bare names of simulated Jobs) are Jobs."""
    return workload_id.split("/", 1)[0] if workload_id.count("/") >= 2 else "Job"


JsonValue: TypeAlias = bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None

GPU_RESOURCE = "nvidia.com/gpu"


class CheckpointVia(StrEnum):
    URL = "url"
    ANNOTATION = "annotation"


# --- validation helpers ---------------------------------------------------------------------------


def _utc(value: object, name: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value.astimezone(UTC)


_MAX_INT64 = 2**63 - 1
_INT32 = range(-(2**31), 2**31)


def _count(value: object, name: str) -> int:
    # bool is an int subclass; a True count is always a bug.
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    # The database stores 64-bit integers: a larger value would be refused there, far from its cause.
    if not 0 <= value <= _MAX_INT64:
        raise ValueError(f"{name} must be in [0, 2**63), got {value}")
    return value


def _attempt(value: object, name: str) -> int:
    attempt = _count(value, name)
    if attempt not in _INT32 or attempt < 1:
        raise ValueError(f"{name} is 1-based (and 32-bit), got {attempt}")
    return attempt


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _milli_by_resource(value: Mapping[str, int], name: str) -> dict[str, int]:
    return {_text(k, f"{name} key"): _count(v, f"{name}[{k}]") for k, v in value.items()}


def _milli_by_flavor_resource(value: Mapping[FlavorResource, int], name: str) -> dict[FlavorResource, int]:
    checked: dict[FlavorResource, int] = {}
    for key, milli in value.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"{name} keys must be (flavor, resource) tuples, got {key!r}")
        flavor, resource = _text(key[0], f"{name} flavor"), _text(key[1], f"{name} resource")
        checked[(flavor, resource)] = _count(milli, f"{name}[{key}]")
    return checked


def _set(obj: object, name: str, value: object) -> None:
    # Normalising fields of a frozen dataclass in __post_init__ is the documented use of object.__setattr__.
    object.__setattr__(obj, name, value)


def _canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class _Timed:
    """Events stamped with ``at``; ``occurred_at`` orders every event in a history."""

    __slots__ = ()
    at: datetime

    @property
    def occurred_at(self) -> datetime:
        return self.at


class _OfWorkload(_Timed):
    __slots__ = ()
    workload_id: WorkloadId

    @property
    def workload(self) -> WorkloadId:
        return self.workload_id


class _OfAdmission(_OfWorkload):
    """Events that end or follow one admission attempt: keyed by it."""

    __slots__ = ()
    kind: ClassVar[str]
    attempt: int

    @property
    def key(self) -> str:
        return f"{self.kind}|{self.workload_id}|{self.attempt}"


class _OfOperator(_OfWorkload):
    """Operator actions may repeat (hold, release, hold again): the instant tells them apart."""

    __slots__ = ()
    kind: ClassVar[str]

    @property
    def key(self) -> str:
        return f"{self.kind}|{self.workload_id}|{self.at.isoformat()}"


class _OfPreemption(_Timed):
    """Steps of one preemption, keyed by (victim, victim_attempt): an admission is preempted at most once."""

    __slots__ = ()
    kind: ClassVar[str]
    victim: WorkloadId
    victim_attempt: int

    @property
    def key(self) -> str:
        return f"{self.kind}|{self.victim}|{self.victim_attempt}"

    @property
    def workload(self) -> WorkloadId:
        return self.victim


# --- parts of events ------------------------------------------------------------------------------


def _pod_set(value: PodSet) -> PodSet:
    """A pod set as submitted (quota.pod_set.PodSet: ``count`` pods, each requesting ``requests`` {resource: milli}),
    checked, with its requests copied."""
    _text(value.name, "pod set name")
    _count(value.count, "pod set count")
    if value.min_count is not None:
        _count(value.min_count, "pod set min_count")
    return replace(value, requests=_milli_by_resource(value.requests, "pod set requests"))


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSetAssignment:
    """A pod set as admitted: ``count`` pods (below the submitted count under partial admission), and the
    flavor chosen for each resource ({resource: flavor})."""

    name: str
    count: int
    flavors: Mapping[str, str]

    def __post_init__(self) -> None:
        _text(self.name, "pod set name")
        _count(self.count, "pod set count")
        _set(self, "flavors", {_text(r, "resource"): _text(f, "flavor") for r, f in self.flavors.items()})


# --- workload lifecycle ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSeen:
    """The queue manager turned a Job into a workload. The first record wins; later ones change nothing."""

    kind: ClassVar[str] = "WorkloadSeen"
    workload_id: WorkloadId
    name: str
    namespace: str
    team: str
    queue: str
    priority: int
    priority_class: str | None
    pod_sets: tuple[PodSet, ...]
    created_at: datetime

    def __post_init__(self) -> None:
        for attr in ("workload_id", "name", "namespace", "team", "queue"):
            _text(getattr(self, attr), attr)
        if type(self.priority) is not int or self.priority not in _INT32:
            raise TypeError(f"priority must be a 32-bit int (as in Kubernetes), got {self.priority!r}")
        _set(self, "pod_sets", tuple(_pod_set(p) for p in self.pod_sets))
        _set(self, "created_at", _utc(self.created_at, "created_at"))

    @property
    def key(self) -> str:
        return f"{self.kind}|{self.workload_id}"

    @property
    def workload(self) -> WorkloadId:
        return self.workload_id

    @property
    def occurred_at(self) -> datetime:
        return self.created_at


@dataclass(frozen=True, slots=True, kw_only=True)
class Admitted(_OfAdmission):
    """Admission number ``attempt`` of a workload, charged to ``team``. Opens one usage interval per
    (flavor, resource) of ``usage`` (total over pod sets); ``borrowed`` is the part of ``usage`` above the
    team's nominal quota."""

    kind: ClassVar[str] = "Admitted"
    workload_id: WorkloadId
    attempt: int
    team: str
    at: datetime
    pod_sets: tuple[PodSetAssignment, ...]
    usage: Mapping[FlavorResource, int]
    borrowed: Mapping[FlavorResource, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _text(self.workload_id, "workload_id")
        _attempt(self.attempt, "attempt")
        _text(self.team, "team")
        _set(self, "at", _utc(self.at, "at"))
        _set(self, "pod_sets", tuple(self.pod_sets))
        _set(self, "usage", _milli_by_flavor_resource(self.usage, "usage"))
        _set(self, "borrowed", _milli_by_flavor_resource(self.borrowed, "borrowed"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Evicted(_OfAdmission):
    """Admission ``attempt`` gave its quota back (preempted, deleted, node lost…): closes its intervals."""

    kind: ClassVar[str] = "Evicted"
    workload_id: WorkloadId
    attempt: int
    at: datetime
    reason: str

    def __post_init__(self) -> None:
        _text(self.workload_id, "workload_id")
        _attempt(self.attempt, "attempt")
        _text(self.reason, "reason")
        _set(self, "at", _utc(self.at, "at"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Requeued(_OfAdmission):
    """After admission ``attempt`` ended, the workload went back to pending (keeping its creation time)."""

    kind: ClassVar[str] = "Requeued"
    workload_id: WorkloadId
    attempt: int
    at: datetime

    def __post_init__(self) -> None:
        _text(self.workload_id, "workload_id")
        _attempt(self.attempt, "attempt")
        _set(self, "at", _utc(self.at, "at"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished(_OfWorkload):
    """The workload ended for good (its Job completed, failed or was deleted): closes any open usage."""

    kind: ClassVar[str] = "Finished"
    workload_id: WorkloadId
    at: datetime
    succeeded: bool

    def __post_init__(self) -> None:
        _text(self.workload_id, "workload_id")
        if not isinstance(self.succeeded, bool):
            raise TypeError(f"succeeded must be a bool, got {self.succeeded!r}")
        _set(self, "at", _utc(self.at, "at"))

    @property
    def key(self) -> str:
        return f"{self.kind}|{self.workload_id}"


# --- preemption with checkpoint hooks -------------------------------------------------------------
# Usual order: PreemptionIssued → CheckpointRequested → CheckpointAcked | CheckpointTimedOut → Suspended →
# Evicted (quota given back) → Requeued; for a node failure PreemptionIssued → NodeFailed → Suspended → ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionIssued(_OfPreemption):
    """``victim`` (its admission ``victim_attempt``) must make room for ``preemptor`` (None when manual)."""

    kind: ClassVar[str] = "PreemptionIssued"
    victim: WorkloadId
    victim_attempt: int
    preemptor: WorkloadId | None
    reason: PreemptionReason
    at: datetime

    def __post_init__(self) -> None:
        _text(self.victim, "victim")
        _attempt(self.victim_attempt, "victim_attempt")
        if self.preemptor is not None:
            _text(self.preemptor, "preemptor")
        _set(self, "reason", PreemptionReason(self.reason))
        _set(self, "at", _utc(self.at, "at"))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFailed(_OfPreemption):
    """The victim's preemption (reason NodeFailure) was for ``node``, where it had pods, NotReady or gone since
    ``since``. No checkpoint was asked for; ``Suspended`` follows with the GPU time lost since the last one."""

    kind: ClassVar[str] = "NodeFailed"
    victim: WorkloadId
    victim_attempt: int
    node: str
    since: datetime
    at: datetime

    def __post_init__(self) -> None:
        _text(self.victim, "victim")
        _attempt(self.victim_attempt, "victim_attempt")
        _text(self.node, "node")
        _set(self, "since", _utc(self.since, "since"))
        _set(self, "at", _utc(self.at, "at"))


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRequested(_OfPreemption):
    kind: ClassVar[str] = "CheckpointRequested"
    victim: WorkloadId
    victim_attempt: int
    at: datetime
    deadline: datetime
    via: CheckpointVia

    def __post_init__(self) -> None:
        _text(self.victim, "victim")
        _attempt(self.victim_attempt, "victim_attempt")
        _set(self, "via", CheckpointVia(self.via))
        _set(self, "at", _utc(self.at, "at"))
        _set(self, "deadline", _utc(self.deadline, "deadline"))


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointAcked(_OfPreemption):
    kind: ClassVar[str] = "CheckpointAcked"
    victim: WorkloadId
    victim_attempt: int
    at: datetime
    checkpoint_id: str | None = None

    def __post_init__(self) -> None:
        _text(self.victim, "victim")
        _attempt(self.victim_attempt, "victim_attempt")
        if self.checkpoint_id is not None:
            _text(self.checkpoint_id, "checkpoint_id")
        _set(self, "at", _utc(self.at, "at"))


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointTimedOut(_OfPreemption):
    kind: ClassVar[str] = "CheckpointTimedOut"
    victim: WorkloadId
    victim_attempt: int
    at: datetime

    def __post_init__(self) -> None:
        _text(self.victim, "victim")
        _attempt(self.victim_attempt, "victim_attempt")
        _set(self, "at", _utc(self.at, "at"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Suspended(_OfPreemption):
    """The victim's Job was suspended. ``lost_gpu_milliseconds`` is the GPU time since its last checkpoint in
    thousandths of a GPU-second, exact (2 GPUs × 90.5 s = 181000)."""

    kind: ClassVar[str] = "Suspended"
    victim: WorkloadId
    victim_attempt: int
    at: datetime
    lost_gpu_milliseconds: int

    def __post_init__(self) -> None:
        _text(self.victim, "victim")
        _attempt(self.victim_attempt, "victim_attempt")
        _count(self.lost_gpu_milliseconds, "lost_gpu_milliseconds")
        _set(self, "at", _utc(self.at, "at"))


# --- operator actions and recovery ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Held(_OfOperator):
    """An operator (``actor``: the admin token's name) held the workload back from admission."""

    kind: ClassVar[str] = "Held"
    workload_id: WorkloadId
    at: datetime
    actor: str

    def __post_init__(self) -> None:
        _text(self.workload_id, "workload_id")
        _text(self.actor, "actor")
        _set(self, "at", _utc(self.at, "at"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Released(_OfOperator):
    kind: ClassVar[str] = "Released"
    workload_id: WorkloadId
    at: datetime
    actor: str

    def __post_init__(self) -> None:
        _text(self.workload_id, "workload_id")
        _text(self.actor, "actor")
        _set(self, "at", _utc(self.at, "at"))


@dataclass(frozen=True, slots=True, kw_only=True)
class IntervalsClosedOnRecovery(_OfOperator):
    """Written by ``accounting.recovery``, not by the queue manager: usage left open while kuota was down was
    closed at ``at``."""

    kind: ClassVar[str] = "IntervalsClosedOnRecovery"
    workload_id: WorkloadId
    at: datetime

    def __post_init__(self) -> None:
        _text(self.workload_id, "workload_id")
        _set(self, "at", _utc(self.at, "at"))


# --- configuration and audit ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigApplied(_Timed):
    """A team-quota file took effect. Build it with ``ConfigApplied.of(text, at=..., source=...)``."""

    kind: ClassVar[str] = "ConfigApplied"
    sha256: str
    text: str
    at: datetime
    source: str

    def __post_init__(self) -> None:
        if hashlib.sha256(self.text.encode()).hexdigest() != self.sha256:
            raise ValueError("sha256 does not match the text")
        _text(self.source, "source")
        _set(self, "at", _utc(self.at, "at"))

    @classmethod
    def of(cls, text: str, *, at: datetime, source: str) -> ConfigApplied:
        return cls(sha256=hashlib.sha256(text.encode()).hexdigest(), text=text, at=at, source=source)

    @property
    def key(self) -> str:
        # Re-applying an earlier file is a new version: the instant is part of the identity.
        return f"{self.kind}|{self.sha256}|{self.at.isoformat()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry(_Timed):
    """An admin API action. ``before``/``after`` are JSON values, copied at construction."""

    kind: ClassVar[str] = "AuditEntry"
    actor: str
    action: str
    target: str
    before: JsonValue
    after: JsonValue
    at: datetime

    def __post_init__(self) -> None:
        _text(self.actor, "actor")
        _text(self.action, "action")
        _text(self.target, "target")
        # A round trip both copies (the caller may keep mutating its dict) and rejects what JSON cannot hold.
        _set(self, "before", json.loads(_canonical_json(self.before)))
        _set(self, "after", json.loads(_canonical_json(self.after)))
        _set(self, "at", _utc(self.at, "at"))

    @property
    def key(self) -> str:
        # The same actor doing the same thing to the same target at the same instant is one entry.
        content = [self.actor, self.action, self.target, self.before, self.after, self.at.isoformat()]
        return f"{self.kind}|{hashlib.sha256(_canonical_json(content).encode()).hexdigest()}"


WorkloadEvent: TypeAlias = (
    WorkloadSeen
    | Admitted
    | Evicted
    | Requeued
    | Finished
    | PreemptionIssued
    | NodeFailed
    | CheckpointRequested
    | CheckpointAcked
    | CheckpointTimedOut
    | Suspended
    | Held
    | Released
    | IntervalsClosedOnRecovery
)
"""Events about one workload (``event.workload``); each appears in that workload's history."""

LedgerEvent: TypeAlias = WorkloadEvent | ConfigApplied | AuditEntry

WORKLOAD_EVENT_TYPES: tuple[type[WorkloadEvent], ...] = (
    WorkloadSeen,
    Held,
    Released,
    Admitted,
    PreemptionIssued,
    NodeFailed,
    CheckpointRequested,
    CheckpointAcked,
    CheckpointTimedOut,
    Suspended,
    Evicted,
    Requeued,
    Finished,
    IntervalsClosedOnRecovery,
)
"""In lifecycle order: events of one workload stamped with the same instant are shown in this order."""


def total_usage(
    pod_sets: Iterable[PodSetAssignment], requests: Mapping[str, Mapping[str, int]]
) -> dict[FlavorResource, int]:
    """Usage of an admission: Σ count × per-pod request, keyed by (assigned flavor, resource).

    ``requests`` maps pod set name → per-pod {resource: milli} (from the workload's ``PodSet``s).
    """
    usage: dict[FlavorResource, int] = {}
    for assignment in pod_sets:
        for resource, per_pod in requests[assignment.name].items():
            flavor = assignment.flavors.get(resource)
            if flavor is None or per_pod == 0:
                continue
            usage[(flavor, resource)] = usage.get((flavor, resource), 0) + assignment.count * per_pod
    return usage
