"""One scheduling cycle: nominate every head against one snapshot, order them, then admit, preempt or hold.

This is semantics.md's "One scheduling cycle" step by step. The function is pure: it gets a snapshot and the
heads, and returns decisions; carrying them out (patching Jobs, asking victims to checkpoint) is the queue
manager's job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

from admission import partial, topology_admission
from admission.flavors import Assignment, FlavorAssigner, Mode, Outcome, PreemptionOracle
from admission.ordering import Entry, order_heads
from admission.placement import PodSetPlacement
from admission.preemption import PreemptionRequest, Target, find_targets, search_covers
from admission.shared_reads import SharedReads
from admission.snapshot import Snapshot
from admission.workload import Workload
from quota.config import ReclaimPolicy
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource, Node


class Verdict(StrEnum):
    ADMITTED = "admitted"
    PREEMPTING = "preempting"
    """Victims were chosen (or are already leaving); the head waits for them, holding its share of the cycle."""
    SKIPPED = "skipped"
    """Fit at first but not after earlier decisions of this cycle: retried next cycle."""
    NO_FIT = "no-fit"
    NO_CANDIDATES = "no-candidates"
    """Would fit after preemption, but nobody may be preempted."""
    ERROR = "error"
    """Deciding for this workload failed (a bug, or a value nothing bounded yet): it waits, parked like one that
    does not fit, and the rest of the cycle goes on without it."""

    @property
    def inadmissible(self) -> bool:
        return self in (Verdict.NO_FIT, Verdict.NO_CANDIDATES, Verdict.ERROR)


@dataclass(frozen=True, slots=True)
class Eviction:
    victim: Workload
    reason: PreemptionReason
    preemptor: Workload


@dataclass(slots=True)
class Decision:
    workload: Workload
    verdict: Verdict
    assignment: Assignment | None = None
    victims: list[Target] = field(default_factory=list)
    message: str = ""
    wait_until: int | None = None
    """NO_CANDIDATES only: the earliest time a running workload this head could not preempt reaches its minimum
    runtime (then the answer may change); None when no minimum runtime stood in the way."""

    @property
    def flavors(self) -> dict[str, dict[str, str]]:
        return self.assignment.flavors() if self.assignment is not None else {}

    @property
    def counts(self) -> dict[str, int]:
        return self.assignment.counts() if self.assignment is not None else {}

    @property
    def placements(self) -> dict[str, PodSetPlacement]:
        """Per pod set on a flavor with a topology: the domain (`node_selector()`) and the pods per node."""
        return self.assignment.placements() if self.assignment is not None else {}


@dataclass(slots=True)
class CycleResult:
    decisions: list[Decision] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)

    def decision(self, name: str) -> Decision | None:
        return next((d for d in self.decisions if d.workload.name == name), None)


def run_cycle(snapshot: Snapshot, heads: Sequence[Workload]) -> CycleResult:
    """Decide one cycle for `heads` (at most one per team) against `snapshot`, which it consumes.

    A head whose nomination or processing raises gets an ERROR decision and the others are decided as if it were
    not there: one workload kuota cannot evaluate must not stop every other team's admissions. Processing charges
    the snapshot only once it has decided, so a failure leaves at most a charge the cycle's end takes back."""
    result = CycleResult()
    entries: list[Entry] = []
    protected: dict[str, int] = {}
    # Nominations leave the snapshot as they find it, so their searches may share what they read alike; the
    # processing below charges the tree, after which nothing read before holds.
    snapshot.shared = SharedReads() if len(heads) > 1 else None
    try:
        _nominate_all(snapshot, heads, result, entries, protected)
    finally:
        snapshot.shared = None
    preempted = _Preempted(snapshot, off_tree=_victims_off_tree(snapshot))
    try:
        for entry in order_heads(snapshot, entries):
            try:
                until = protected.get(entry.workload.name)
                # Whom it waits for is judged before its hold is charged (the hold is part of its own request), on
                # the tree as it is, with this cycle's victims still on it.
                waited = []
                if until is not None:
                    with preempted.on_tree():
                        waited = _protected_victims(snapshot, entry)
                decision = _process(snapshot, entry, preempted)
                if decision.verdict is Verdict.NO_CANDIDATES and until is not None:
                    _wait_for_protection(snapshot, decision, waited, until)
            except Exception as exc:  # one workload kuota cannot evaluate: see the docstring
                decision = _failed(entry.workload, "processing", exc)
            result.decisions.append(decision)
            if decision.verdict is Verdict.PREEMPTING:
                for target in decision.victims:
                    result.evictions.append(Eviction(target.workload, target.reason, entry.workload))
    finally:
        preempted.put_back()
    return result


