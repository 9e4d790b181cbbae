"""The controller: runs the queue manager over time and carries its decisions out on a Cluster.

It owns everything that happens between cycles — checkpoint-hooked eviction, requeue with backoff, resume-from,
fair-share credits — and tells a Journal about every step. It is synchronous and clock-agnostic: the async loop
(queues/loop.py) drives it in real time, the simulator (clusters/sim/cluster.py) in virtual time, with the same code.

Eviction of a victim, per semantics.md "Preemption with checkpoint hooks":
request a checkpoint (URL hook or annotation handshake, the Cluster's business) → wait for the ack or the
priority class's checkpointTimeout → suspend → once the pods are gone, requeue keeping the creation time, with
exponential backoff → on readmission pass the last checkpoint id as resume-from. The victim keeps its quota the
whole time, so what it frees is never handed out twice.

Gang readiness (the quota file's `waitForPodsReady`, Kueue's waitForPodsReady): an admitted workload whose team
has a readiness block must report all its admitted pods ready within `timeout` (and again within
`recoveryTimeout` once it was ready and lost a pod), or it is evicted exactly as a victim is, with the reason
`PodsReadyTimeout`, and requeued with backoff from the block's `backoffBase`; the timeout after `requeuingLimit`
such requeues deactivates it instead: it leaves the queue until an operator releases it. `blockAdmission` keeps
every other head of the block's scope (the team for a team's block, every team without one for the file's block)
out of the cycle while an admitted workload of that scope is not ready.

Node failures (the quota file's `nodeFailure`): the cluster says when a node stops being Ready or is deleted
(`node_changed`) and which workloads have pods on it (`Cluster.workloads_on`). A node still failed
`gracePeriod` after it failed evicts every admitted workload with pods on it, with the reason `NodeFailure`: no
checkpoint is asked for (nobody is there to answer), it is stopped at once with the work since its last
checkpoint counted lost, and requeued with no backoff at the front of its priority in its queue, to resume from its
last checkpoint. A node Ready again within the grace period evicts nothing.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from admission.cycle import CycleResult, Verdict
from admission.workload import Workload
from queues.budgets import BudgetKeeper
from queues.cluster import Cluster, Timers
from queues.journal import Journal, NullJournal
from queues.manager import QueueManager, State
from quota.budgets import BudgetStatus
from quota.config import DEFAULT_CHECKPOINT_TIMEOUT_MS, QuotaConfig
from quota.credits import CreditBook
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource

CREDIT_REFRESH_MS = 300_000
_DEADLINE = 0
_ELIGIBLE = 1
_READY = 2
PODS_READY_TIMEOUT = PreemptionReason.PODS_READY_TIMEOUT
_PROTECTION_ENDS = 3
_NODE_LOST = 4
NODE_FAILURE = PreemptionReason.NODE_FAILURE
_BUDGET_REVIEW = 5
BACKOFF_BASE_MS = 10_000
BACKOFF_MAX_MS = 600_000


@dataclass
class Eviction:
    preemptor: str | None
    reason: PreemptionReason | str
    requested_at: int
    deadline: int
    via: str = ""
    acked_at: int | None = None
    checkpoint_id: str | None = None
    suspended_at: int | None = None


@dataclass
class Tracking:
    """What the controller remembers about a workload beyond the queue manager's state."""

    attempt: int = 0
    admitted_at: int | None = None
    last_checkpoint_at: int | None = None
    resume_from: str | None = None
    evictions: int = 0
    eviction: Eviction | None = None
    eligible_at: int = 0
    ready: bool = True
    """All admitted pods ready (always, for a workload whose team does not time readiness)."""
    ready_deadline: int | None = None
    """When the gang must be ready by, while it is not (None: not timed)."""
    ready_timeouts: int = 0
    """Evictions for not getting ready in time since it was last (re)activated."""
    lost_node: str | None = None
    """Being stopped because this node failed: requeued at the front, with no backoff."""


