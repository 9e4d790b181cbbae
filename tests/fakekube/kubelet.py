"""FakeKubelet: plays the job controller and the kubelet for batch/v1 Jobs, on the wall clock.

An unsuspended Job starts at once (startTime, active, ready), runs for its annotated runtime, then completes
(or fails) with the status the real job controller writes. Suspending a running Job stops it (active 0,
startTime cleared, Suspended condition); unsuspending starts the clock again from zero. Every status change is
a normal write through the registry, so watchers see MODIFIED events and webhooks on jobs/status are called.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from . import errors, strategies
from .resources import JOBS, PODS
from .users import JOB_CONTROLLER, UserInfo

if TYPE_CHECKING:
    from .server import FakeKubeServer

Obj = dict[str, Any]

RUNTIME_ANNOTATION = "fake.kuota.dev/runtime-seconds"  # float seconds of wall-clock run time
FAIL_ANNOTATION = "fake.kuota.dev/fail"  # "true": the Job fails with BackoffLimitExceeded when its runtime is up

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Run:
    number: int  # which start of the Job this is; a timer from an earlier start is ignored
    namespace: str
    name: str


@dataclass(frozen=True)
class _Finish:
    uid: str
    run: _Run


def _condition(kind: str, status: str, reason: str, message: str) -> Obj:
    now = strategies.now_rfc3339()
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def _conditions(job: Obj) -> list[Obj]:
    return list((job.get("status") or {}).get("conditions") or [])


def _has_condition(job: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in _conditions(job))


def _finished(job: Obj) -> bool:
    return _has_condition(job, "Complete") or _has_condition(job, "Failed")


def _set_condition(status: Obj, condition: Obj) -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != condition["type"]]
    status["conditions"] = [*conditions, condition]


class FakeKubelet:
    """default_runtime_s: run time of a Job without the runtime annotation. create_pods: also create one Pod
    per active slot (owned by the Job, labelled like the job controller labels them) and move them through
    Running -> Succeeded/Failed; deleted when the Job is suspended."""

    def __init__(
        self,
        server: FakeKubeServer,
        *,
        default_runtime_s: float = 1.0,
        create_pods: bool = False,
        user: UserInfo = JOB_CONTROLLER,
        node_name: str = "fake-node",
    ) -> None:
        self.server = server
        self.default_runtime_s = default_runtime_s
        self.create_pods = create_pods
        self.user = user
        self.node_name = node_name
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._runs: dict[str, _Run] = {}  # uid -> the current run of a running Job
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._run_counter = 0
        self._task: asyncio.Task[None] | None = None
        self._subscription: Any = None
        self.errors: list[str] = []  # writes that failed (e.g. a webhook on jobs/status rejected them)

    async def start(self) -> Self:
        store = self.server.store
        self._subscription = store.subscribe(frozenset({JOBS.storage}), self._queue)
        for job in store.list(JOBS.storage):
            await self._queue.put(("job", job["metadata"]["namespace"], job["metadata"]["name"]))
        self._task = asyncio.create_task(self._loop(), name="fake-kubelet")
        return self

    async def stop(self) -> None:
        if self._subscription is not None:
            self.server.store.unsubscribe(self._subscription)
            self._subscription = None
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def running(self) -> set[tuple[str, str]]:
        """(namespace, name) of the Jobs currently running."""
        return {(run.namespace, run.name) for run in self._runs.values()}

    async def finish(self, namespace: str, name: str, *, failed: bool = False) -> Obj:
        """End a running Job now instead of waiting for its runtime."""
        job = self.server.registry.get(JOBS, namespace, name)
        self._cancel(job["metadata"]["uid"])
        return await self._complete(namespace, name, failed=failed)

    # the loop

    async def _loop(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, _Finish):
                    await self._on_timer(item)
                elif isinstance(item, tuple):
                    await self._reconcile(item[1], item[2])
                else:  # a StoredEvent for a Job
                    meta = item.obj["metadata"]
                    if item.type == "DELETED":
                        self._cancel(meta["uid"])
                    else:
                        await self._reconcile(meta["namespace"], meta["name"])
            except errors.ApiError as exc:
                if exc.code == 404:  # the Job went away while we were working on it
                    continue
                self.errors.append(str(exc))
                log.warning("fake kubelet: %s", exc)

    def _runtime(self, job: Obj) -> float:
        raw = (job["metadata"].get("annotations") or {}).get(RUNTIME_ANNOTATION)
        try:
            return float(raw) if raw is not None else self.default_runtime_s
        except ValueError:
            return self.default_runtime_s

    def _cancel(self, uid: str) -> None:
        self._runs.pop(uid, None)
        timer = self._timers.pop(uid, None)
        if timer is not None:
            timer.cancel()

    async def _reconcile(self, namespace: str, name: str) -> None:
        job = self.server.store.peek(JOBS.storage, namespace, name)  # only read
        if job is None or _finished(job):
            return
        uid = job["metadata"]["uid"]
        suspended = bool(job["spec"].get("suspend"))
        if suspended:
            if uid in self._runs:
                self._cancel(uid)
                await self._suspend(namespace, name)
            elif not _has_condition(job, "Suspended"):
                await self._write_status(namespace, name, self._suspended_status)
        elif uid not in self._runs:
            await self._start(job)

    async def _start(self, job: Obj) -> None:
        meta = job["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        self._run_counter += 1
        run = _Run(self._run_counter, namespace, name)
        spec = job["spec"]
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        succeeded = int((job.get("status") or {}).get("succeeded", 0))
        active = min(parallelism, int(completions) - succeeded) if completions is not None else parallelism

        def started(status: Obj) -> None:
            status["startTime"] = strategies.now_rfc3339()
            status["active"] = active
            status["ready"] = active
            status["terminating"] = 0
            status["uncountedTerminatedPods"] = {}
            if any(c.get("type") == "Suspended" for c in status.get("conditions") or []):
                _set_condition(status, _condition("Suspended", "False", "JobResumed", "Job resumed"))

        await self._write_status(namespace, name, started)
        self._runs[uid] = run  # only now: if the write failed, the next event for this Job tries again
        if self.create_pods:
            await self._create_pods(job, active)
        loop = asyncio.get_running_loop()
        self._timers[uid] = loop.call_later(self._runtime(job), self._queue.put_nowait, _Finish(uid, run))

    async def _on_timer(self, finish: _Finish) -> None:
        if self._runs.get(finish.uid) != finish.run:
            return
        self._timers.pop(finish.uid, None)
        job = self.server.store.peek(JOBS.storage, finish.run.namespace, finish.run.name)  # only read
        if job is None or job["metadata"]["uid"] != finish.uid:
            return
        failed = (job["metadata"].get("annotations") or {}).get(FAIL_ANNOTATION, "").lower() == "true"
        await self._complete(finish.run.namespace, finish.run.name, failed=failed)

    async def _complete(self, namespace: str, name: str, *, failed: bool) -> Obj:
        job = self.server.registry.get(JOBS, namespace, name)
        self._runs.pop(job["metadata"]["uid"], None)
        spec = job["spec"]

        def completed(status: Obj) -> None:
            now = strategies.now_rfc3339()
            status.update({"active": 0, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}})
            if failed:
                status["failed"] = int(spec.get("backoffLimit", 6)) + 1
                message = "Job has reached the specified backoff limit"
                _set_condition(status, _condition("FailureTarget", "True", "BackoffLimitExceeded", message))
                _set_condition(status, _condition("Failed", "True", "BackoffLimitExceeded", message))
            else:
                status["succeeded"] = int(spec.get("completions") or spec.get("parallelism", 1))
                status["completionTime"] = now
                message = "Reached expected number of succeeded pods"
                _set_condition(status, _condition("SuccessCriteriaMet", "True", "CompletionsReached", message))
                _set_condition(status, _condition("Complete", "True", "CompletionsReached", message))

        result = await self._write_status(namespace, name, completed)
        if self.create_pods:
            await self._set_pod_phases(job, "Failed" if failed else "Succeeded")
        return result

    async def _suspend(self, namespace: str, name: str) -> None:
        job = await self._write_status(namespace, name, self._suspended_status)
        if self.create_pods:
            await self._delete_pods(job)

    @staticmethod
    def _suspended_status(status: Obj) -> None:
        status.update({"active": 0, "ready": 0, "terminating": 0})
        # The job controller clears startTime so that activeDeadlineSeconds restarts on resume (and so that
        # the template's scheduling directives become mutable again).
        status.pop("startTime", None)
        _set_condition(status, _condition("Suspended", "True", "JobSuspended", "Job suspended"))

    async def _write_status(self, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj:
        """Read-modify-write of jobs/status with resourceVersion preconditions, retried on conflict."""
        for _ in range(10):
            job = self.server.registry.get(JOBS, namespace, name)
            status = dict(job.get("status") or {})
            change(status)
            job["status"] = status
            try:
                return await self.server.registry.update(
                    JOBS, namespace, name, job, user=self.user, subresource="status"
                )
            except errors.ApiError as exc:
                if exc.code != 409:
                    raise
        raise errors.conflict(JOBS, name, errors.STALE_OBJECT)

    # pods

    def _pods_of(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [
            p
            for p in self.server.store.list(PODS.storage, job["metadata"]["namespace"])
            if any(ref.get("uid") == uid for ref in p["metadata"].get("ownerReferences") or [])
        ]

    async def _create_pods(self, job: Obj, count: int) -> None:
        meta = job["metadata"]
        template = job["spec"].get("template") or {}
        for _ in range(count):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "generateName": f"{meta['name']}-",
                    "namespace": meta["namespace"],
                    "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                    "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {**(template.get("spec") or {}), "nodeName": self.node_name},
            }
            created = await self.server.registry.create(PODS, meta["namespace"], pod, user=self.user)
            await self._set_pod_phase(created, "Running")

    async def _set_pod_phase(self, pod: Obj, phase: str) -> None:
        now = strategies.now_rfc3339()
        ready = phase == "Running"
        containers = (pod.get("spec") or {}).get("containers") or []
        pod["status"] = {
            **(pod.get("status") or {}),
            "phase": phase,
            "startTime": (pod.get("status") or {}).get("startTime", now),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                }
            ],
            "containerStatuses": [
                {
                    "name": c.get("name"),
                    "image": c.get("image"),
                    "ready": ready,
                    "restartCount": 0,
                    "started": ready,
                }
                for c in containers
            ],
        }
        meta = pod["metadata"]
        await self.server.registry.update(
            PODS, meta["namespace"], meta["name"], pod, user=self.user, subresource="status"
        )

    async def _set_pod_phases(self, job: Obj, phase: str) -> None:
        for pod in self._pods_of(job):
            if (pod.get("status") or {}).get("phase") == "Running":
                await self._set_pod_phase(pod, phase)

    async def _delete_pods(self, job: Obj) -> None:
        for pod in self._pods_of(job):
            meta = pod["metadata"]
            with contextlib.suppress(errors.ApiError):
                await self.server.registry.delete(PODS, meta["namespace"], meta["name"], user=self.user)