def _victims_off_tree(snapshot: Snapshot) -> bool:
    """Whether the processing keeps the cycle's victims' usage off the tree. Not when heads are placed on nodes,
    whose checks take victims out of the nodes too (and out of every tree, see `_Preempted.affecting`); not under
    fair sharing, whose order is read as heads are processed (`ordering._FairOrder` refreshes shares after each
    pick, on the tree with the victims on it)."""
    return snapshot.placer is None and not snapshot.fair_sharing


def _nominate_all(
    snapshot: Snapshot,
    heads: Sequence[Workload],
    result: CycleResult,
    entries: list[Entry],
    protected: dict[str, int],
) -> None:
    """Nominate every head: an entry to order and process, or a decision already (a spent budget, an error).
    `protected`: heads whose search met a minimum runtime → when the first of those ends."""
    for head in heads:
        snapshot.skipped_until = None
        budget = snapshot.budgets.get(head.team)
        if budget is not None and not budget.admit:
            result.decisions.append(Decision(head, Verdict.NO_FIT, message=budget.reason))
            continue
        try:
            entry = _nominate(snapshot, head)
            assigned = entry.assignment
            if budget is not None and assigned.mode is not Mode.NO_FIT and not budget.allows(assigned.borrowing):
                result.decisions.append(Decision(head, Verdict.NO_FIT, entry.assignment, message=budget.reason))
                continue
            entries.append(entry)
        except Exception as exc:  # one workload kuota cannot evaluate: see the docstring
            result.decisions.append(_failed(head, "nominating", exc))
        if snapshot.skipped_until is not None:
            protected[head.name] = snapshot.skipped_until


def _failed(workload: Workload, stage: str, exc: Exception) -> Decision:
    detail = f"{type(exc).__name__}: {exc}"[:300]
    return Decision(workload, Verdict.ERROR, message=f"kuota could not decide for this workload ({stage}: {detail})")


# -- nomination -------------------------------------------------------------------------------------------------


def _nominate(snapshot: Snapshot, workload: Workload) -> Entry:
    team = snapshot.team(workload.team)
    searches: dict[tuple[FlavorResource, int], list[Target]] = {}
    assigner = FlavorAssigner(snapshot.config, snapshot.tree, workload, _oracle(snapshot, workload, searches))
    full = assigner.assign()
    if topology_admission.involves_nodes(snapshot, full):
        return topology_admission.nominate(snapshot, workload, team, assigner, full)
    if full.mode is Mode.FIT:
        return Entry(workload, team, full)
    if full.mode is Mode.PREEMPT:
        # The oracle's search for the one contested resource may be the full search's answer; nothing changed since.
        cached = None
        if len(full.contested) == 1:
            (fr,) = full.contested
            if search_covers(snapshot.tree, team, full.usage, fr):
                cached = searches.get((fr, full.usage[fr]))
        targets = cached if cached is not None else find_targets(snapshot, _request(workload, team, full))
        if targets:
            return Entry(workload, team, full, targets)
    if partial.can_shrink(workload.pod_sets):

        def attempt(counts: dict[str, int]) -> Entry | None:
            reduced = assigner.assign(counts)
            if reduced.mode is Mode.FIT:
                return Entry(workload, team, reduced)
            if reduced.mode is Mode.PREEMPT:
                found = find_targets(snapshot, _request(workload, team, reduced))
                if found:
                    return Entry(workload, team, reduced, found)
            return None

        shrunk = partial.search(workload.pod_sets, attempt)
        if shrunk is not None:
            return shrunk
    return Entry(workload, team, full)


def _request(workload: Workload, team: Node, assignment: Assignment) -> PreemptionRequest:
    return PreemptionRequest(workload, team, assignment.usage, assignment.contested)


def _oracle(
    snapshot: Snapshot, workload: Workload, searches: dict[tuple[FlavorResource, int], list[Target]]
) -> PreemptionOracle:
    """How preempting for one flavor/resource would go: no victims, victims in the own team, or only others'."""

    def simulate(team: Node, fr: FlavorResource, value: int) -> Outcome:
        tree = snapshot.tree
        targets = find_targets(snapshot, PreemptionRequest(workload, team, {fr: value}, frozenset({fr})))
        searches[(fr, value)] = targets
        if not targets:
            return Outcome(Mode.NO_CANDIDATES, tree.lowest_subtree_that_fits(team, fr, value)[0])
        with snapshot.without(t.workload for t in targets):
            borrow = tree.lowest_subtree_that_fits(team, fr, value)[0]
        own = any(t.workload.team == team.name for t in targets)
        return Outcome(Mode.PREEMPT if own else Mode.RECLAIM, borrow)

    return simulate


# -- processing -------------------------------------------------------------------------------------------------


