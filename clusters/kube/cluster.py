"""The Kubernetes Cluster: batch/v1 Jobs in, patches out.

What the controller hears comes from one list+watch of every Job (clusters/kube/watch.py): a Job kuota manages is
submitted when first seen (one that runs with `kuota.dev/admitted-flavor` is already admitted, and is submitted
with the admission rebuilt from the annotation, so a restart or a new leader admits nothing twice), finished from
its Complete/Failed condition, deleted when it goes. What the controller decides goes out as one merge patch per
step, scheduled as a task so every command returns at once:

* admit: `spec.suspend: false`, the flavors' node selector and tolerations, the admission annotations;
* request_checkpoint: POST to `kuota.dev/checkpoint-url`, else stamp `kuota.dev/checkpoint-requested-at`; the Job
  answers by setting `kuota.dev/checkpoint-completed-at` (and maybe `kuota.dev/checkpoint-id`);
* suspend: `spec.suspend: true`; the Job counts as suspended once the watch shows it has no active pods.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog

from admission.job import POD_SET_NAME, convert_job, job_annotations, pod_count
from admission.labels import (
    ADMITTED_FLAVOR,
    CHECKPOINT_COMPLETED_AT,
    CHECKPOINT_ID,
    CHECKPOINT_REQUESTED_AT,
    CHECKPOINT_URL,
    RESUME_FROM,
    WORKLOAD_ID,
)
from admission.workload import Admission, PodSet, Workload
from clusters.kube.api import KubeApi, status_of
from clusters.kube.events import rfc3339
from clusters.kube.watch import JobReflector
from queues.controller import Controller
from queues.loop import ControllerLoop, wall_clock_ms
from quota.config import QuotaConfig, Team

log = structlog.get_logger("kuota.kube")

Obj = dict[str, Any]

CHECKPOINT_POST_TIMEOUT_S = 5.0


def job_key(job: Mapping[str, Any]) -> str:
    meta = job.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def finished_condition(job: Mapping[str, Any]) -> bool | None:
    """True when the Job completed, False when it failed, None while it has not finished."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return bool(condition["type"] == "Complete")
    return None


def finished_at(job: Mapping[str, Any]) -> datetime | None:
    status = job.get("status") or {}
    stamps = [status.get("completionTime")] + [
        c.get("lastTransitionTime")
        for c in status.get("conditions") or []
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
    ]
    for stamp in stamps:
        parsed = parse_time(stamp)
        if parsed is not None:
            return parsed
    return None


def parse_time(raw: object) -> datetime | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def is_suspended(job: Mapping[str, Any]) -> bool:
    return (job.get("spec") or {}).get("suspend") is True


def has_no_active_pods(job: Mapping[str, Any]) -> bool:
    status = job.get("status") or {}
    suspended = any(c.get("type") == "Suspended" and c.get("status") == "True" for c in status.get("conditions") or [])
    return suspended or not status.get("active")


def encode_flavors(flavors: Mapping[str, str]) -> str:
    """The admitted-flavor annotation: the flavor's name, or `resource=flavor,...` when resources differ."""
    names = set(flavors.values())
    if len(names) == 1:
        return next(iter(names))
    return ",".join(f"{resource}={flavor}" for resource, flavor in sorted(flavors.items()))


def decode_flavors(text: str, pod_set: PodSet, team: Team | None) -> dict[str, str]:
    if "=" in text:
        pairs = (part.split("=", 1) for part in text.split(",") if "=" in part)
        return {resource.strip(): flavor.strip() for resource, flavor in pairs}
    flavor = text.strip()
    covered: set[str] = set()
    for group in team.groups() if team is not None else ():
        if any(entry.flavor == flavor for entry in group.flavors):
            covered.update(group.covered_resources)
    return {resource: flavor for resource in pod_set.requests if resource in covered}


