"""What the admin API answers and accepts: pydantic models, the single source of the OpenAPI document.

Quantities travel twice: in Kubernetes syntax for people (`4`, `512Gi`, `500m`) and as exact integer milli-units
for programs, so nobody has to parse a quantity to do arithmetic and nothing goes through a float.
Times are integer milliseconds on the controller's clock (epoch milliseconds in a cluster) or ISO 8601 for what
comes from the ledger.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from quota.quantity import format_resource

MAX_LIMIT = 500


class ApiModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Quantity(ApiModel):
    value: str = Field(description="Kubernetes quantity syntax")
    milli: int = Field(description="exact value in milli-units")

    @classmethod
    def of(cls, resource: str, milli: int) -> Quantity:
        return cls(value=format_resource(resource, milli), milli=milli)


class Problem(ApiModel):
    """RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None


# --- the cohort tree ---------------------------------------------------------------------------------------------


class ResourceAmounts(ApiModel):
    flavor: str
    resource: str
    nominal: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None
    subtree_quota: Quantity = Field(description="own nominal plus what the children lend (cohorts)")
    usage: Quantity
    borrowed: Quantity = Field(description="usage above the subtree quota, taken from the parent")
    lent: Quantity = Field(description="unused lendable quota that siblings are using now (lenders in tree order)")
    available: Quantity = Field(description="what this node could still take now, borrowing included")


class BudgetView(ApiModel):
    owner: str
    scope: Literal["team", "cohort"] = Field(description="a cohort's budget caps the sum of its subtree's teams")
    resource: str
    window: str = Field(description="day, week, month (UTC, ISO weeks) or rolling:DURATION")
    start: datetime
    end: datetime | None = Field(description="when the window rolls over; null for a rolling window")
    limit_hours: str = Field(description="resource-hours per window")
    spent_hours: str = Field(description="resource-hours spent in the window so far (to the thousandth)")
    remaining_hours: str
    limit: int = Field(description="exact: milli-unit-milliseconds")
    spent: int = Field(description="exact: milli-unit-milliseconds")
    percent: float = Field(description="spent / limit × 100, for display")
    exhausted: bool
    on_exhausted: Literal["block", "lowerPriority", "noBorrowing"]
    block_above: Literal["nominal", "zero"]
    effect: str = Field(description="what the budget restricts once spent")


class BudgetList(ApiModel):
    at: int
    budgets: list[BudgetView]
    restricted: dict[str, str] = Field(description="team → why its new admissions are restricted (last cycle)")


class TeamView(ApiModel):
    name: str
    parent: str | None
    queues: list[str]
    queueing_strategy: str
    weight: str
    weighted_share: float | None = Field(description="dominant resource share (DRS); null when infinite")
    pending: int
    inadmissible: int
    admitted: int
    evicting: int
    resources: list[ResourceAmounts]
    budgets: list[BudgetView] = Field(default_factory=list, description="its own and its cohorts' budgets")
    budget_restriction: str | None = Field(default=None, description="why spent budgets restrict it now")


class CohortView(ApiModel):
    name: str
    parent: str | None
    cohorts: list[str]
    teams: list[str]
    weight: str
    resources: list[ResourceAmounts]


class TreeView(ApiModel):
    roots: list[str]
    cohorts: list[CohortView]
    teams: list[TeamView]
    fair_sharing: bool


# --- queues and workloads ----------------------------------------------------------------------------------------

WorkloadState = Literal["pending", "admitted", "evicting", "finished"]
PendingStatus = Literal["active", "inadmissible", "held", "deactivated", "backoff", "awaiting-victims"]


class PodSetView(ApiModel):
    name: str
    count: int
    min_count: int | None = None
    requests: dict[str, Quantity] = Field(description="per pod")
    flavors: dict[str, str] = Field(default_factory=dict, description="resource → assigned flavor (admitted)")
    admitted_count: int | None = None