class Controller:
    def __init__(
        self,
        config: QuotaConfig,
        cluster: Cluster,
        timers: Timers,
        journal: Journal | None = None,
        *,
        backoff_base_ms: int = BACKOFF_BASE_MS,
        backoff_max_ms: int = BACKOFF_MAX_MS,
        checkpoint_aware_victims: bool = True,
    ) -> None:
        """`checkpoint_aware_victims`: between victims the spec's order leaves equal, the most recently
        checkpointed goes first; off, the spec's order alone (names break those ties)."""
        self.manager = QueueManager(config, park_equivalent=True)
        if checkpoint_aware_victims:
            self.manager.checkpoints = self.last_checkpoint_at
        self.cluster = cluster
        self.timers = timers
        self.journal: Journal = journal if journal is not None else NullJournal()
        self.credits = CreditBook(config)
        self.budgets = BudgetKeeper(config)
        self.tracking: dict[str, Tracking] = {}
        self.backoff_base_ms = backoff_base_ms
        self.backoff_max_ms = backoff_max_ms
        self.dirty = True
        self.paused = False
        """Admissions pause (queues keep filling) while the ledger cannot take more events."""
        self._factors: Mapping[str, Fraction] = {}
        self._factors_at: int | None = None
        self.last_cycle: CycleResult | None = None
        self._due: list[tuple[int, int, str]] = []
        self.not_ready: set[str] = set()
        """Admitted workloads whose team times readiness and whose pods are not all ready."""
        self._serial: dict[str, str] = {}
        """Teams under a blockAdmission block → their scope (the config `_serial_for` says)."""
        self._serial_for: QuotaConfig | None = None
        self._protection_reminders: set[int] = set()
        self.failing_nodes: dict[str, int] = {}
        """Nodes NotReady or deleted → since when (until they are Ready again)."""
        self.lost_nodes: set[str] = set()
        """Failing nodes whose grace period ran out and whose workloads were evicted (until Ready again)."""
        self._budget_review_at: int | None = None

    @property
    def config(self) -> QuotaConfig:
        return self.manager.config

    # -- what the cluster tells us ------------------------------------------------------------------------------

    def submit(self, workload: Workload, at: int) -> None:
        """A new workload (or one already running when we started: it carries its admission)."""
        if workload.name in self.manager.workloads:
            return
        self.manager.add(workload)
        track = self.tracking.setdefault(workload.name, Tracking())
        self.journal.workload_seen(workload, at)
        if workload.admission is not None:
            track.attempt = max(track.attempt, 1)
            track.admitted_at = workload.admission.admitted_at
            self.credits.open(workload.name, workload.team, _by_resource(self.manager.usage[workload.name]), at)
            self.budgets.open(workload.name, workload.team, _by_resource(self.manager.usage[workload.name]), at)
            if not workload.evicting:
                self._await_ready(workload, at, first=True)
        else:
            self.journal.queued(workload, len(self.manager.queues[workload.team]), at)
        self.dirty = True

    def job_finished(self, name: str, at: int, succeeded: bool = True) -> None:
        if name not in self.manager.workloads or self.manager.state[name] is State.FINISHED:
            return
        workload = self.manager.workloads[name]
        was_running = self.manager.state[name] in (State.ADMITTED, State.EVICTING)
        self.manager.finish(name)
        track = self.tracking.setdefault(name, Tracking())
        if was_running:
            self.credits.close(name, at)
            self.budgets.close(name, at)
            self.journal.finished(workload, track.attempt, succeeded, at)
        self.manager.forget(name)
        self.tracking.pop(name, None)
        self.not_ready.discard(name)
        self.dirty = True

    def job_deleted(self, name: str, at: int) -> None:
        self.job_finished(name, at, succeeded=False)

    def checkpoint_acked(self, name: str, checkpoint_id: str | None, at: int) -> None:
        track = self.tracking.get(name)
        if track is None or track.eviction is None or track.eviction.acked_at is not None:
            return
        if track.eviction.suspended_at is not None:
            return  # too late: the deadline passed and we suspended already
        eviction = track.eviction
        eviction.acked_at = at
        eviction.checkpoint_id = checkpoint_id
        track.last_checkpoint_at = at
        if checkpoint_id:
            track.resume_from = checkpoint_id
        self.journal.checkpoint_acked(self.manager.workloads[name], track.attempt, checkpoint_id, at)
        self._suspend(name, at)

    def checkpoint_reported(self, name: str, at: int, checkpoint_id: str | None = None) -> None:
        """A running job says it checkpointed on its own (periodic checkpoints bound the work lost); with an id, it
        is what the workload resumes from if it is stopped without a chance to checkpoint (its node failed)."""
        track = self.tracking.get(name)
        if track is not None:
            track.last_checkpoint_at = at
            if checkpoint_id:
                track.resume_from = checkpoint_id

    def node_changed(self, node: str, ready: bool, at: int, since: int | None = None) -> None:
        """The cluster says a node is Ready (again), or not: NotReady, its readiness unknown, or deleted, since
        `since` (the condition's transition time when the cluster knows it) or `at`. A node still not Ready
        nodeFailure.gracePeriod after that evicts the workloads with pods on it."""
        if ready:
            self.failing_nodes.pop(node, None)
            self.lost_nodes.discard(node)
            return
        if node in self.failing_nodes:
            return
        start = at if since is None else min(at, since)
        self.failing_nodes[node] = start
        settings = self.config.node_failure
        if settings is not None:
            self._remind(start + settings.grace_period, _NODE_LOST, node)

    def room_on_nodes(self) -> None:
        """Nodes may hold more than before (a pod that was not kuota's left, a node came back or became
        schedulable): heads parked for want of room on nodes look again at the next cycle. Only where a flavor is
        placed by a topology; elsewhere nodes never decide."""
        if self.manager.nodes is None or not any(f.topology for f in self.config.flavors):
            return
        for queue in self.manager.queues.values():
            queue.unpark_all()
        self.manager.blocked.clear()
        self.dirty = True

    def suspended(self, name: str, at: int) -> None:
        """The victim's pods are gone: its quota is free; requeue it with backoff."""
        if name not in self.manager.workloads or self.manager.state[name] not in (State.EVICTING, State.ADMITTED):
            return
        track = self.tracking.setdefault(name, Tracking())
        self.credits.close(name, at)
        self.budgets.close(name, at)
        self.not_ready.discard(name)
        track.ready, track.ready_deadline = True, None
        for_readiness = track.eviction is not None and track.eviction.reason == PODS_READY_TIMEOUT
        lost_node, track.lost_node = track.lost_node, None
        requeued = self.manager.complete_eviction(name, front=lost_node is not None)
        track.eviction = None
        settings, _ = self.config.pods_ready_settings(requeued.team)
        if lost_node is not None:
            delay = 0  # the node failed, not the workload: nothing to back off from, nor to count
        elif for_readiness and settings is not None:
            track.evictions += 1
            if settings.requeuing_limit is not None and track.ready_timeouts > settings.requeuing_limit:
                self._deactivate(requeued, settings.requeuing_limit, at)
                return
            base = settings.backoff_base if settings.backoff_base is not None else self.backoff_base_ms
            delay = min(self.backoff_max_ms, base * 2 ** (track.ready_timeouts - 1))
        else:
            track.evictions += 1
            delay = min(self.backoff_max_ms, self.backoff_base_ms * 2 ** (track.evictions - 1))
        track.eligible_at = at + delay
        if delay > 0:
            self.manager.delayed.add(name)
            self._remind(track.eligible_at, _ELIGIBLE, name)
        self.journal.requeued(requeued, track.attempt, track.eligible_at, at)
        self.dirty = True

    def pods_reported(self, name: str, ready: int | None, at: int) -> None:
        """The cluster says how many of an admitted workload's pods are ready (None: its kind does not say, which
        counts as ready: kuota never evicts for what it cannot see)."""
        track = self.tracking.get(name)
        workload = self.manager.workloads.get(name)
        if track is None or workload is None or workload.admission is None:
            return
        if self.manager.state.get(name) is not State.ADMITTED:
            return
        settings, _ = self.config.pods_ready_settings(workload.team)
        if settings is None:
            return
        now_ready = ready is None or ready >= sum(workload.admission.counts.values())
        if now_ready == track.ready:
            return
        if now_ready:
            track.ready, track.ready_deadline = True, None
            self.not_ready.discard(name)
            self.dirty = settings.block_admission or self.dirty
        else:
            self._await_ready(workload, at, first=False)

    def _await_ready(self, workload: Workload, at: int, *, first: bool) -> None:
        """Start timing an admitted workload's readiness: from admission (`first`), or after it lost a ready pod."""
        settings, _ = self.config.pods_ready_settings(workload.team)
        if settings is None:
            return
        track = self.tracking.setdefault(workload.name, Tracking())
        track.ready = False
        self.not_ready.add(workload.name)
        limit = settings.timeout if first else settings.recovery_timeout
        track.ready_deadline = None if limit is None else at + limit
        if track.ready_deadline is not None:
            self._remind(track.ready_deadline, _READY, workload.name)

    def _deactivate(self, workload: Workload, limit: int, at: int) -> None:
        name = workload.name
        message = (
            f"deactivated: its pods were not all ready in time {limit + 1} times (requeuingLimit {limit}); "
            "an operator's release (or recreating it) puts it back in the queue"
        )
        self.manager.deactivated.add(name)
        self.manager.messages[name] = message
        self.journal.deactivated(workload, self.tracking[name].attempt, message, at)
        self.cluster.mark_deactivated(workload, message)
        self.dirty = True

    def found_deactivated(self, name: str, message: str) -> None:
        """A pending workload whose object says kuota deactivated it before (this controller started since)."""
        if self.manager.state.get(name) is not State.PENDING:
            return
        self.manager.deactivated.add(name)
        self.manager.messages[name] = message

    def admission_failed(self, name: str, at: int) -> None:
        """The cluster refused to start an admitted workload (the run patch was forbidden or invalid): give its
        quota back and requeue it with backoff, as after an eviction, so that one Job the API server will not
        start cannot hold quota while the work behind it waits."""
        if name not in self.manager.workloads or self.manager.state[name] is not State.ADMITTED:
            return
        self.suspended(name, at)

    # -- operator actions ---------------------------------------------------------------------------------------

    def hold(self, name: str, actor: str, at: int) -> None:
        self.manager.hold(name)
        self.journal.held(self.manager.workloads[name], actor, at)

    def release(self, name: str, actor: str, at: int) -> None:
        deactivated = name in self.manager.deactivated
        self.manager.release(name)
        self.manager.delayed.discard(name)
        track = self.tracking.get(name)
        if track is not None:
            track.eligible_at = 0
            if deactivated:
                track.ready_timeouts = 0
        if deactivated:
            self.manager.messages.pop(name, None)
            self.cluster.mark_deactivated(self.manager.workloads[name], None)
        self.journal.released(self.manager.workloads[name], actor, at)
        self.dirty = True

    def preempt(self, name: str, actor: str, at: int) -> None:
        """Evict an admitted workload by hand, with its checkpoint."""
        victim = self.manager.evict(name)
        self._start_eviction(victim, None, f"Manual by {actor}", at)

    def reload(self, config: QuotaConfig, text: str, source: str, at: int) -> None:
        """Swap the quota file; raises (keeping the old one) if the new one would strand running work."""
        self.manager.reload(config)
        self.credits.reconfigure(config)
        self.budgets.reconfigure(config)
        self._factors_at = None
        self.journal.config_applied(text, source, at)
        for queue in self.manager.queues.values():
            queue.unpark_all()
        if config.node_failure is not None:
            # The grace period may be new or different: check every failing node again against it.
            for node, since in self.failing_nodes.items():
                if node not in self.lost_nodes:
                    self._remind(since + config.node_failure.grace_period, _NODE_LOST, node)
        self.dirty = True

    # -- time ---------------------------------------------------------------------------------------------------

    def tick(self, now: int) -> None:
        """Act on what is due: checkpoint deadlines and the end of requeue backoffs."""
        while self._due and self._due[0][0] <= now:
            at, kind, name = heapq.heappop(self._due)
            if kind == _BUDGET_REVIEW:
                # A budget may have crossed a threshold or its window rolled over: the next cycle reads them again.
                if self._budget_review_at == at:
                    self._budget_review_at = None
                self.dirty = True
                continue
            if kind == _PROTECTION_ENDS:
                # A minimum runtime that kept a parked head from preempting is over: the next cycle looks again.
                self._protection_reminders.discard(at)
                self.dirty = True
                continue
            if kind == _NODE_LOST:
                self._node_lost(name, now)
                continue
            track = self.tracking.get(name)
            if track is None:
                continue
            eviction = track.eviction
            if kind == _DEADLINE and eviction is not None and eviction.suspended_at is None:
                if now >= eviction.deadline:
                    self.journal.checkpoint_timed_out(self.manager.workloads[name], track.attempt, now)
                    self._suspend(name, now)
            elif kind == _ELIGIBLE and track.eligible_at and now >= track.eligible_at and name in self.manager.delayed:
                self.manager.delayed.discard(name)
                track.eligible_at = 0
                self.dirty = True
            elif kind == _READY and track.ready_deadline is not None and now >= track.ready_deadline:
                self._ready_timed_out(name, now)

    def _ready_timed_out(self, name: str, now: int) -> None:
        """The gang was not ready by its deadline: evict it like a victim (checkpoint first), for PodsReadyTimeout."""
        track = self.tracking[name]
        track.ready_deadline = None
        if self.manager.state.get(name) is not State.ADMITTED or track.eviction is not None:
            return
        track.ready_timeouts += 1
        victim = self.manager.evict(name)
        self._start_eviction(victim, None, PODS_READY_TIMEOUT, now)
        self.dirty = True

    def _node_lost(self, node: str, now: int) -> None:
        """A failing node's grace period may be over: evict every workload with pods on it."""
        since = self.failing_nodes.get(node)
        settings = self.config.node_failure
        if since is None or settings is None or node in self.lost_nodes:
            return  # Ready again meanwhile, node failures turned off, or already dealt with
        due = since + settings.grace_period
        if now < due:
            self._remind(due, _NODE_LOST, node)  # the grace period grew with a reload
            return
        self.lost_nodes.add(node)
        for name in sorted(self.cluster.workloads_on(node)):
            self._evict_for_node(name, node, since, now)
        inventory = self.cluster.node_inventory()
        if inventory is not None and inventory.node(node) is None:
            # Deleted: nothing more can happen to it, and a node made again under its name is reported afresh
            # (autoscaled clusters name every node anew: keeping them all would only grow).
            self.failing_nodes.pop(node, None)
            self.lost_nodes.discard(node)

    def _evict_for_node(self, name: str, node: str, since: int, now: int) -> None:
        """Stop a workload whose node failed, without a checkpoint request: the node is gone."""
        track = self.tracking.get(name)
        state = self.manager.state.get(name)
        if track is None:
            return
        if state is State.ADMITTED:
            victim = self.manager.evict(name)
            track.eviction = Eviction(None, NODE_FAILURE, now, now)
            self.journal.preemption_issued(victim, track.attempt, None, NODE_FAILURE, now)
        elif state is State.EVICTING and track.eviction is not None and track.eviction.suspended_at is None:
            victim = self.manager.workloads[name]  # asked to checkpoint on a node that cannot answer: stop waiting
        else:
            return  # pending, or already stopping
        if name in self.not_ready:
            self.not_ready.discard(name)
        track.ready, track.ready_deadline = True, None
        track.lost_node = node
        self.journal.node_failed(victim, track.attempt, node, since, now)
        self._suspend(name, now)
        self.dirty = True

    def next_due(self) -> int | None:
        """When `tick` next has something to do (None: nothing is waiting)."""
        return self._due[0][0] if self._due else None

    def _remind(self, at: int, kind: int, name: str) -> None:
        heapq.heappush(self._due, (at, kind, name))
        self.timers.call_at(at)

    def schedule(self, now: int) -> CycleResult | None:
        """One cycle if anything changed since the last one; carries out its decisions."""
        if not self.dirty or self.paused:
            return None
        self.dirty = False
        self.manager.gated = self._readiness_gates() if self.not_ready else {}
        factors = self._fair_share_factors(now)
        self._review_budgets(now)
        clock = time.perf_counter()
        result = self.manager.schedule(now, factors, self._serial_scopes())
        elapsed = time.perf_counter() - clock
        self.last_cycle = result
        admitted = preempting = 0
        for decision in result.decisions:
            name = decision.workload.name
            if decision.verdict is Verdict.ADMITTED and self.manager.state.get(name) is State.ADMITTED:
                admitted += 1
                self._admit(self.manager.workloads[name], decision, now)
            elif decision.verdict is Verdict.PREEMPTING:
                preempting += 1
            elif decision.verdict is Verdict.ERROR:
                self.journal.decision_failed(decision.workload, decision.message, now)
        started = 0
        for eviction in result.evictions:
            name = eviction.victim.name
            track = self.tracking.get(name)
            if self.manager.state.get(name) is State.EVICTING and (track is None or track.eviction is None):
                started += 1
                self._start_eviction(self.manager.workloads[name], eviction.preemptor.name, eviction.reason, now)
        wake = self.manager.next_protection_end()
        if wake is not None and wake > now and wake not in self._protection_reminders:
            self._protection_reminders.add(wake)
            self._remind(wake, _PROTECTION_ENDS, "")
        self.journal.cycle(len(result.decisions), admitted, preempting, elapsed, now)
        if admitted or started:
            # The next heads deserve a look right away; a cycle that only waits for victims already leaving
            # changes nothing, and the next one would decide the same.
            self.dirty = True
        return result

    def _readiness_gates(self) -> dict[str, str]:
        """Teams whose heads wait because an admitted workload in their blockAdmission scope is not ready."""
        waiting: dict[str | None, str] = {}
        for name in sorted(self.not_ready):
            settings, scope = self.config.pods_ready_settings(self.manager.workloads[name].team)
            if settings is not None and settings.block_admission:
                waiting.setdefault(scope, name)
        gates = {}
        for team in self.config.teams:
            settings, scope = self.config.pods_ready_settings(team.name)
            if settings is not None and settings.block_admission and scope in waiting:
                gates[team.name] = (
                    f"admission blocked (blockAdmission): admitted workload {waiting[scope]} does not have all its "
                    "pods ready yet"
                )
        return gates

    def _serial_scopes(self) -> dict[str, str]:
        """Teams under a blockAdmission block, by scope: each scope admits one workload per cycle."""
        if self._serial_for is not self.config:
            self._serial_for = self.config
            self._serial = {}
            for team in self.config.teams:
                settings, scope = self.config.pods_ready_settings(team.name)
                if settings is not None and settings.block_admission:
                    self._serial[team.name] = scope if scope is not None else ""
        return self._serial

    def _review_budgets(self, now: int) -> None:
        """Read every budget at `now`, hand the engine what the spent ones restrict, announce thresholds crossed,
        and set a timer for the next moment a budget may cross one or its window roll over."""
        for status, percent in self.budgets.review(now):
            affected = self.budget_affected(status)
            self.journal.budget_reached(status, percent, affected, now)
        self.manager.set_budgets(self.budgets.restrictions, self.budgets.lowest)
        due = self.budgets.next_review(now)
        if due is not None and (self._budget_review_at is None or due < self._budget_review_at):
            self._budget_review_at = due
            self._remind(due, _BUDGET_REVIEW, "")

    def budget_affected(self, status: BudgetStatus) -> list[Workload]:
        """The pending workloads a budget's restriction reaches: its team's, or every team's of its cohort."""
        members = self.budgets.members.get(status.owner, []) if status.cohort else [(status.owner, 0)]
        teams = {name for name, _ in members}
        return [w for team in sorted(teams) if team in self.manager.queues for w in self.manager.pending(team)]

    def credit_report(self, now: int) -> dict[str, object]:
        return dict(self.credits.credits(now))

    # -- internals ----------------------------------------------------------------------------------------------

    def _fair_share_factors(self, now: int) -> Mapping[str, Fraction]:
        if self._factors_at is None or now - self._factors_at >= CREDIT_REFRESH_MS or now < self._factors_at:
            self._factors = self.credits.factors_when_read(now)
            self._factors_at = now
        return self._factors

    def _admit(self, workload: Workload, decision: object, now: int) -> None:
        track = self.tracking.setdefault(workload.name, Tracking())
        track.attempt += 1
        track.admitted_at = now
        track.last_checkpoint_at = now
        admission = workload.admission
        assert admission is not None
        usage = self.manager.usage[workload.name]
        self.credits.open(workload.name, workload.team, _by_resource(usage), now)
        self.budgets.open(workload.name, workload.team, _by_resource(usage), now)
        self.journal.admitted(workload, track.attempt, usage, self.borrowed(workload.team, usage), now)
        self._await_ready(workload, now, first=True)
        self.cluster.admit(workload, admission.flavors, admission.counts, track.resume_from)

    def last_checkpoint_at(self, workload: Workload) -> int | None:
        """When a running workload last saved its work: a checkpoint it reported or acked, or one the cluster
        knows of (None: not since its admission)."""
        track = self.tracking.get(workload.name)
        mine = track.last_checkpoint_at if track is not None else None
        if mine is not None and track is not None and track.admitted_at is not None and mine <= track.admitted_at:
            mine = None  # set at admission: nothing saved yet
        theirs = self.cluster.last_checkpoint_at(workload)
        if mine is None or (theirs is not None and theirs > mine):
            return theirs
        return mine

    def borrowed(self, team: str, usage: Mapping[FlavorResource, int]) -> dict[FlavorResource, int]:
        """What this admission takes above the team's nominal quota (the team's usage already includes it)."""
        node = self.manager.live.teams[team]
        borrowed = {}
        for fr, value in usage.items():
            above = node.usage.get(fr, 0) - node.nominal(fr)
            if above > 0:
                borrowed[fr] = min(value, above)
        return borrowed

    def _start_eviction(
        self, victim: Workload, preemptor: str | None, reason: PreemptionReason | str, now: int
    ) -> None:
        track = self.tracking.setdefault(victim.name, Tracking())
        if victim.name in self.not_ready:
            self.not_ready.discard(victim.name)  # leaving: it no longer holds anyone's admission back
            self.dirty = True
        timeout = self._checkpoint_timeout(victim)
        eviction = Eviction(preemptor, reason, now, now + timeout)
        track.eviction = eviction
        self.journal.preemption_issued(victim, track.attempt, preemptor, reason, now)
        eviction.via = self.cluster.request_checkpoint(victim, eviction.deadline, str(reason), preemptor)
        self.journal.checkpoint_requested(victim, track.attempt, eviction.deadline, eviction.via, now)
        if timeout <= 0:
            self.journal.checkpoint_timed_out(victim, track.attempt, now)
            self._suspend(victim.name, now)
        else:
            self._remind(eviction.deadline, _DEADLINE, victim.name)

    def _checkpoint_timeout(self, workload: Workload) -> int:
        if workload.priority_class is not None:
            klass = self.config.priority_class(workload.priority_class)
            if klass is not None:
                return klass.checkpoint_timeout
        default = self.config.default_priority_class()
        return default.checkpoint_timeout if default is not None else DEFAULT_CHECKPOINT_TIMEOUT_MS

    def _suspend(self, name: str, now: int) -> None:
        track = self.tracking[name]
        workload = self.manager.workloads[name]
        if track.eviction is not None:
            track.eviction.suspended_at = now
        since = track.last_checkpoint_at if track.last_checkpoint_at is not None else (track.admitted_at or now)
        periodic = self.cluster.last_checkpoint_at(workload)
        if periodic is not None:
            since = max(since, periodic)
        gpus = sum(v for (_, resource), v in self.manager.usage.get(name, {}).items() if resource.endswith("gpu"))
        lost = gpus * max(0, now - since) // 1000  # milli-GPU × ms / 1000 = milli-GPU-seconds
        self.journal.suspended(workload, track.attempt, lost, now)
        self.cluster.suspend(workload)


def _by_resource(usage: Mapping[FlavorResource, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_, resource), value in usage.items():
        out[resource] = out.get(resource, 0) + value
    return out
