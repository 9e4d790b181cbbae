"""The team-quota file (QuotaConfig) as pydantic models.

Field names follow the YAML (camelCase aliases); quantities are integer milli-units and durations integer
milliseconds from the moment they are read. Rules that span several objects (unique names, parents that exist,
no cycles, limits only under a parent…) live in quota/rules.py so every violation is reported, not just the first.
"""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from quota.duration import DurationError, format_duration_ms, parse_duration_ms
from quota.quantity import QuantityError, format_quantity, parse_quantity


def _quantity(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        milli = value * 1000
    elif isinstance(value, str | float | Decimal):
        try:
            milli = parse_quantity(value)
        except QuantityError as exc:
            raise ValueError(str(exc)) from None
    else:
        raise ValueError(f"{value!r} is not a quantity (examples: 500m, 2, 1.5, 4Gi, 2e3)")
    if milli < 0:
        raise ValueError(f"{value!r} is negative; quotas cannot be")
    return milli


def _duration(value: Any) -> int:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration (examples: 90s, 2m, 168h)")
    try:
        return parse_duration_ms(value)
    except DurationError as exc:
        raise ValueError(str(exc)) from None


def _weight(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    try:
        weight = Decimal(repr(value) if isinstance(value, float) else str(value))
    except ArithmeticError:
        raise ValueError(f"{value!r} is not a number") from None
    if not weight.is_finite() or weight < 0:
        raise ValueError(f"{value!r} must be a non-negative number")
    return weight


#: Integer milli-units, read from Kubernetes quantity syntax.
MilliQuantity = Annotated[int, BeforeValidator(_quantity), PlainSerializer(format_quantity, return_type=str)]
#: Integer milliseconds, read from Go duration syntax.
DurationMs = Annotated[int, BeforeValidator(_duration), PlainSerializer(format_duration_ms, return_type=str)]
#: An exact non-negative decimal weight.
Weight = Annotated[Decimal, BeforeValidator(_weight), PlainSerializer(str, return_type=str)]

DEFAULT_CHECKPOINT_TIMEOUT_MS = 60_000
#: How long a node may be NotReady (or gone) before kuota evicts the workloads with pods on it: Kubernetes' own
#: default for the same decision (the `node.kubernetes.io/not-ready` and `unreachable` NoExecute tolerations that
#: the DefaultTolerationSeconds admission plugin gives every pod are 300 s), so kuota acts when the cluster would.
DEFAULT_NODE_FAILURE_GRACE_MS = 300_000
DEFAULT_USAGE_HALF_LIFE_MS = 168 * 3_600_000


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, str_strip_whitespace=True
    )


class QueueingStrategy(StrEnum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


class WithinTeamPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class FungibilityPolicy(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class PreemptionStrategy(StrEnum):
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


class Toleration(_Model):
    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    @field_validator("operator")
    @classmethod
    def _operator(cls, value: str) -> str:
        if value not in ("Equal", "Exists"):
            raise ValueError("operator must be Equal or Exists")
        return value

    @field_validator("effect")
    @classmethod
    def _effect(cls, value: str | None) -> str | None:
        if value not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError("effect must be NoSchedule, PreferNoSchedule or NoExecute")
        return value


class Topology(_Model):
    """A named topology: node-label levels from the widest domain to the narrowest (block, rack, host)."""

    name: str
    levels: tuple[str, ...]


class Flavor(_Model):
    name: str
    node_labels: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    topology: str | None = None
    """The topology its nodes are placed by (see spec/topology.md); None: kuota counts quota only."""


class MinRuntime(_Model):
    """How long an admitted workload runs before it may be preempted (since its latest admission).

    Written `minRuntime: 2h`, or `minRuntime: {duration: 2h, exceptReclaim: true}` to let a team take back
    nominal quota it lent (a victim whose preemption reason is CohortReclamation) even from protected work.
    """

    duration: DurationMs
    except_reclaim: bool = False

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        if isinstance(value, str | int) and not isinstance(value, bool):
            return {"duration": value}
        if value is None or isinstance(value, bool | float):
            raise ValueError(f"{value!r} is not a duration; give `2h` or `{{duration: 2h, exceptReclaim: true}}`")
        return value


class BudgetWindow(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class OnExhausted(StrEnum):
    BLOCK = "block"
    LOWER_PRIORITY = "lowerPriority"
    NO_BORROWING = "noBorrowing"


class BlockAbove(StrEnum):
    NOMINAL = "nominal"
    ZERO = "zero"


#: The longest rolling window: a year and a day. Spending is kept (and read back from the ledger) over the longest
#: window in force, so a longer one would only make every leader's rebuild read more history for no purpose.
MAX_ROLLING_MS = 366 * 24 * 3_600_000


def _resource_hours(value: Any) -> int:
    """Resource-hours in quantity syntax (`10000`, `1.5k`, `500m`), held as milli-unit-hours."""
    return _quantity(value)


class Budget(_Model):
    """Resource-hours a team (or a cohort's subtree) may spend per window, and what happens once they are spent.

    Spending is exact: milli-units × milliseconds of every usage interval, clipped to the window (quota/spending.py).
    """

    window: BudgetWindow | None = None
    """Calendar window in UTC: `day`, `week` (ISO, from Monday 00:00) or `month`."""
    rolling: DurationMs | None = None
    """Instead of `window`: the last DURATION up to now."""
    resources: dict[str, Annotated[int, BeforeValidator(_resource_hours)]]
    """Resource → resource-hours (quantity syntax), held as milli-unit-hours."""
    on_exhausted: OnExhausted = OnExhausted.BLOCK
    block_above: BlockAbove | None = None
    """With `block`: `nominal` (default: no new admission above nominal quota) or `zero` (no new admission)."""

    @model_validator(mode="after")
    def _one_window(self) -> Budget:
        if (self.window is None) == (self.rolling is None):
            raise ValueError("give exactly one of `window` (day, week, month) and `rolling` (a duration such as 720h)")
        if self.rolling is not None and not 0 < self.rolling <= MAX_ROLLING_MS:
            raise ValueError("rolling must be longer than 0 and at most 8784h (366 days)")
        if self.block_above is not None and self.on_exhausted is not OnExhausted.BLOCK:
            raise ValueError("blockAbove only applies with onExhausted: block")
        if not self.resources:
            raise ValueError("resources is empty; name at least one resource and its hours (nvidia.com/gpu: 10000)")
        return self

    @property
    def blocks_above(self) -> BlockAbove:
        return self.block_above if self.block_above is not None else BlockAbove.NOMINAL

    @property
    def window_name(self) -> str:
        """`day`, `week`, `month` or `rolling:720h`: how metrics, the API and messages name the window."""
        if self.window is not None:
            return str(self.window)
        assert self.rolling is not None
        return f"rolling:{format_duration_ms(self.rolling)}"


#: Kubernetes' own bounds on a PriorityClass value: an int32, and at most 10^9 for classes users define (higher
#: values are kept for system-cluster-critical and system-node-critical).
MIN_PRIORITY = -(2**31)
MAX_PRIORITY = 1_000_000_000


class PriorityClass(_Model):
    name: str
    value: Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY)]
    default: bool = False
    preemptible: bool = True
    checkpoint_timeout: DurationMs = DEFAULT_CHECKPOINT_TIMEOUT_MS
    min_runtime: MinRuntime | None = None
    """None (or a duration of 0): preemptible as soon as admitted."""
    description: str = ""


class FairSharingSettings(_Model):
    enabled: bool = False
    preemption_strategies: tuple[PreemptionStrategy, ...] = (
        PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        PreemptionStrategy.LESS_THAN_INITIAL_SHARE,
    )
    usage_half_life: DurationMs = DEFAULT_USAGE_HALF_LIFE_MS
    resource_weights: dict[str, Weight] = Field(default_factory=dict)

    @field_validator("preemption_strategies")
    @classmethod
    def _strategies(cls, value: tuple[PreemptionStrategy, ...]) -> tuple[PreemptionStrategy, ...]:
        if not 1 <= len(value) <= 2 or len(set(value)) != len(value):
            raise ValueError("give one or two distinct strategies")
        return value


class FairSharingWeight(_Model):
    weight: Weight = Decimal(1)


class ResourceQuota(_Model):
    nominal: MilliQuantity
    borrowing_limit: MilliQuantity | None = None
    lending_limit: MilliQuantity | None = None


class FlavorQuotas(_Model):
    flavor: str
    resources: dict[str, ResourceQuota]


class ResourceGroup(_Model):
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


class BorrowWithinCohort(_Model):
    policy: BorrowPolicy = BorrowPolicy.NEVER
    max_priority_threshold: int | None = None


class Preemption(_Model):
    within_team: WithinTeamPolicy = WithinTeamPolicy.NEVER
    reclaim_within_cohort: ReclaimPolicy = ReclaimPolicy.NEVER
    borrow_within_cohort: BorrowWithinCohort = Field(default_factory=BorrowWithinCohort)


class FlavorFungibility(_Model):
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference = FungibilityPreference.BORROWING_OVER_PREEMPTION


class _QuotaHolder(_Model):
    """What teams and cohorts share: a place in the tree and quota in one of two spellings."""

    name: str
    parent: str | None = None
    quotas: tuple[FlavorQuotas, ...] | None = None
    resource_groups: tuple[ResourceGroup, ...] | None = None
    fair_sharing: FairSharingWeight = Field(default_factory=FairSharingWeight)
    budgets: tuple[Budget, ...] = ()
    """Resource-hours per window (a cohort's caps the sum of its subtree); see quota/budgets.py."""

    @model_validator(mode="after")
    def _one_spelling(self) -> _QuotaHolder:
        if self.quotas is not None and self.resource_groups is not None:
            raise ValueError("give either `quotas` or `resourceGroups`, not both")
        return self

    def groups(self) -> tuple[ResourceGroup, ...]:
        """The quota as resource groups; `quotas` is one group covering every resource it names."""
        if self.resource_groups is not None:
            return self.resource_groups
        if not self.quotas:
            return ()
        covered: list[str] = []
        for entry in self.quotas:
            for resource in entry.resources:
                if resource not in covered:
                    covered.append(resource)
        return (ResourceGroup(covered_resources=tuple(covered), flavors=self.quotas),)


class Cohort(_QuotaHolder):
    pass


class WaitForPodsReady(_Model):
    """Gang readiness (Kueue's waitForPodsReady): an admitted workload's pods must all be ready within `timeout`,
    and again within `recovery_timeout` after losing readiness, or it is evicted and requeued with backoff;
    after `requeuing_limit` requeues for that reason it is deactivated. With `block_admission`, nothing else in
    the block's scope is admitted while an admitted workload there is not ready yet."""

    timeout: DurationMs
    requeuing_limit: int | None = Field(default=None, ge=0)
    """Requeues after a readiness timeout before the workload is deactivated; None: no limit."""
    recovery_timeout: DurationMs | None = None
    """How long a gang that was ready may stay not ready; None: no limit."""
    block_admission: bool = False
    backoff_base: DurationMs | None = None
    """The first requeue wait after a readiness timeout (doubling per such requeue); None: the controller's."""

    @field_validator("timeout", "recovery_timeout", "backoff_base")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("must be longer than 0")
        return value

    @field_validator("requeuing_limit", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r} is not a whole number of requeues")
        return value


class NodeFailure(_Model):
    """Node failures: a node NotReady (or deleted) for longer than `grace_period` evicts every admitted workload
    with pods on it (reason NodeFailure), which is requeued at the front of its queue to resume from its last
    checkpoint. The block's presence turns on kuota's watch of Nodes and of the pods bound to them."""

    grace_period: DurationMs = DEFAULT_NODE_FAILURE_GRACE_MS

    @field_validator("grace_period")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be longer than 0 (a node that misses one heartbeat is not lost)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _block(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"{value!r} is not a block; give `{{gracePeriod: 5m}}` (or `{{}}` for the default)")
        return value


class Team(_QuotaHolder):
    queues: tuple[str, ...] = ()
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    preemption: Preemption = Field(default_factory=Preemption)
    flavor_fungibility: FlavorFungibility = Field(default_factory=FlavorFungibility)
    wait_for_pods_ready: WaitForPodsReady | None = None
    """This team's gang readiness; overrides the file's `waitForPodsReady` for the team's workloads."""
    min_runtime: MinRuntime | None = None
    """Replaces the priority classes' minRuntime for this team's workloads (`0s`: none)."""


class Namespace(_Model):
    """Per-namespace admission settings used by the webhooks."""

    name: str
    managed: bool = False
    default_queue: str | None = None


class QuotaConfig(_Model):
    api_version: str = "kuota.dev/v1"
    kind: str = "QuotaConfig"
    topologies: tuple[Topology, ...] = ()
    flavors: tuple[Flavor, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    fair_sharing: FairSharingSettings = Field(default_factory=FairSharingSettings)
    cohorts: tuple[Cohort, ...] = ()
    teams: tuple[Team, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    wait_for_pods_ready: WaitForPodsReady | None = None
    """Gang readiness for every team without its own block; None: admitted workloads are never timed."""
    node_failure: NodeFailure | None = None
    """Node failures (and the Node and pod watches they need); None: kuota never looks at nodes for them."""
    job_kinds: tuple[str, ...] | None = None
    """The kinds of job kuota queues, by kind name (`Job`, `JobSet`, `PyTorchJob`...); None: `Job` only. Which
    names exist is the job framework's to say: `kuota validate` and `kuota serve` check them against it."""
    sticky_preemptors: bool = False
    """True: a BestEffortFIFO team's head that is preempting stays the team's head until it is admitted, found
    inadmissible or removed, as Kueue's sticky workload does (queues/pending.py `TeamQueue.preemptor`). False, the
    default: the spec's queue order, in which work parked before it comes back in front of it when its victims'
    leaving unparks it."""

    @field_validator("job_kinds")
    @classmethod
    def _job_kinds(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("jobKinds is empty; list at least one kind (e.g. [Job]), or leave it out for Job only")
        seen: set[str] = set()
        for name in value:
            if not name or len(name) > 63 or not name.isascii() or not name.isalnum():
                raise ValueError(f"jobKinds: {name[:70]!r} is not a kind name (such as Job or JobSet)")
            if name in seen:
                raise ValueError(f"jobKinds lists {name} twice")
            seen.add(name)
        return value

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        if value != "kuota.dev/v1":
            raise ValueError("apiVersion must be kuota.dev/v1")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != "QuotaConfig":
            raise ValueError("kind must be QuotaConfig")
        return value

    def topology_of(self, flavor: str) -> Topology | None:
        """The topology a flavor declares (None: none, or a name no topology has, which validation reports)."""
        for spec in self.flavors:
            if spec.name == flavor:
                return next((t for t in self.topologies if t.name == spec.topology), None)
        return None

    def default_priority_class(self) -> PriorityClass | None:
        return next((pc for pc in self.priority_classes if pc.default), None)

    def priority_class(self, name: str) -> PriorityClass | None:
        return next((pc for pc in self.priority_classes if pc.name == name), None)

    def pods_ready_settings(self, team: str) -> tuple[WaitForPodsReady | None, str | None]:
        """The gang-readiness block that applies to `team`, and its scope: the team's name when the team has its
        own block, None when the file's global block applies (or when there is none)."""
        found = next((t for t in self.teams if t.name == team), None)
        if found is not None and found.wait_for_pods_ready is not None:
            return found.wait_for_pods_ready, team
        return self.wait_for_pods_ready, None

    def min_runtime(self, team: str, priority_class: str | None) -> MinRuntime | None:
        """The protection of a workload of `team` and `priority_class` (its team's, else its class's, else the
        default class's); None when it has none."""
        owner = next((t for t in self.teams if t.name == team), None)
        found = owner.min_runtime if owner is not None else None
        if found is None:
            klass = self.priority_class(priority_class) if priority_class is not None else None
            if klass is None:
                klass = self.default_priority_class()
            found = klass.min_runtime if klass is not None else None
        return found if found is not None and found.duration > 0 else None

    @property
    def watches_nodes(self) -> bool:
        """Whether kuota needs to know nodes and the pods bound to them (node failures are on, or a flavor is
        placed by a topology)."""
        return self.node_failure is not None or any(f.topology for f in self.flavors)

    def team_for_queue(self, queue: str) -> Team | None:
        return next((t for t in self.teams if queue in t.queues), None)