class WorkloadView(ApiModel):
    name: str = Field(description="workload id: KIND/NAMESPACE/NAME (a simulated Job: its trace name)")
    kind: str = Field(description="the job kind: Job, JobSet, PyTorchJob...")
    namespace: str = Field(description="the object's namespace (a simulated workload: its team)")
    team: str
    queue: str | None
    priority: int
    priority_class: str | None
    state: WorkloadState
    status: PendingStatus | None = Field(description="for pending workloads: why it is not a head right now")
    position_in_team: int | None = None
    position_in_queue: int | None = None
    reason: str | None = Field(description="why it waits (the last cycle's message)")
    created_at: int
    admitted_at: int | None = None
    held: bool
    evictions: int
    pod_sets: list[PodSetView]


class Page(ApiModel):
    total: int
    limit: int
    offset: int
    next_offset: int | None


class WorkloadList(Page):
    items: list[WorkloadView]


class TeamQueueView(ApiModel):
    team: str
    queues: list[str]
    strategy: str
    pending: int
    inadmissible: int
    workloads: list[WorkloadView] = Field(description="pending workloads in admission order (this page)")


class QueueList(ApiModel):
    teams: list[TeamQueueView]


class HistoryEvent(ApiModel):
    kind: str
    at: datetime
    data: dict[str, Any]


class AdmissionView(ApiModel):
    attempt: int
    team: str
    admitted_at: datetime
    ended_at: datetime | None
    end_reason: str | None
    usage: list[dict[str, Any]]


class PreemptionView(ApiModel):
    victim: str
    victim_attempt: int
    victim_team: str | None
    preemptor: str | None
    reason: str
    issued_at: datetime
    checkpoint_via: str | None
    checkpoint_requested_at: datetime | None
    checkpoint_acked_at: datetime | None
    checkpoint_timed_out_at: datetime | None
    checkpoint_id: str | None
    suspended_at: datetime | None
    requeued_at: datetime | None
    lost_gpu_seconds: str | None
    node: str | None = Field(default=None, description="the node whose failure evicted it (reason NodeFailure)")


class EstimateHead(ApiModel):
    workload: str
    team: str
    gpus: Quantity


class EstimateEnd(ApiModel):
    workload: str
    team: str
    gpus: Quantity
    ends_at: int | None = Field(description="expected end, controller clock (ms)")
    basis: str


class EstimateSimulation(ApiModel):
    simulated_to: int = Field(description="how far the simulation went (controller clock, ms)")
    horizon: int = Field(description="how far it could have gone")
    events: int = Field(description="simulated instants")
    stopped: str | None = Field(description="a bound that stopped it early")
    history_runs: int = Field(description="finished runs in the ledger it took run times from")
    wall_ms: int
    cached: bool = Field(description="answered from the simulation of the same state")


class EstimateView(ApiModel):
    start_at: int | None = Field(description="estimated start, controller clock (ms); null: unknown")
    start_in_s: int | None = Field(description="seconds from now to the estimated start")
    unknown: str | None = Field(description="why there is no estimate")
    position_in_team: int | None
    position_in_queue: int | None
    ahead: int = Field(description="pending workloads ahead of it in its team's queue")
    ahead_gpu_hours: str = Field(description="their GPUs × expected run time, over those with one")
    ahead_without_runtime: int
    runtime: str | None = Field(description="its own expected run time and what it rests on")
    runtime_s: int | None
    cohort: str
    cohort_heads: list[EstimateHead] = Field(description="the heads of the other teams of its cohort (first 3)")
    running: int = Field(description="running workloads in its cohort")
    running_without_end: int
    next_ends: list[EstimateEnd] = Field(description="the running work expected to end first (first 3)")
    simulation: EstimateSimulation | None


class WorkloadDetailView(ApiModel):
    workload: WorkloadView | None = Field(description="null when the controller forgot it (finished)")
    admissions: list[AdmissionView]
    preemptions: list[PreemptionView]
    history: list[HistoryEvent]
    estimate: EstimateView | None = Field(
        default=None, description="when it is expected to start (pending workloads, with ?estimate=true)"
    )