class KubeCluster:
    """The Cluster the controller drives on a real (or fake) API server."""

    def __init__(
        self,
        api: KubeApi,
        config: Callable[[], QuotaConfig],
        *,
        clock: Callable[[], int] = wall_clock_ms,
        http: aiohttp.ClientSession | None = None,
    ) -> None:
        self.api = api
        self.config = config
        self.clock = clock
        self._http = http
        self.controller: Controller | None = None
        self.loop: ControllerLoop | None = None
        self.jobs: dict[str, Obj] = {}
        """The latest body of every Job submitted to the controller, by namespace/name."""
        self.submitted: set[str] = set()
        self.done: set[str] = set()
        """Jobs that finished while submitted: a later update (labels, TTL) must not submit them again."""
        self.suspending: set[str] = set()
        self.awaiting_ack: dict[str, str | None] = {}
        """Victims asked to checkpoint → their completed-at annotation when asked (a new value is the answer)."""
        self.admitted_at: dict[str, int] = {}
        """When the ledger says a running Job was admitted (for rebuilt admissions)."""
        self.unreadable: dict[str, str] = {}
        self.patches = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.reflector = JobReflector(api, self.on_list, self.on_event)
        self._watch_task: asyncio.Task[None] | None = None

    # -- life ---------------------------------------------------------------------------------------------------

    def attach(self, controller: Controller, loop: ControllerLoop | None) -> None:
        self.controller = controller
        self.loop = loop

    def start_watching(self) -> None:
        self._watch_task = asyncio.get_running_loop().create_task(self.reflector.run(), name="kuota-job-watch")

    async def stop(self) -> None:
        tasks = [t for t in [self._watch_task, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def settle(self, timeout_s: float = 5.0) -> None:
        """Wait for the API calls in flight (tests, shutdown)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        task = asyncio.get_running_loop().create_task(self._guard(coro, what))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guard(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("kube_call_failed", call=what, status=status_of(exc), error=str(exc)[:300])

    def _wake(self) -> None:
        if self.loop is not None:
            self.loop.wake()

    # -- what the watch reports ---------------------------------------------------------------------------------

    def on_list(self, items: list[Obj]) -> None:
        """A full list (at start, or after 410 Gone): everything not in it was deleted meanwhile."""
        present = {job_key(job) for job in items}
        for key in list(self.submitted):
            if key not in present:
                self._deleted(key)
        self.done &= present
        for job in items:
            self.observe(job)

    def on_event(self, kind: str, job: Obj) -> None:
        if kind == "DELETED":
            key = job_key(job)
            self.done.discard(key)
            self._deleted(key)
        else:
            self.observe(job)

    def _deleted(self, key: str) -> None:
        self.jobs.pop(key, None)
        self.suspending.discard(key)
        self.awaiting_ack.pop(key, None)
        if key in self.submitted:
            self.submitted.discard(key)
            if self.controller is not None:
                self.controller.job_deleted(key, self.clock())
            self._wake()

    def observe(self, job: Obj) -> None:
        key = job_key(job)
        controller = self.controller
        if controller is None:
            return
        if key not in self.submitted:
            if key in self.done or finished_condition(job) is not None:
                return
            workload = self._workload(key, job)
            if workload is None:
                return
            self.jobs[key] = job
            self.submitted.add(key)
            controller.submit(workload, self.clock())
            self._wake()
            return
        previous = self.jobs.get(key) or {}
        self.jobs[key] = job
        now = self.clock()
        succeeded = finished_condition(job)
        if succeeded is not None:
            self.submitted.discard(key)
            self.done.add(key)
            self.suspending.discard(key)
            self.awaiting_ack.pop(key, None)
            self.jobs.pop(key, None)
            controller.job_finished(key, now, succeeded)
            self._wake()
            return
        annotations = job_annotations(job)
        completed = annotations.get(CHECKPOINT_COMPLETED_AT)
        if key in self.awaiting_ack and completed and completed != self.awaiting_ack[key]:
            self.awaiting_ack.pop(key)
            controller.checkpoint_acked(key, annotations.get(CHECKPOINT_ID) or None, now)
            self._wake()
        elif completed and completed != job_annotations(previous).get(CHECKPOINT_COMPLETED_AT):
            controller.checkpoint_reported(key, now)
        if key in self.suspending and is_suspended(job) and has_no_active_pods(job):
            self.suspending.discard(key)
            controller.suspended(key, now)
            self._wake()

    def _workload(self, key: str, job: Obj) -> Workload | None:
        conversion = convert_job(job, self.config())
        workload = conversion.workload
        if workload is None:
            if conversion.problems and self.unreadable.get(key) != conversion.problems[0].message:
                self.unreadable[key] = conversion.problems[0].message
                log.warning("job_not_queued", job=key, problems=[p.message for p in conversion.problems])
            return None
        self.unreadable.pop(key, None)
        annotations = job_annotations(job)
        flavor = annotations.get(ADMITTED_FLAVOR)
        pod_set = workload.pod_sets[0]
        team = next((t for t in self.config().teams if t.name == workload.team), None)
        if flavor and not is_suspended(job):
            flavors = decode_flavors(flavor, pod_set, team)
            admission = Admission(
                flavors={pod_set.name: flavors},
                counts={pod_set.name: pod_count(job)},
                admitted_at=self.admitted_at.get(key, self.clock()),
            )
            return dataclasses.replace(workload, admission=admission)
        if flavor:
            # Requeued after a preemption: the selector still holds the last flavor's labels, which must not
            # pin the Job to that flavor from now on.
            stale = {label for f in set(decode_flavors(flavor, pod_set, team).values()) for label in self._labels(f)}
            selector = {k: v for k, v in pod_set.node_selector.items() if k not in stale}
            return dataclasses.replace(workload, pod_sets=(dataclasses.replace(pod_set, node_selector=selector),))
        if not is_suspended(job):
            # Running without an admission (created while the webhooks were away): stop it and queue it.
            log.warning("job_running_unadmitted", job=key)
            self.suspending.discard(key)
            self._spawn(self._patch(key, {"spec": {"suspend": True}}), f"suspend unadmitted {key}")
        return workload

    def _labels(self, flavor: str) -> dict[str, str]:
        found = next((f for f in self.config().flavors if f.name == flavor), None)
        return dict(found.node_labels) if found is not None else {}

    # -- Cluster: what the controller decides -------------------------------------------------------------------

    def admit(
        self,
        workload: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        counts: Mapping[str, int],
        resume_from: str | None,
    ) -> None:
        key = workload.name
        job = self.jobs.get(key) or {}
        assigned = dict(flavors.get(POD_SET_NAME, {}))
        names = sorted(set(assigned.values()))
        selector: dict[str, str] = {}
        tolerations: list[Obj] = list(
            ((job.get("spec") or {}).get("template") or {}).get("spec", {}).get("tolerations") or []
        )
        for name in names:
            found = next((f for f in self.config().flavors if f.name == name), None)
            if found is None:
                continue
            selector.update(found.node_labels)
            for toleration in found.tolerations:
                wire = {
                    k: v
                    for k, v in (
                        ("key", toleration.key),
                        ("operator", toleration.operator),
                        ("value", toleration.value),
                        ("effect", toleration.effect),
                        ("tolerationSeconds", toleration.toleration_seconds),
                    )
                    if v is not None
                }
                if wire not in tolerations:
                    tolerations.append(wire)
        pod_spec: Obj = {"nodeSelector": selector}
        if tolerations:
            pod_spec["tolerations"] = tolerations
        spec: Obj = {"suspend": False, "template": {"spec": pod_spec}}
        pod_set = next((p for p in workload.pod_sets if p.name == POD_SET_NAME), None)
        count = counts.get(POD_SET_NAME)
        if pod_set is not None and count is not None and count != pod_set.count:
            spec["parallelism"] = count  # partial admission: run the pods the quota was found for
        patch = {
            "metadata": {
                "annotations": {
                    ADMITTED_FLAVOR: encode_flavors(assigned) if assigned else "none",
                    WORKLOAD_ID: key,
                    RESUME_FROM: resume_from,
                    CHECKPOINT_REQUESTED_AT: None,
                }
            },
            "spec": spec,
        }
        self.suspending.discard(key)
        self._spawn(self._admit(key, patch), f"admit {key}")

    def request_checkpoint(self, workload: Workload, deadline: int, reason: str, preemptor: str | None) -> str:
        key = workload.name
        annotations = job_annotations(self.jobs.get(key) or {})
        self.awaiting_ack[key] = annotations.get(CHECKPOINT_COMPLETED_AT)
        url = annotations.get(CHECKPOINT_URL)
        if isinstance(url, str) and url.strip().startswith(("http://", "https://")):
            self._spawn(self._post_checkpoint(key, url.strip(), deadline, reason), f"checkpoint hook {key}")
            return "url"
        self._spawn(self._ask_by_annotation(key), f"checkpoint annotation {key}")
        return "annotation"

    def suspend(self, workload: Workload) -> None:
        key = workload.name
        self.awaiting_ack.pop(key, None)
        self.suspending.add(key)
        self._spawn(self._patch(key, {"spec": {"suspend": True}}), f"suspend {key}")

    def last_checkpoint_at(self, workload: Workload) -> int | None:
        stamp = parse_time(job_annotations(self.jobs.get(workload.name) or {}).get(CHECKPOINT_COMPLETED_AT))
        return epoch_ms(stamp) if stamp is not None else None

    # -- the calls ----------------------------------------------------------------------------------------------

    async def _patch(self, key: str, patch: Obj) -> None:
        namespace, _, name = key.partition("/")
        try:
            await self.api.patch_job(namespace, name, patch)
            self.patches += 1
        except Exception as exc:
            if status_of(exc) == 404:
                log.info("job_gone_before_patch", job=key)
                self._deleted(key)
                return
            raise

    async def _admit(self, key: str, patch: Obj) -> None:
        """The run patch; when the API server refuses it for good (the client has retried what can be retried),
        the admission is undone so the quota it holds is not lost."""
        try:
            await self._patch(key, patch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("admission_failed", job=key, status=status_of(exc), error=str(exc)[:300])
            if self.controller is not None and key in self.submitted:
                self.controller.admission_failed(key, self.clock())
                self._wake()

    async def _ask_by_annotation(self, key: str) -> None:
        await self._patch(key, {"metadata": {"annotations": {CHECKPOINT_REQUESTED_AT: rfc3339(self.clock())}}})

    async def _post_checkpoint(self, key: str, url: str, deadline: int, reason: str) -> None:
        """POST until the deadline; a 2xx with a checkpoint id is the answer, one without leaves the handshake."""
        if self._http is None:
            self._http = aiohttp.ClientSession()
        body = {"workload": key, "reason": reason, "deadline": rfc3339(deadline)}
        delay = 0.2
        while key in self.awaiting_ack:
            remaining = (deadline - self.clock()) / 1000
            if remaining <= 0:
                return
            try:
                timeout = aiohttp.ClientTimeout(total=min(CHECKPOINT_POST_TIMEOUT_S, remaining))
                async with self._http.post(url, json=body, timeout=timeout) as response:
                    if 200 <= response.status < 300:
                        answer = await response.json(content_type=None) if response.content_length != 0 else None
                        checkpoint = answer.get("checkpoint") if isinstance(answer, dict) else None
                        if checkpoint is not None and key in self.awaiting_ack and self.controller is not None:
                            self.awaiting_ack.pop(key)
                            self.controller.checkpoint_acked(key, str(checkpoint), self.clock())
                            self._wake()
                        elif checkpoint is None:
                            await self._ask_by_annotation(key)  # accepted; the id comes through the annotations
                        return
                    log.info("checkpoint_hook_refused", job=key, status=response.status)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.info("checkpoint_hook_failed", job=key, error=str(exc)[:200])
            await asyncio.sleep(min(delay, max(0.0, (deadline - self.clock()) / 1000)))
            delay = min(delay * 2, 5.0)
