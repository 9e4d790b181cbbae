"""One cycle's view of the world: the quota tree with its usage and the admitted workloads per team.

A snapshot is mutated while a cycle runs (admissions charge it, preemption searches remove and restore
victims); the caller's state is never touched because the snapshot owns copies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from fractions import Fraction

from admission.nodes import NodeInventory
from admission.placement import Placer, placement_usage
from admission.running import RunningWorkloads
from admission.shared_reads import SharedReads
from admission.workload import Workload
from quota.budgets import Restriction
from quota.config import MinRuntime, QuotaConfig
from quota.tree import FlavorResource, Node, QuotaTree


class Snapshot:
    def __init__(
        self,
        config: QuotaConfig,
        tree: QuotaTree,
        admitted: Iterable[Workload],
        factors: Mapping[str, Fraction] | None = None,
        *,
        running: Mapping[str, RunningWorkloads] | None = None,
        usage: dict[str, dict[FlavorResource, int]] | None = None,
        log_charges: bool = False,
        nodes: NodeInventory | None = None,
    ) -> None:
        """`running` and `usage` (by workload name) are shared with the caller, not copied (see `of_running`).

        `nodes`: the cycle's own copy of the node inventory, with every running workload's placement bound under
        its name; None when no flavor has a topology (then nothing is placed on nodes and nothing costs more)."""
        self.config = config
        self.tree = tree
        self.fair_sharing = config.fair_sharing.enabled
        # (`is not None`, not `or`: a mapping computed when first read must not be read to be tested.)
        self.factors: Mapping[str, Fraction] = factors if factors is not None else {}
        self.workloads: dict[str, RunningWorkloads] = (
            dict(running) if running is not None else {name: RunningWorkloads() for name in tree.teams}
        )
        self._usage: dict[str, dict[FlavorResource, int]] = usage if usage is not None else {}
        self._charges: list[tuple[Node, Mapping[FlavorResource, int]]] | None = [] if log_charges else None
        self.charged: list[Node] = []
        """Every team charged in this cycle, in order (the fair order refreshes the paths of those it charged)."""
        self.now: int | None = None
        """The cycle's time; None: no workload is protected by a minimum runtime."""
        self.checkpoints: Callable[[Workload], int | None] | None = None
        """When a running workload last checkpointed (None: never); unset: victims in the spec's order only."""
        self.time_text: Callable[[int], str] = iso_time
        self.protection_lifted = False
        """While set, minimum runtimes protect nobody (to tell whom a preemptor waits for)."""
        self.skipped_until: int | None = None
        """The earliest end of a minimum runtime that kept a candidate out of a search since it was last reset."""
        self.budgets: Mapping[str, Restriction] = {}
        """Team → what its spent budgets (and its cohorts') allow its new admissions (quota/budgets.py)."""
        self._min_runtimes: dict[tuple[str, str | None], MinRuntime | None] = {}
        self._protects = self._any_min_runtime(config)
        self.nodes = nodes
        self.placer: Placer | None = Placer(config, nodes) if nodes is not None else None
        self.taken_out: dict[str, Workload] = {}
        """Running workloads a search (or `without`) has removed and not yet put back, by name."""
        self.shared: SharedReads | None = None
        """While the cycle nominates its heads: what their searches read alike (admission/shared_reads.py)."""
        for workload in admitted:
            self.add_workload(workload)

    @classmethod
    def build(
        cls,
        config: QuotaConfig,
        admitted: Iterable[Workload],
        factors: Mapping[str, Fraction] | None = None,
        tree: QuotaTree | None = None,
        nodes: NodeInventory | None = None,
    ) -> Snapshot:
        """A fresh snapshot; pass a prebuilt `tree` (with no usage) to skip recomputing the static quotas. `nodes` is
        used as it is (pass a copy): the admitted workloads' placements are bound into it."""
        base = tree if tree is not None else QuotaTree.from_config(config)
        return cls(config, base.copy(), admitted, factors, nodes=nodes)

    @classmethod
    def of_running(
        cls,
        config: QuotaConfig,
        tree: QuotaTree,
        by_team: Mapping[str, RunningWorkloads],
        usage: dict[str, dict[FlavorResource, int]],
        factors: Mapping[str, Fraction] | None = None,
        *,
        share_tree: bool = False,
        nodes: NodeInventory | None = None,
    ) -> Snapshot:
        """A snapshot from state kept up to date incrementally: `tree` already carries the usage of `by_team`.

        The workload maps are shared, not copied: a cycle only ever removes a workload to restore it before it
        returns (preemption searches, `without`), so they are the same when the cycle ends. The tree, which the
        cycle does change for good (`charge`), is copied, or with `share_tree` used as it is with every charge
        logged, for `release()` to take back once the cycle is over (copying it was a tenth of a busy cycle).
        """
        return cls(
            config,
            tree if share_tree else tree.copy(),
            (),
            factors,
            running=by_team,
            usage=usage,
            log_charges=share_tree,
            nodes=nodes,
        )

    def charge(self, team: Node, usage: Mapping[FlavorResource, int]) -> None:
        """Charge `usage` to `team` for the rest of the cycle (an admission, a reservation)."""
        self.tree.add_all(team, usage)
        self.charged.append(team)
        if self._charges is not None:
            self._charges.append((team, usage))

    def release(self) -> None:
        """Take back every charge made to a shared tree, which is then as it was before the cycle."""
        if self._charges is None:
            return
        # Usage above a lending limit moves up the tree as a function of the team's total, so order is free.
        while self._charges:
            team, usage = self._charges.pop()
            self.tree.remove_all(team, usage)

    def team(self, name: str) -> Node:
        return self.tree.teams[name]

    def usage_of(self, workload: Workload) -> dict[FlavorResource, int]:
        cached = self._usage.get(workload.name)
        return cached if cached is not None else workload.usage()

    def add_workload(self, workload: Workload) -> None:
        usage = workload.usage()
        self._usage[workload.name] = usage
        self.workloads[workload.team][workload.name] = workload
        if self.taken_out:
            self.taken_out.pop(workload.name, None)
        self.tree.add_all(self.tree.teams[workload.team], usage)
        if self.nodes is not None:
            self.bind(workload)

    def bind(self, workload: Workload) -> None:
        """Charge a running workload's placement to the cycle's nodes, under its name."""
        assert self.nodes is not None
        admission = workload.admission
        if admission is None or not admission.placement:
            return
        for node, requests in placement_usage(workload.pod_sets, admission.placement).items():
            self.nodes.bind(workload.name, node, requests)

    def remove_workload(self, workload: Workload) -> None:
        usage = self._usage.get(workload.name)
        if usage is None:
            usage = workload.usage()
        del self.workloads[workload.team][workload.name]
        self.taken_out[workload.name] = workload
        self.tree.remove_all(self.tree.teams[workload.team], usage)
        if self.nodes is not None:
            self.nodes.unbind(workload.name)

    def contains(self, workload: Workload) -> bool:
        return workload.name in self.workloads.get(workload.team, {})

    @contextmanager
    def without(self, workloads: Iterable[Workload]) -> Iterator[None]:
        """Pretend `workloads` are gone for the duration of the block (one named twice is removed once)."""
        removed = list({w.name: w for w in workloads if self.contains(w)}.values())
        for workload in removed:
            self.remove_workload(workload)
        try:
            yield
        finally:
            for workload in reversed(removed):
                self.add_workload(workload)

    @contextmanager
    def running_without(self, workloads: Iterable[Workload]) -> Iterator[None]:
        """`without` for workloads whose usage is already off the tree: out of the running work only (the cycle's
        processing keeps its victims' usage off the tree, see admission/cycle.py `_Preempted`)."""
        removed = list({w.name: w for w in workloads if self.contains(w)}.values())
        for workload in removed:
            del self.workloads[workload.team][workload.name]
            self.taken_out[workload.name] = workload
        try:
            yield
        finally:
            for workload in reversed(removed):
                self.workloads[workload.team][workload.name] = workload
                del self.taken_out[workload.name]

    @contextmanager
    def usage_without(self, workloads: Iterable[Workload]) -> Iterator[None]:
        """Take the usage of `workloads` off the quota tree for the duration of the block, leaving the running
        workloads and the nodes as they are: for questions the tree alone answers (does a head fit once they are
        gone?). Summed per team first: the tree's usage moves the same for a sum as for its parts, and a cycle
        asks this for every head with every victim of its tree."""
        by_team: dict[str, dict[FlavorResource, int]] = {}
        seen: set[str] = set()
        for workload in workloads:
            if workload.name in seen or not self.contains(workload):
                continue
            seen.add(workload.name)
            total = by_team.setdefault(workload.team, {})
            for fr, value in self.usage_of(workload).items():
                total[fr] = total.get(fr, 0) + value
        teams = self.tree.teams
        for team, usage in by_team.items():
            self.tree.remove_all(teams[team], usage)
        try:
            yield
        finally:
            for team, usage in by_team.items():
                self.tree.add_all(teams[team], usage)

    @contextmanager
    def with_usage(self, team: Node, usage: Mapping[FlavorResource, int]) -> Iterator[None]:
        """Pretend `usage` is charged to `team` for the duration of the block."""
        self.tree.add_all(team, usage)
        try:
            yield
        finally:
            self.tree.remove_all(team, usage)

    def factor(self, team: str) -> Fraction | None:
        return self.factors.get(team)

    # -- minimum runtime and checkpoints ----------------------------------------------------------------------

    @staticmethod
    def _any_min_runtime(config: QuotaConfig) -> bool:
        found = [c.min_runtime for c in config.priority_classes] + [t.min_runtime for t in config.teams]
        return any(m is not None and m.duration > 0 for m in found)

    def protection(self, workload: Workload) -> MinRuntime | None:
        """The minimum runtime `workload` has not reached yet at `now` (None: it may be preempted).

        A workload already being evicted is leaving whatever happens: it is never protected."""
        if not self._protects or self.now is None or self.protection_lifted or workload.evicting:
            return None
        admission = workload.admission
        if admission is None:
            return None
        key = (workload.team, workload.priority_class)
        if key not in self._min_runtimes:
            self._min_runtimes[key] = self.config.min_runtime(workload.team, workload.priority_class)
        found = self._min_runtimes[key]
        if found is None or admission.admitted_at + found.duration <= self.now:
            return None
        return found

    def may_protect(self) -> bool:
        """Whether `protection` can name any workload now: while it cannot, a search may leave candidates unread."""
        return self._protects and self.now is not None and not self.protection_lifted

    def protected_until(self, workload: Workload) -> int:
        """When `workload`'s minimum runtime ends (only for a workload `protection` returned one for)."""
        found = self.protection(workload)
        assert found is not None and workload.admission is not None
        return workload.admission.admitted_at + found.duration

    def skip_protected(self, workload: Workload) -> None:
        """A search left `workload` out for its minimum runtime: remember when that ends."""
        until = self.protected_until(workload)
        if self.skipped_until is None or until < self.skipped_until:
            self.skipped_until = until

    def saved_at(self, workload: Workload) -> int:
        """Where the work `workload` would lose if stopped now begins: its last checkpoint, else its admission."""
        admitted_at = workload.admission.admitted_at if workload.admission is not None else 0
        checkpoint = self.checkpoints(workload) if self.checkpoints is not None else None
        return admitted_at if checkpoint is None or checkpoint < admitted_at else checkpoint


def iso_time(ms: int) -> str:
    """Milliseconds since the Unix epoch as ISO 8601 UTC, to the second."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