class PreemptionList(ApiModel):
    items: list[PreemptionView]


class ActionRequest(ApiModel):
    reason: str | None = Field(default=None, max_length=1000)


class ActionResult(ApiModel):
    workload: str
    action: Literal["hold", "release", "preempt"]
    actor: str
    before: dict[str, Any]
    after: dict[str, Any]


# --- reports and credits -----------------------------------------------------------------------------------------


class UsageRowView(ApiModel):
    key: str = Field(description="team, flavor or UTC day")
    resource: str
    milli_seconds: str = Field(description="exact milli-unit-seconds (decimal string)")
    hours: str = Field(description="resource-hours, exact (decimal string)")


class UsageReportView(ApiModel):
    start: datetime
    end: datetime
    by: Literal["team", "flavor", "kind", "day"]
    rows: list[UsageRowView]


class CreditView(ApiModel):
    team: str
    usage: str = Field(description="decayed weighted resource-seconds")
    usage_share: str = Field(description="U: fraction of the cluster's decayed usage")
    share: str = Field(description="S: normalised share")
    factor: str = Field(description="F = 2^(-U/S)")
    credit: str = Field(description="S - U")


class CreditList(ApiModel):
    at: int
    teams: list[CreditView]


# --- the quota file ----------------------------------------------------------------------------------------------


class ConfigProblemView(ApiModel):
    path: str
    line: int | None
    message: str


class ConfigCurrent(ApiModel):
    sha256: str
    source: str | None
    text: str
    teams: list[str]
    cohorts: list[str]


class WhatIfWindow(ApiModel):
    start: datetime = Field(alias="from", description="workloads created from here (ISO 8601; UTC without offset)")
    end: datetime = Field(alias="to", description="until here (exclusive)")


class ConfigProposal(ApiModel):
    text: str = Field(max_length=1_000_000, description="the proposed team-quota file (YAML)")
    whatif: WhatIfWindow | None = Field(
        default=None,
        description="diff only: also replay the ledger's workloads of this window under the file in force at its "
        "start and under the proposal, and compare per team",
    )


class WhatIfFigures(ApiModel):
    jobs: int
    mean_wait_s: float
    p95_wait_s: float
    gpu_hours: float
    borrowed_gpu_hours: float
    preemptions: int
    lost_gpu_seconds: float


class WhatIfTeam(ApiModel):
    team: str
    baseline: WhatIfFigures | None = Field(description="under the file in force (None: not a team there)")
    proposal: WhatIfFigures | None = Field(description="under the proposal (None: not a team there)")


class WhatIfSide(ApiModel):
    source: str = Field(description="where the quota file came from")
    jain_fairness: float
    utilization: float
    finished: int
    left_out: dict[str, int] = Field(description="workloads this file could not run, by reason")
    wall_seconds: float = Field(description="how long the replay took")


class WhatIfBudgetWindow(ApiModel):
    owner: str = Field(description="the team or cohort the budget is of")
    scope: Literal["team", "cohort"]
    resource: str
    window: str = Field(description="day, week, month or rolling:DURATION")
    label: str = Field(description="the window as people name it: 2021-03, 2021-W09, 2021-03-04, 24h")
    start: str = Field(description="the window's start (ISO 8601, UTC)")
    end: str = Field(description="the window's end, or the replay's last event where it comes first")
    budget_hours: str = Field(description="resource-hours, to the thousandth")
    spent_hours: str = Field(description="spent in the window, spending before the window's replay included")
    remaining_hours: str
    spent_milli_unit_ms: int = Field(description="the exact spending: milli-units × milliseconds")
    exhausted: bool
    exhausted_at: str | None = Field(description="when the replay first found the budget spent (None: never)")


class WhatIfBudgets(ApiModel):
    owner: str
    baseline: list[WhatIfBudgetWindow] = Field(description="its budget windows under the file in force")
    proposal: list[WhatIfBudgetWindow] = Field(description="its budget windows under the proposal")