def _process(snapshot: Snapshot, entry: Entry, preempted: _Preempted) -> Decision:
    workload, team, assignment = entry.workload, entry.team, entry.assignment
    mode = assignment.mode
    if mode is Mode.NO_FIT:
        return Decision(workload, Verdict.NO_FIT, assignment, message=assignment.message() or "does not fit")

    if mode is Mode.PREEMPT and not entry.targets:
        if team.team.preemption.reclaim_within_cohort is not ReclaimPolicy.ANY:
            snapshot.charge(team, _reserved(team, assignment, preempted.held_off(team)))
        return Decision(
            workload,
            Verdict.NO_CANDIDATES,
            assignment,
            message=_join(assignment.message(), "no running workload may be preempted for it"),
        )

    placed = topology_admission.involves_nodes(snapshot, assignment)
    # (Only a head placed on nodes has victims without needing preemption for quota: they free its domain.)
    if (mode is Mode.PREEMPT or entry.targets) and any(t.workload.name in preempted for t in entry.targets):
        return _rejudge(snapshot, entry, preempted, placed)

    # Kept off the tree, the other victims' usage is gone already.
    own = [t.workload for t in entry.targets]
    gone = own if preempted.off_tree else [*preempted.affecting(team, placed), *own]
    if not _fits_without(snapshot, team, assignment.usage, gone) or (
        placed and not _placed_without(snapshot, workload, assignment, gone)
    ):
        return Decision(
            workload, Verdict.SKIPPED, assignment, message="no longer fits after other admissions in this cycle"
        )
    for target in entry.targets:
        preempted.add(target.workload)
    snapshot.charge(team, assignment.usage)
    if placed:
        topology_admission.bind_placement(snapshot, workload, assignment)
    if mode is Mode.PREEMPT or entry.targets:
        return Decision(
            workload, Verdict.PREEMPTING, assignment, list(entry.targets), message=_waiting(len(entry.targets))
        )
    return Decision(workload, Verdict.ADMITTED, assignment)


class _Preempted:
    """The victims chosen so far in the cycle, by name and by quota tree.

    Every later head is judged as if they were gone. A head that is not placed on nodes only needs the victims of
    its own tree taken out: usage lives on the path from a team to its root, so a victim elsewhere changes neither
    whether the head fits nor what a search for it finds. Taking out every victim of the cycle for every head
    made a busy cycle cost heads × victims (5.8 s at 5,000 teams in cohorts of 10, nothing finishing). A head
    placed on nodes still has every victim taken out: another tree's victim may free its nodes.

    With `off_tree` the victims' usage is taken off the tree once, when each is chosen, instead of for every later
    head (a saturated cycle spent most of its processing taking the same victims off and putting them back): the
    tree's usage is a function of each team's total, so charges and removals commute. The few steps that read the
    tree with the victims on it ask for it (`on_tree`, `held_off`), and `put_back` restores it before the cycle's
    charges are taken back."""

    def __init__(self, snapshot: Snapshot, off_tree: bool = False) -> None:
        self.snapshot = snapshot
        self.off_tree = off_tree
        self.names: dict[str, Workload] = {}
        self._by_root: dict[Node, dict[str, Workload]] = {}
        self._off: dict[Node, dict[FlavorResource, int]] = {}
        """Team → the usage of its victims taken off the tree (`off_tree` only)."""

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def add(self, workload: Workload) -> None:
        if workload.name in self.names:
            return
        self.names[workload.name] = workload
        team = self.snapshot.team(workload.team)
        self._by_root.setdefault(team.root(), {})[workload.name] = workload
        if self.off_tree:
            usage = self.snapshot.usage_of(workload)
            self.snapshot.tree.remove_all(team, usage)
            held = self._off.setdefault(team, {})
            for fr, value in usage.items():
                held[fr] = held.get(fr, 0) + value

    def held_off(self, team: Node) -> Mapping[FlavorResource, int]:
        """The usage of `team`'s victims that is off the tree now (nothing unless `off_tree`)."""
        return self._off.get(team, {})

    def put_back(self) -> None:
        for team, usage in self._off.items():
            self.snapshot.tree.add_all(team, usage)
        self._off.clear()
        self.off_tree = False

    @contextmanager
    def on_tree(self) -> Iterator[None]:
        """The victims' usage back on the tree for the duration of the block."""
        if not self._off:
            yield
            return
        tree = self.snapshot.tree
        for team, usage in self._off.items():
            tree.add_all(team, usage)
        try:
            yield
        finally:
            for team, usage in self._off.items():
                tree.remove_all(team, usage)

    def affecting(self, team: Node, placed: bool) -> Iterable[Workload]:
        """The victims whose leaving can change a decision for a head of `team`."""
        if placed:
            return self.names.values()
        return self._by_root.get(team.root(), {}).values()


