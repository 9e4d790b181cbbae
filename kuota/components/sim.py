"""`kuota serve --cluster sim`: the controller on a simulated cluster in real time, for a local try-out.

No Kubernetes: a small synthetic load (one job per team every few seconds, each asking for one unit of the
first resource its team has quota for, running for half a minute) goes through the real controller, loop and
ledger, so the admin API and the ledger have something to show. Checkpoint requests are answered after a second.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Mapping, Sequence

from admission.nodes import NodeInventory
from admission.workload import Workload
from kuota.runtime import Runtime
from queues.controller import BACKOFF_BASE_MS, Controller
from queues.journal import Journal, Journals, LogJournal
from queues.ledger_journal import LedgerJournal
from queues.loop import ControllerLoop, LoopTimers, wall_clock_ms
from queues.tasks import BackgroundTasks
from quota.pod_set import PodSet

SUBMIT_EVERY_S = 5.0
RUNTIME_S = (10.0, 60.0)
CHECKPOINT_ANSWER_S = 1.0


class RealTimeSimCluster:
    def __init__(self) -> None:
        self.controller: Controller | None = None
        self.loop: ControllerLoop | None = None
        self.runtimes: dict[str, float] = {}
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def _later(self, key: str, delay_s: float, fn: Callable[[], None]) -> None:
        old = self._handles.pop(key, None)
        if old is not None:
            old.cancel()
        self._handles[key] = asyncio.get_running_loop().call_later(delay_s, fn)

    def _tell(self, name: str, what: str) -> None:
        controller = self.controller
        if controller is None:
            return
        now = wall_clock_ms()
        if what == "finished":
            controller.job_finished(name, now)
        elif what == "acked":
            controller.checkpoint_acked(name, f"sim-{now}", now)
        elif what == "suspended":
            controller.suspended(name, now)
        elif what == "ready":
            controller.pods_reported(name, None, now)
        if self.loop is not None:
            self.loop.wake()

    def admit(
        self,
        workload: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        counts: Mapping[str, int],
        resume_from: str | None,
    ) -> None:
        self._later(
            workload.name, self.runtimes.get(workload.name, 30.0), lambda: self._tell(workload.name, "finished")
        )
        # Its pods are ready at once (gang readiness has nothing to time here).
        asyncio.get_running_loop().call_soon(self._tell, workload.name, "ready")

    def request_checkpoint(self, workload: Workload, deadline: int, reason: str, preemptor: str | None) -> str:
        self._later(workload.name, CHECKPOINT_ANSWER_S, lambda: self._tell(workload.name, "acked"))
        return "annotation"

    def suspend(self, workload: Workload) -> None:
        self._later(workload.name, 0.1, lambda: self._tell(workload.name, "suspended"))

    def mark_deactivated(self, workload: Workload, message: str | None) -> None:
        return None  # nothing outlives this process

    def last_checkpoint_at(self, workload: Workload) -> int | None:
        return None

    def workloads_on(self, node: str) -> frozenset[str]:
        return frozenset()  # no nodes here

    def node_inventory(self) -> NodeInventory | None:
        return None

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class RealTimeSimulation:
    def __init__(
        self, runtime: Runtime, *, backoff_base_ms: int = BACKOFF_BASE_MS, extra_journals: Sequence[Journal] = ()
    ) -> None:
        self.runtime = runtime
        self.backoff_base_ms = backoff_base_ms
        self.extra_journals = list(extra_journals)
        """Journals beside the log and the ledger: the Prometheus metrics when the admin component serves them."""
        self.cluster = RealTimeSimCluster()
        self._tasks = BackgroundTasks("simulated cluster")

    async def start(self) -> None:
        timers = LoopTimers()
        ledger = self.runtime.ledger
        ledgers = [LedgerJournal(ledger)] if ledger is not None else []
        journal = Journals(LogJournal(), *ledgers, *self.extra_journals)
        controller = Controller(
            self.runtime.config, self.cluster, timers, journal, backoff_base_ms=self.backoff_base_ms
        )
        loop = ControllerLoop(controller, timers, backpressure=(lambda: ledger.full) if ledger is not None else None)
        self.cluster.controller, self.cluster.loop = controller, loop
        self.runtime.controller, self.runtime.loop = controller, loop
        loop.start()
        self._tasks.start(self._feed(), "kuota-sim-load")

    async def stop(self) -> None:
        await self._tasks.close()
        self.cluster.cancel_all()
        if self.runtime.loop is not None:
            await self.runtime.loop.stop()

    async def _feed(self) -> None:
        counter = itertools.count(1)
        while True:
            controller = self.runtime.controller
            if controller is not None:
                for team in controller.config.teams:
                    groups = team.groups()
                    if not groups or not team.queues:
                        continue
                    resource = groups[0].covered_resources[0]
                    queue = team.queues[0]
                    namespace = queue.partition("/")[0]
                    name = f"{namespace}/sim-{next(counter)}"
                    now = wall_clock_ms()
                    self.cluster.runtimes[name] = random.uniform(*RUNTIME_S)
                    workload = Workload(
                        name=name,
                        team=team.name,
                        priority=0,
                        pod_sets=(PodSet(name="main", count=1, requests={resource: 1000}),),
                        created_at=now,
                        queue=queue,
                    )
                    controller.submit(workload, now)
                self.runtime.wake()
            await asyncio.sleep(SUBMIT_EVERY_S)