class WhatIfComparison(ApiModel):
    start: datetime
    end: datetime
    workloads: int = Field(description="created in the window")
    replayed: int
    estimated_run_time: int = Field(description="unfinished workloads given the median run time of their team and size")
    left_out: dict[str, int] = Field(description="workloads not replayed, by reason")
    baseline: WhatIfSide
    proposal: WhatIfSide
    teams: list[WhatIfTeam]
    budgets: list[WhatIfBudgets] = Field(
        default_factory=list, description="per team or cohort with a budget under either file, every window replayed"
    )


class ConfigValidation(ApiModel):
    valid: bool
    problems: list[ConfigProblemView]


class QuotaChange(ApiModel):
    node: str
    flavor: str
    resource: str
    field: Literal["nominal", "borrowingLimit", "lendingLimit"]
    old: Quantity | None
    new: Quantity | None


class AffectedWorkload(ApiModel):
    workload: str
    team: str
    state: WorkloadState
    effect: str


class ConfigDiff(ApiModel):
    valid: bool
    problems: list[ConfigProblemView]
    added_teams: list[str]
    removed_teams: list[str]
    added_cohorts: list[str]
    removed_cohorts: list[str]
    changes: list[QuotaChange]
    affected: list[AffectedWorkload]
    would_apply: bool = Field(description="false when applying would be refused (e.g. a team with work removed)")
    whatif: WhatIfComparison | None = Field(default=None, description="present when the proposal asked for it")


class ConfigApplyResult(ApiModel):
    applied: bool
    sha256: str
    diff: ConfigDiff


# --- audit, health -----------------------------------------------------------------------------------------------


class AuditItem(ApiModel):
    actor: str
    action: str
    target: str
    before: Any
    after: Any
    at: datetime


class AuditList(ApiModel):
    items: list[AuditItem]


class Health(ApiModel):
    status: Literal["ok"]


class Readiness(ApiModel):
    ready: bool
    config_loaded: bool
    ledger: Literal["healthy", "unhealthy", "absent"]
    ledger_backlog: int
    leader: bool
    scheduling: Literal["running", "failing", "standby"] = "standby"
    """The leader's scheduling loop: failing once several wake-ups in a row raised (it keeps retrying)."""
    detail: str | None = None


class WhoAmI(ApiModel):
    name: str
    role: str


# --- query strings -----------------------------------------------------------------------------------------------


class QueryModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PageQuery(QueryModel):
    limit: int = Field(default=100, ge=1, le=MAX_LIMIT)
    offset: int = Field(default=0, ge=0, le=10_000_000)


class WorkloadQuery(PageQuery):
    team: str | None = Field(default=None, max_length=253)
    queue: str | None = Field(default=None, max_length=253)
    state: WorkloadState | None = None
    namespace: str | None = Field(default=None, max_length=253)
    kind: str | None = Field(default=None, max_length=63, description="only workloads of this job kind")


class DetailQuery(QueryModel):
    estimate: bool = Field(default=False, description="add the wait-time estimate of a pending workload")


class QueueQuery(QueryModel):
    limit: int = Field(default=100, ge=1, le=MAX_LIMIT, description="pending workloads shown per team")


class UsageQuery(QueryModel):
    start: datetime = Field(alias="from", description="start of the period, ISO 8601 with offset (inclusive)")
    end: datetime = Field(alias="to", description="end of the period (exclusive)")
    by: Literal["team", "flavor", "kind", "day"] = "team"
    resource: str | None = Field(default=None, max_length=253)
    format: Literal["json", "csv"] = "json"


class PreemptionQuery(QueryModel):
    team: str | None = Field(default=None, max_length=253)
    limit: int = Field(default=50, ge=1, le=MAX_LIMIT)


class AuditQuery(QueryModel):
    actor: str | None = Field(default=None, max_length=253)
    limit: int = Field(default=100, ge=1, le=MAX_LIMIT)