def _rejudge(snapshot: Snapshot, entry: Entry, preempted: _Preempted, placed: bool) -> Decision:
    """Victims overlap earlier choices: look again with every victim chosen so far already gone. `placed`: the head
    also needs a placement on nodes (then found again, and any new victims are chosen to free a domain)."""
    workload, team, assignment = entry.workload, entry.team, entry.assignment
    tree = snapshot.tree

    def fits() -> bool:
        if not tree.fits(team, assignment.usage):
            return False
        return not placed or topology_admission.place_all(snapshot, workload, assignment) is None

    gone = preempted.affecting(team, placed)
    fits_now = False
    targets: list[Target] = []
    if preempted.off_tree:  # (never placed: see `_victims_off_tree`)
        fits_now = tree.fits(team, assignment.usage)
    elif not placed:
        # The tree alone tells whether the head fits once the others' victims are gone (most often it does).
        with snapshot.usage_without(gone):
            fits_now = tree.fits(team, assignment.usage)
    if not fits_now:
        with snapshot.running_without(gone) if preempted.off_tree else snapshot.without(gone):
            fits_now = placed and fits()
            if not fits_now:
                if placed:
                    targets = topology_admission.victims(snapshot, workload, team, assignment)
                else:
                    targets = find_targets(snapshot, _request(workload, team, assignment))
                if targets:
                    with snapshot.without(t.workload for t in targets):
                        fits_now = fits()
    if not fits_now:
        return Decision(
            workload,
            Verdict.SKIPPED,
            assignment,
            message="its possible victims are already being preempted for other workloads",
        )
    for target in targets:
        preempted.add(target.workload)
    snapshot.charge(team, assignment.usage)
    if placed:
        topology_admission.bind_placement(snapshot, workload, assignment)
    message = _waiting(len(targets)) if targets else "waiting for preemptions issued for other workloads"
    return Decision(workload, Verdict.PREEMPTING, assignment, targets, message=message)


def _fits_without(
    snapshot: Snapshot, team: Node, usage: Mapping[FlavorResource, int], gone: Iterable[Workload]
) -> bool:
    with snapshot.usage_without(gone):
        return snapshot.tree.fits(team, usage)


def _placed_without(snapshot: Snapshot, workload: Workload, assignment: Assignment, gone: Iterable[Workload]) -> bool:
    """Whether the head's pods still fit on nodes once `gone` have left: earlier heads of the cycle may have taken
    nodes it was placed on at nomination. The placement it was nominated with stands while its nodes still hold it;
    otherwise it is found again against the nodes as they are now."""
    with snapshot.without(gone):
        if topology_admission.still_fits(snapshot, workload, assignment):
            return True
        return topology_admission.place_all(snapshot, workload, assignment) is None


def _reserved(team: Node, assignment: Assignment, off_tree: Mapping[FlavorResource, int]) -> dict[FlavorResource, int]:
    """What a head with no possible victims holds for the rest of the cycle, so nobody borrows it away, judged on
    the team's usage with the cycle's victims in it (`off_tree`: theirs, if taken off the tree)."""
    held: dict[FlavorResource, int] = {}
    for fr, value in assignment.usage.items():
        limits = team.quotas.get(fr)
        nominal = limits.nominal if limits is not None else 0
        used = team.usage.get(fr, 0) + off_tree.get(fr, 0)
        if assignment.borrowing > 0:
            if limits is None or limits.borrowing_limit is None:
                held[fr] = value
            else:
                held[fr] = max(0, min(value, nominal + limits.borrowing_limit - used))
        else:
            held[fr] = max(0, min(value, nominal - used))
    return held


def _protected_victims(snapshot: Snapshot, entry: Entry) -> list[Workload]:
    """For a head with no victims: the protected workloads it would preempt were minimum runtimes lifted."""
    if entry.assignment.mode is not Mode.PREEMPT or entry.targets:
        return []
    snapshot.protection_lifted = True
    try:
        lifted = find_targets(snapshot, _request(entry.workload, entry.team, entry.assignment))
    finally:
        snapshot.protection_lifted = False
    return [t.workload for t in lifted if snapshot.protection(t.workload) is not None]


def _wait_for_protection(snapshot: Snapshot, decision: Decision, waited: list[Workload], until: int) -> None:
    """A head with no victims because of minimum runtimes: name the protected workloads it waits for, and when the
    first protection it met ends (when the controller looks again)."""
    decision.wait_until = until
    if waited:
        names = ", ".join(w.name for w in waited)
        end = max(snapshot.protected_until(w) for w in waited)
        its = "its" if len(waited) == 1 else "their"
        text = f"waits for {names} to reach {its} minimum runtime at {snapshot.time_text(end)}"
    else:
        text = f"waits for running workloads to reach their minimum runtime (the first at {snapshot.time_text(until)})"
    decision.message = _join(decision.assignment.message() if decision.assignment is not None else "", text)


def _waiting(count: int) -> str:
    return f"waiting for {count} preemption{'s' if count != 1 else ''}"


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)
