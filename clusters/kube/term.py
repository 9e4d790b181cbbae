"""One term as leader: rebuild the controller from the cluster and the ledger, decide, and stop cleanly.

A new leader trusts nothing it remembers from an earlier term. It lists the objects that enabled kinds refer to
(a TrainJob's training runtimes) first, so that what refers to them reads at once, then the objects of every
enabled kind and the pods of the kinds held back pod by pod (running ones are submitted with their admission, so
nothing is admitted twice; waiting ones are queued by creation time),
closes in the ledger the usage of work that ended while nobody led, continues every workload's attempt count,
reloads fair-share credits from the usage intervals, lists the nodes and the pods bound to them when it watches
nodes (running workloads' placements are bound meanwhile, from their `kuota.dev/topology-assignment`), and only
then starts the loop and the watches.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from accounting import repository
from accounting.ledger import Ledger
from accounting.recovery import close_orphaned_intervals, last_activity
from accounting.spending import usage_since
from clusters.kube.api import KubeApi, status_of
from clusters.kube.cluster import (
    BOUND_POD_REFLECTOR,
    NODE_REFLECTOR,
    PODS,
    KubeCluster,
    epoch_ms,
    is_admitted_running,
    object_key,
)
from clusters.kube.events import EventJournal, EventRecorder
from queues.controller import BACKOFF_BASE_MS, Controller, Tracking
from queues.heap import freeze_what_is_alive
from queues.journal import Journal, Journals, LogJournal
from queues.ledger_journal import LedgerJournal
from queues.loop import ControllerLoop, LoopTimers, wall_clock_ms
from quota.budgets import history_start
from quota.config import QuotaConfig
from workloads.gates import GATED_POD, GatedKind
from workloads.kind import JobKind
from workloads.registry import Registry, enabled_kinds

log = structlog.get_logger("kuota.controller")

CREDIT_HISTORY_HALF_LIVES = 10
"""Usage older than this many half-lives weighs under 0.1 %: not worth reading."""


class LeaderTerm:
    def __init__(
        self,
        api: KubeApi,
        config: QuotaConfig,
        ledger: Ledger | None,
        *,
        events: bool = True,
        instance: str | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        coalesce_s: float | None = None,
        extra_journals: Sequence[Journal] = (),
        backoff_base_ms: int = BACKOFF_BASE_MS,
        kinds: Registry | None = None,
    ) -> None:
        self.kinds = kinds if kinds is not None else enabled_kinds(config.job_kinds)
        """The kinds this term lists and watches."""
        self.backoff_base_ms = backoff_base_ms
        """First requeue backoff after an eviction (it doubles with each one)."""
        self.extra_journals = list(extra_journals)
        """More listeners for every step (metrics), given by the composition root."""
        self.api = api
        self.config = config
        self.ledger = ledger
        self.events = events
        self.instance = instance or socket.gethostname()
        self.clock = clock
        self.coalesce_s = coalesce_s
        self.controller: Controller | None = None
        self.loop: ControllerLoop | None = None
        self.cluster: KubeCluster | None = None
        self.recorder: EventRecorder | None = None

    async def start(self) -> None:
        cluster = KubeCluster(
            self.api,
            lambda: self.controller.config if self.controller else self.config,
            kinds=self.kinds,
            clock=self.clock,
        )
        self.cluster = cluster
        for name, referenced in cluster.referenced_kinds.items():
            found, version = await self.api.list_objects(referenced)
            cluster.on_referenced_list(referenced, found)
            cluster.reflectors[name].version = version
        listed: list[tuple[JobKind, list[dict[str, Any]], str]] = []
        for kind in cluster.kinds:
            if kind.kind not in cluster.reflectors:
                continue  # held back pod by pod with no object of its own (plain pods): in the pod list below
            items, version = await self.api.list_objects(kind)
            listed.append((kind, items, version))
        pods: tuple[list[dict[str, Any]], str] | None = None
        if PODS in cluster.reflectors:
            pods = await self.api.list_objects(GATED_POD, label_selector=cluster.reflectors[PODS].label_selector)
            # Filed before the controller exists (nothing is submitted yet), to know which run under an admission.
            cluster.gated.pods_listed(pods[0])
            for kind, items, _ in listed:
                if isinstance(kind, GatedKind):
                    cluster.gated.owners_listed(kind, items)
        running: dict[str, object] = {
            object_key(kind, obj): obj for kind, items, _ in listed for obj in items if is_admitted_running(kind, obj)
        }
        running.update(dict.fromkeys(cluster.gated.running()))
        attempts: dict[str, int] = {}
        journals: list[Journal] = [LogJournal()]
        if self.ledger is not None:
            attempts = await self._recover_ledger(listed, running, cluster)
            journals.append(LedgerJournal(self.ledger))
        if self.events:
            recorder = self.recorder = EventRecorder(
                self.api, lambda key: _uid(cluster, key), instance=self.instance, involved_of=cluster.involved
            )
            journals.append(EventJournal(recorder))
            cluster.not_queued = lambda key, reason: recorder.emit(key, "NotQueued", reason, self.clock(), warning=True)
        journals.extend(self.extra_journals)
        timers = LoopTimers()
        controller = Controller(self.config, cluster, timers, Journals(*journals), backoff_base_ms=self.backoff_base_ms)
        if self.ledger is not None:
            await self._load_credits(controller, set(running))
            await load_budget_spending(controller, self.ledger.engine, self.clock())
        for name, attempt in attempts.items():
            controller.tracking[name] = Tracking(attempt=attempt)
        ledger = self.ledger
        loop = ControllerLoop(
            controller,
            timers,
            clock=self.clock,
            coalesce_s=self.coalesce_s,
            backpressure=(lambda: ledger.full) if ledger is not None else None,
        )
        self.controller, self.loop = controller, loop
        cluster.attach(controller, loop)
        for kind, items, version in listed:
            cluster.reflectors[kind.kind].version = version
            cluster.on_list(kind, items)
        if pods is not None:
            cluster.reflectors[PODS].version = pods[1]
            cluster.gated.pods_listed(pods[0])
        for name in (NODE_REFLECTOR, BOUND_POD_REFLECTOR):
            # Nodes and bound pods before the first cycle: placing on an empty inventory would find no room.
            # A refused list (RBAC) is retried by the watch itself; until then topology heads wait for room.
            if name in cluster.reflectors:
                try:
                    await cluster.reflectors[name].list_once()
                except Exception as exc:
                    log.warning("node_list_failed", reflector=name, status=status_of(exc), error=str(exc)[:300])
        if self.ledger is not None:
            record_unknown_admissions(controller, running, set(cluster.admitted_at), attempts)
        for reflector in cluster.reflectors.values():
            reflector.synced.set()
        # Trackers made for workloads that are not here any more would only leak.
        for name in [n for n in controller.tracking if n not in controller.manager.workloads]:
            del controller.tracking[name]
        log.info(
            "leader_term_started",
            jobs=sum(len(items) for _, items, _ in listed),
            referenced=len(cluster.referenced),
            running=len(running),
            queued=len(cluster.submitted) - len(running),
        )
        freeze_what_is_alive()  # the listed objects and the state built from them: most live as long as the term
        loop.start()
        cluster.start_watching()

    async def stop(self) -> None:
        if self.loop is not None:
            self.loop.active = False
            await self.loop.stop()
        if self.cluster is not None:
            await self.cluster.settle(2.0)
            await self.cluster.stop()
        if self.recorder is not None:
            await self.recorder.drain(1.0)
        log.info("leader_term_stopped")

    async def _recover_ledger(
        self,
        listed: list[tuple[JobKind, list[dict[str, Any]], str]],
        running: Mapping[str, object],
        cluster: KubeCluster,
    ) -> dict[str, int]:
        assert self.ledger is not None
        engine = self.ledger.engine
        await self.ledger.flush()
        ended = {
            object_key(kind, obj): at
            for kind, items, _ in listed
            for obj in items
            if (at := kind.status(obj).finished_at) is not None
        }
        recovery = await close_orphaned_intervals(engine, set(running), ended, default_end=await last_activity(engine))
        if recovery.closed or recovery.unresolved:
            log.info("ledger_recovered", closed=len(recovery.closed), unresolved=sorted(recovery.unresolved))
        for record in await repository.admitted_workloads(engine):
            cluster.admitted_at[record.workload_id] = epoch_ms(record.admitted_at)
        return dict(await repository.last_admission_attempts(engine))

    async def _load_credits(self, controller: Controller, running: set[str]) -> None:
        assert self.ledger is not None
        now = self.clock()
        half_life = controller.config.fair_sharing.usage_half_life
        since_ms = now - half_life * CREDIT_HISTORY_HALF_LIVES
        # A running workload's open interval ends "now" here: submitting it opens its usage again from now on.
        controller.credits.load(await usage_since(self.ledger.engine, since_ms, now))


async def load_budget_spending(controller: Controller, engine: AsyncEngine, now: int) -> None:
    """Budget spending from the ledger, back to the earliest window any budget reads (before running work is
    submitted, which opens its usage again from `now`). Read even when the quota file has no budget yet, so that
    one added by a reload counts this window's spending from its start."""
    controller.budgets.load(await usage_since(engine, history_start(controller.config, now), now))


def _uid(cluster: KubeCluster, key: str) -> str | None:
    job = cluster.jobs.get(key) or (cluster.waiting[key][1] if key in cluster.waiting else None)
    uid = ((job or {}).get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else None


def record_unknown_admissions(
    controller: Controller, running: Mapping[str, object], known: set[str], attempts: Mapping[str, int]
) -> None:
    """Running Jobs the ledger has no open admission for (the previous leader died before its write
    committed): record one now, so their GPU time is not missing from the ledger and attempts go on."""
    for name in running:
        workload = controller.manager.workloads.get(name)
        if name in known or workload is None or workload.admission is None:
            continue
        track = controller.tracking.setdefault(name, Tracking())
        track.attempt = attempts.get(name, 0) + 1
        usage = controller.manager.usage.get(name, {})
        borrowed = controller.borrowed(workload.team, usage)
        controller.journal.admitted(workload, track.attempt, usage, borrowed, workload.admission.admitted_at)
        log.info("ledger_admission_recovered", workload=name, attempt=track.attempt)
