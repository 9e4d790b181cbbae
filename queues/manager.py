"""The queue manager's state machine: what is pending, running and leaving, and how a cycle's decisions change it.

Synchronous and free of I/O so the scenario runner, the simulator and the controller share it; the async
scheduling loop (queues/loop.py) wraps it with events, clocks and a Cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from fractions import Fraction

from admission.cycle import CycleResult, Decision, Verdict, run_cycle
from admission.nodes import NodeInventory
from admission.placement import placement_usage
from admission.running import RunningWorkloads
from admission.snapshot import Snapshot, iso_time
from admission.workload import Admission, Workload
from queues.pending import TeamQueue
from quota.budgets import Restriction
from quota.config import QueueingStrategy, QuotaConfig
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource, QuotaTree


class State(StrEnum):
    PENDING = "pending"
    ADMITTED = "admitted"
    EVICTING = "evicting"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class Preemption:
    victim: str
    preemptor: str
    reason: PreemptionReason


class UnknownWorkload(KeyError):
    pass


class ReloadRejected(ValueError):
    pass


class QueueManager:
    def __init__(self, config: QuotaConfig, park_equivalent: bool = False) -> None:
        self.config = config
        self.park_equivalent = park_equivalent
        self.tree = QuotaTree.from_config(config)
        self.queues = {t.name: TeamQueue(t.name, t.queueing_strategy) for t in config.teams}
        self.workloads: dict[str, Workload] = {}
        self.state: dict[str, State] = {}
        self.held: set[str] = set()
        """Held by an operator: never a head until released."""
        self.awaiting: dict[str, set[str]] = {}
        """Preemptor → victims still leaving: the preemptor waits for them instead of being reconsidered."""
        self._awaited_by: dict[str, set[str]] = {}
        self.blocked: dict[str, str] = {}
        """StrictFIFO team → the head that could not fit; not retried until capacity in its cohort changes."""
        self.delayed: set[str] = set()
        """Requeued after eviction and backing off: not a head until the controller lets it go."""
        self.deactivated: set[str] = set()
        """Evicted too often for not getting its pods ready: out of the queue until an operator releases it."""
        self.gated: dict[str, str] = {}
        """Team → why none of its heads may be admitted now (gang readiness's blockAdmission)."""
        self.messages: dict[str, str] = {}
        self.preemptions: dict[str, Preemption] = {}
        """Last preemption issued per victim (who asked it to leave and why)."""
        self.cycles = 0
        self.checkpoints: Callable[[Workload], int | None] | None = None
        """When a running workload last checkpointed, for the victim order's tie-break (unset: the spec's order)."""
        self.time_text: Callable[[int], str] = iso_time
        """How messages show a time of this manager's clock."""
        self.protection_waits: dict[str, int] = {}
        """Head parked because every victim it needs is still within its minimum runtime → when the first of the
        minimum runtimes it met ends; then its cohort's parked work looks again."""
        self.budgets: dict[str, Restriction] = {}
        """Team → what its spent budgets allow (quota/budgets.py); set before each cycle by `set_budgets`."""
        self._base_priority: dict[str, int] = {}
        """Workloads of teams under `lowerPriority` → their own priority, given back when the budget recovers."""
        self._lowest = 0
        self.nodes: NodeInventory | None = None
        """The nodes of the flavors with a topology, with every running workload's placement bound under its name;
        set by the cluster (None: no topology, nothing is placed on nodes). Each cycle works on a copy."""
        # Running work and its usage, kept current so a snapshot is a copy rather than a recount.
        self.live = self.tree.copy()
        self.running_by_team: dict[str, RunningWorkloads] = {t.name: RunningWorkloads() for t in config.teams}
        self.usage: dict[str, dict[FlavorResource, int]] = {}
        self._by_tree: dict[str, list[tuple[str, TeamQueue]]] = {}

    # -- intake -------------------------------------------------------------------------------------------------

    def add(self, workload: Workload) -> None:
        if workload.team not in self.queues:
            raise ValueError(f"workload {workload.name}: team {workload.team!r} is not in the quota configuration")
        budget = self.budgets.get(workload.team)
        if budget is not None and budget.lowest_priority and workload.priority != self._lowest:
            self._base_priority[workload.name] = workload.priority
            workload = replace(workload, priority=self._lowest)
        self.workloads[workload.name] = workload
        if workload.admission is not None:
            self.state[workload.name] = State.EVICTING if workload.evicting else State.ADMITTED
            self._start_running(workload)
        else:
            self.state[workload.name] = State.PENDING
            self.queues[workload.team].push(workload)

    def get(self, name: str) -> Workload:
        try:
            return self.workloads[name]
        except KeyError:
            raise UnknownWorkload(name) from None

    def running(self) -> list[Workload]:
        return [w for team in self.running_by_team.values() for w in team.values()]

    def _start_running(self, workload: Workload) -> None:
        usage = workload.usage()
        self.usage[workload.name] = usage
        self.running_by_team[workload.team][workload.name] = workload
        self.live.add_all(self.live.teams[workload.team], usage)
        if self.nodes is not None and workload.admission is not None and workload.admission.placement:
            for node, requests in placement_usage(workload.pod_sets, workload.admission.placement).items():
                self.nodes.bind(workload.name, node, requests)

    def _update_running(self, workload: Workload) -> None:
        self.running_by_team[workload.team][workload.name] = workload

    def _stop_running(self, name: str) -> None:
        workload = self.workloads[name]
        if self.running_by_team[workload.team].pop(name, None) is None:
            return
        self.live.remove_all(self.live.teams[workload.team], self.usage.pop(name))
        if self.nodes is not None:
            self.nodes.unbind(name)

    def pending(self, team: str | None = None) -> list[Workload]:
        teams = [team] if team is not None else list(self.queues)
        return [w for t in teams for w in self.queues[t].ordered()]

    def inadmissible(self, name: str) -> bool:
        workload = self.workloads.get(name)
        return workload is not None and name in self.queues[workload.team].inadmissible

    # -- one cycle ----------------------------------------------------------------------------------------------

    def heads(self) -> list[Workload]:
        heads = []
        skip = self.held | self.delayed | self.awaiting.keys() if (self.delayed or self.awaiting) else self.held
        if self.deactivated:
            skip = skip | self.deactivated
        for team, queue in self.queues.items():
            if queue.idle:
                continue
            preemptor = queue.preemptor
            if preemptor in self.awaiting and preemptor not in self.held and preemptor not in self.deactivated:
                continue  # the team's turn is its preemptor's, waiting for its victims (stickyPreemptors)
            head = queue.head(skip)
            if head is None or self.blocked.get(team) == head.name:
                continue
            gate = self.gated.get(team)
            if gate is not None:
                self.messages[head.name] = gate
                continue
            heads.append(head)
        return heads

    def snapshot(self, factors: Mapping[str, Fraction] | None = None) -> Snapshot:
        return Snapshot.of_running(
            self.config, self.live, self.running_by_team, self.usage, factors, nodes=self._cycle_nodes()
        )

    def _cycle_nodes(self) -> NodeInventory | None:
        """The cycle's copy of the nodes: only when some flavor has a topology (otherwise nothing to place)."""
        if self.nodes is None or not any(f.topology for f in self.config.flavors):
            return None
        return self.nodes.copy()

    def schedule(
        self, now: int, factors: Mapping[str, Fraction] | None = None, serial: Mapping[str, str] | None = None
    ) -> CycleResult:
        """Run one cycle over the current heads and apply its decisions at time `now`. `serial` maps teams to
        scopes that admit at most one workload per cycle (gang readiness's blockAdmission)."""
        self._protections_ended(now)
        heads = self.heads()
        if heads:
            # The cycle runs on the live tree: what it charges is taken back, and `apply` charges what stays.
            snapshot = Snapshot.of_running(
                self.config,
                self.live,
                self.running_by_team,
                self.usage,
                factors,
                share_tree=True,
                nodes=self._cycle_nodes(),
            )
            snapshot.now = now
            snapshot.budgets = self.budgets
            snapshot.checkpoints = self.checkpoints
            snapshot.time_text = self.time_text
            try:
                result = run_cycle(snapshot, heads)
            finally:
                snapshot.release()
        else:
            result = CycleResult()
        if serial:
            _one_admission_per_scope(result, serial)
        self.apply(result, now)
        return result

    def apply(self, result: CycleResult, now: int) -> None:
        self.cycles += 1
        for decision in result.decisions:
            workload = decision.workload
            name = workload.name
            if self.workloads.get(name) is not workload or self.state.get(name) is not State.PENDING:
                continue  # changed while the cycle ran; the next cycle sees the new version
            queue = self.queues[workload.team]
            self.messages[name] = decision.message
            if decision.verdict is Verdict.ADMITTED and decision.assignment is not None:
                queue.remove(name)
                admitted = replace(
                    workload,
                    admission=Admission(
                        decision.assignment.flavors(),
                        decision.assignment.counts(),
                        now,
                        decision.assignment.node_counts(),
                    ),
                    evicting=False,
                )
                self.workloads[name] = admitted
                self.state[name] = State.ADMITTED
                self.messages[name] = ""
                self._start_running(admitted)
            elif decision.verdict is Verdict.PREEMPTING:
                if self.config.sticky_preemptors:
                    queue.preempting(name)
                if decision.victims:
                    victims = {t.workload.name for t in decision.victims}
                    self.awaiting[name] = victims
                    for victim in victims:
                        self._awaited_by.setdefault(victim, set()).add(name)
            elif decision.verdict.inadmissible:
                queue.park(name)
                if decision.wait_until is not None:
                    self.protection_waits[name] = decision.wait_until
                if self.park_equivalent:
                    queue.park_equivalent(workload)
                    if queue.strategy is QueueingStrategy.STRICT_FIFO:
                        # Nothing but freed capacity can change its answer; other admissions only take more.
                        self.blocked[workload.team] = name
        for eviction in result.evictions:
            name = eviction.victim.name
            if self.state.get(name) is not State.ADMITTED:
                continue  # already leaving: nothing new to ask
            self.workloads[name] = replace(self.workloads[name], evicting=True)
            self.state[name] = State.EVICTING
            self._update_running(self.workloads[name])
            self.preemptions[name] = Preemption(name, eviction.preemptor.name, eviction.reason)

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def evict(self, name: str) -> Workload:
        """Start evicting an admitted workload by hand (admin preempt); it keeps its quota until it is gone."""
        workload = self.get(name)
        if self.state[name] is not State.ADMITTED:
            raise ValueError(f"{name} is {self.state[name]}, not admitted")
        self.workloads[name] = replace(workload, evicting=True)
        self.state[name] = State.EVICTING
        self._update_running(self.workloads[name])
        return self.workloads[name]

    def complete_eviction(self, name: str, front: bool = False) -> Workload:
        """The victim is gone: requeue it (keeping its creation time; at the front of its priority when `front`)
        and let parked work look again."""
        workload = self.get(name)
        if self.state[name] not in (State.EVICTING, State.ADMITTED):
            raise ValueError(f"{name} is {self.state[name]}, not running")
        self._stop_running(name)
        self._gone(name)
        requeued = replace(workload, admission=None, evicting=False)
        self.workloads[name] = requeued
        self.state[name] = State.PENDING
        self.queues[workload.team].push(requeued, front=front)
        self._capacity_changed(workload.team)
        return requeued

    def finish(self, name: str) -> Workload:
        workload = self.get(name)
        previous = self.state[name]
        self._stop_running(name)
        self._gone(name)
        self._forget_waiting(name)
        self.state[name] = State.FINISHED
        self.queues[workload.team].remove(name)
        if previous in (State.ADMITTED, State.EVICTING):
            self._capacity_changed(workload.team)
        return workload

    def forget(self, name: str) -> None:
        """Drop a finished or deleted workload from memory."""
        workload = self.workloads.get(name)
        if workload is None:
            return
        self._stop_running(name)
        self._gone(name)
        self._forget_waiting(name)
        del self.workloads[name]
        state = self.state.pop(name)
        self.queues[workload.team].remove(name)
        self.held.discard(name)
        self.delayed.discard(name)
        self.deactivated.discard(name)
        self.messages.pop(name, None)
        self.protection_waits.pop(name, None)
        self._base_priority.pop(name, None)
        if state in (State.ADMITTED, State.EVICTING):
            self._capacity_changed(workload.team)

    def hold(self, name: str) -> None:
        workload = self.get(name)
        if self.state[name] is not State.PENDING:
            raise ValueError(f"{name} is {self.state[name]}; only pending workloads can be held")
        self.held.add(workload.name)

    def release(self, name: str) -> None:
        self.get(name)
        self.held.discard(name)
        self.deactivated.discard(name)
        team = self.workloads[name].team
        self.blocked.pop(team, None)
        queue = self.queues[team]
        if name in queue.inadmissible:
            queue.unpark_all()

    # -- budgets ------------------------------------------------------------------------------------------------

    def set_budgets(self, budgets: Mapping[str, Restriction], lowest: int) -> None:
        """What spent budgets allow each team from now on. Teams whose restriction changed look again (parked
        work comes back); under `lowerPriority` every workload of the team, pending or running, counts as
        `lowest` until the budget recovers, when each gets its own priority back."""
        if budgets == self.budgets and lowest == self._lowest:
            self.budgets = dict(budgets)  # the same restrictions; their messages say what is spent now
            return
        changed = {t for t in {*budgets, *self.budgets} if budgets.get(t) != self.budgets.get(t)}
        old_lowered = {t for t, r in self.budgets.items() if r.lowest_priority}
        self.budgets = dict(budgets)
        self._lowest = lowest
        lowered = {t for t, r in self.budgets.items() if r.lowest_priority}
        if old_lowered or lowered:
            for name in list(self.workloads):
                workload = self.workloads[name]
                if self.state.get(name) is State.FINISHED:
                    continue
                if workload.team in lowered and name not in self._base_priority:
                    self._reprioritise(name, self._lowest, keep=workload.priority)
                elif workload.team in lowered and workload.priority != self._lowest:
                    self._reprioritise(name, self._lowest)
                elif workload.team not in lowered and name in self._base_priority:
                    self._reprioritise(name, self._base_priority.pop(name))
        # A team's restriction changes what it may take, and (lowerPriority) what others may take from it: its
        # whole cohort tree looks again, as when capacity changes.
        for team in changed:
            if team in self.queues:
                self._capacity_changed(team)

    def own_priority(self, name: str) -> int:
        """A workload's priority before any `lowerPriority` budget lowered it."""
        return self._base_priority.get(name, self.workloads[name].priority)

    def _reprioritise(self, name: str, priority: int, keep: int | None = None) -> None:
        if keep is not None:
            self._base_priority[name] = keep
        workload = replace(self.workloads[name], priority=priority)
        self.workloads[name] = workload
        if self.state[name] is State.PENDING:
            queue = self.queues[workload.team]
            if name in queue:
                queue.push(workload)
        elif workload.name in self.running_by_team.get(workload.team, {}):
            self._update_running(workload)

    # -- configuration ------------------------------------------------------------------------------------------

    def reload(self, config: QuotaConfig) -> None:
        """Swap the quota configuration; refused (old one kept) if live work would lose its team."""
        teams = {t.name for t in config.teams}
        orphans = sorted({w.team for n, w in self.workloads.items() if self.state[n] is not State.FINISHED} - teams)
        if orphans:
            raise ReloadRejected(f"the new configuration drops team(s) {', '.join(orphans)} which still have workloads")
        queues = {}
        for team in config.teams:
            old = self.queues.get(team.name)
            queue = TeamQueue(team.name, team.queueing_strategy)
            if old is not None:
                for workload in old.ordered():
                    queue.push(workload, front=old.at_front(workload.name))
                if config.sticky_preemptors and old.preemptor is not None:
                    queue.preempting(old.preemptor)
            queues[team.name] = queue
        self.config = config
        self.tree = QuotaTree.from_config(config)
        self.queues = queues
        self._by_tree = {}
        self.blocked.clear()
        self.live = self.tree.copy()
        by_team: dict[str, RunningWorkloads] = {t.name: RunningWorkloads() for t in config.teams}
        for team_name, running in self.running_by_team.items():
            if team_name not in by_team:
                continue  # reload refuses to drop a team with live work, so this one is empty
            by_team[team_name] = running
            for name in running:
                self.live.add_all(self.live.teams[team_name], self.usage[name])
        self.running_by_team = by_team

    def _gone(self, victim: str) -> None:
        """A victim left: preemptors waiting only for it get their turn again."""
        for preemptor in self._awaited_by.pop(victim, ()):
            waiting = self.awaiting.get(preemptor)
            if waiting is not None:
                waiting.discard(victim)
                if not waiting:
                    del self.awaiting[preemptor]

    def _forget_waiting(self, preemptor: str) -> None:
        for victim in self.awaiting.pop(preemptor, ()):
            waiting = self._awaited_by.get(victim)
            if waiting is not None:
                waiting.discard(preemptor)
                if not waiting:
                    del self._awaited_by[victim]

    def next_protection_end(self) -> int | None:
        """When a parked head's answer may change because a minimum runtime ends (None: none waits)."""
        return min(self.protection_waits.values(), default=None)

    def _protections_ended(self, now: int) -> None:
        """Minimum runtimes that kept victims from parked heads are over: those heads (and their cohort) look again."""
        if not self.protection_waits:
            return
        for name, until in list(self.protection_waits.items()):
            if until > now:
                continue
            del self.protection_waits[name]
            workload = self.workloads.get(name)
            if workload is not None and self.state.get(name) is State.PENDING and workload.team in self.queues:
                self._capacity_changed(workload.team)

    def nodes_changed(self) -> None:
        """Nodes were added, became Ready, were uncordoned or freed by pods kuota does not place: every head parked
        for want of room on nodes may fit now. The cluster calls this; quota changes unpark through their cohort."""
        for team in self.queues:
            self.queues[team].unpark_all()
            self.blocked.pop(team, None)

    def _capacity_changed(self, team: str) -> None:
        for member, queue in self._tree_queues(team):
            queue.unpark_all()
            if self.blocked:
                self.blocked.pop(member, None)

    def _tree_queues(self, team: str) -> list[tuple[str, TeamQueue]]:
        """The queues of every team in `team`'s cohort tree. Kept per tree between reloads: every finished or
        evicted workload asks for them, and walking a 200-team tree's generators each time was a fifth of a run."""
        found = self._by_tree.get(team)
        if found is None:
            root = self.tree.teams[team].root()
            found = [(member.name, self.queues[member.name]) for member in root.subtree_teams()]
            for member, _ in found:
                self._by_tree[member] = found
        return found

    def positions(self) -> dict[str, tuple[int, int]]:
        """Per pending workload: (position in its team, position in its queue), 1-based, in admission order."""
        out: dict[str, tuple[int, int]] = {}
        for queue in self.queues.values():
            per_queue: dict[str | None, int] = {}
            for index, workload in enumerate(queue.ordered(), start=1):
                per_queue[workload.queue] = per_queue.get(workload.queue, 0) + 1
                out[workload.name] = (index, per_queue[workload.queue])
        return out


SERIAL_MESSAGE = (
    "waiting (blockAdmission): another workload of its scope was admitted in this cycle and must get its pods "
    "ready first"
)


def _one_admission_per_scope(result: CycleResult, serial: Mapping[str, str]) -> None:
    """Keep the first admission per serial scope, in the cycle's order; later admissions in that scope wait. Every
    later decision other than an admission was judged with the withdrawn admission charged, so it waits too
    (retried next cycle) and its victims are spared; later admissions elsewhere stand: less usage only helps them."""
    admitted: set[str] = set()
    withdrawn = False
    kept: list[Decision] = []
    for decision in result.decisions:
        scope = serial.get(decision.workload.team)
        if decision.verdict is Verdict.ADMITTED:
            if scope is None or scope not in admitted:
                if scope is not None:
                    admitted.add(scope)
                kept.append(decision)
                continue
            withdrawn = True
        elif not withdrawn:
            kept.append(decision)
            continue
        kept.append(Decision(decision.workload, Verdict.SKIPPED, message=SERIAL_MESSAGE))
    if withdrawn:
        waiting = {d.workload.name for d in kept if d.verdict is Verdict.SKIPPED and d.message == SERIAL_MESSAGE}
        result.evictions = [e for e in result.evictions if e.preemptor.name not in waiting]
    result.decisions = kept
