"""Leader election on a coordination.k8s.io/v1 Lease, so that of several replicas exactly one admits and evicts.

The usual algorithm (client-go's leaderelection): the holder renews `renewTime` every retry period; a candidate
takes the Lease over once it has seen the same record unchanged for a whole `leaseDurationSeconds` by its own
clock (so clocks on different nodes need not agree), or at once when the holder released it. Every write is an
update at the resourceVersion read, so two candidates cannot both win. A leader that cannot renew for
`renew_deadline` steps down before its Lease can expire, and a leader shutting down releases the Lease so the
next one starts without waiting. Written here rather than taken from kubernetes_asyncio because that one wants
whole seconds everywhere and cannot release on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import structlog

from clusters.kube.api import Conflict, KubeApi, NotFound
from queues.tasks import BackgroundTasks

log = structlog.get_logger("kuota.leader")

Obj = dict[str, Any]


def _micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        api: KubeApi,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration_s: int = 15,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        on_started: Callable[[], Coroutine[Any, Any, None]],
        on_stopped: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        if not 0 < renew_deadline_s < lease_duration_s:
            raise ValueError("the renew deadline must be shorter than the lease duration")
        self.api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration_s = max(1, int(lease_duration_s))
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.leader = False
        self._observed: tuple[str, float] | None = None
        self._last_renew = 0.0
        self._stopping = False
        self._wake = asyncio.Event()
        self._transition = BackgroundTasks("leader election")
        """At most one start or stop of the leader's work at a time."""

    async def run(self) -> None:
        while not self._stopping:
            try:
                renewed = await self._try_acquire_or_renew()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("lease_error", lease=self.name, error=str(exc)[:200])
                renewed = False
            now = time.monotonic()
            if renewed:
                self._last_renew = now
                if not self.leader:
                    self.leader = True
                    log.info("leader_elected", lease=self.name, identity=self.identity)
                    await self._switch(self.on_started, "kuota-leading")
            elif self.leader and now - self._last_renew > self.renew_deadline_s:
                self.leader = False
                log.warning("leader_lost", lease=self.name, identity=self.identity)
                await self._switch(self.on_stopped, "kuota-following")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.retry_period_s)

    async def _switch(self, callback: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        # Starting (listing Jobs, reading the ledger) may take a while: the Lease must keep being renewed.
        await self._transition.wait()
        self._transition.start(callback(), name)

    async def stop(self) -> None:
        """Step down: stop deciding, then release the Lease so another replica takes over at once."""
        self._stopping = True
        self._wake.set()
        await self._transition.wait()
        if self.leader:
            self.leader = False
            await self.on_stopped()
            try:
                await self._release()
            except Exception as exc:
                log.warning("lease_release_failed", lease=self.name, error=str(exc)[:200])

    # -- the Lease ----------------------------------------------------------------------------------------------

    def _spec(self, now: datetime, transitions: int, acquire: str | None) -> Obj:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration_s,
            "acquireTime": acquire or _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    async def _get(self) -> Obj | None:
        try:
            return await self.api.get_lease(self.namespace, self.name)
        except NotFound:
            return None

    async def _try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        lease = await self._get()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, 0, None),
            }
            try:
                await self.api.create_lease(self.namespace, body)
            except Conflict:  # another candidate created it first
                return False
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = f"{holder}|{spec.get('renewTime')}|{spec.get('leaseDurationSeconds')}"
        if self._observed is None or self._observed[0] != record:
            self._observed = (record, time.monotonic())
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
            if time.monotonic() - self._observed[1] < duration:
                return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquire = spec.get("acquireTime") if holder == self.identity else None
        lease["spec"] = self._spec(now, transitions, acquire)
        try:
            await self.api.replace_lease(self.namespace, self.name, lease)
        except Conflict:  # written by another candidate since we read it
            return False
        return True

    async def _release(self) -> None:
        lease = await self._get()
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        now = datetime.now(UTC)
        lease["spec"] = {
            **lease["spec"],
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "renewTime": _micro_time(now),
        }
        await self.api.replace_lease(self.namespace, self.name, lease)
        log.info("lease_released", lease=self.name, identity=self.identity)
