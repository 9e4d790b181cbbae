"""The Kubernetes Cluster: objects of every enabled kind in, patches out.

What the controller hears comes from one list+watch per enabled kind (clusters/kube/watch.py): an object kuota
manages is submitted when first seen as the workload `KIND/NAMESPACE/NAME` (one that runs with
`kuota.dev/admitted-flavor` is already admitted, and is submitted with the admission rebuilt from the annotation,
so a restart or a new leader admits nothing twice), finished when its kind says so, deleted when it goes. What the
controller decides goes out as one patch per step, each scheduled as a task so every command returns at once; what
a patch holds is the kind's (workloads/):

* admit: the kind's run patch (per pod set: the flavors' node selector and tolerations, the admitted count; for a
  pod set placed by a topology, its domain's nodeSelector entry too, and kuota's scheduling gate, whose pods
  clusters/kube/placed_pods.py lets go node by node) with the admission annotations (the placement in
  `kuota.dev/topology-assignment`, clusters/kube/topology_assignment.py), as one JSON patch;
* request_checkpoint: POST to `kuota.dev/checkpoint-url`, else stamp `kuota.dev/checkpoint-requested-at`; the job
  answers by setting `kuota.dev/checkpoint-completed-at` (and maybe `kuota.dev/checkpoint-id`);
* suspend: the kind's stop patch; the workload counts as suspended once its kind reports it stopped.

A kind that reads its pod sets from objects it refers to (a TrainJob, from its training runtime) brings the kinds
of those objects along: they are listed and watched too, kept here by reference, and looked up when such an object
is read. One that cannot be queued yet (its runtime is not there, or does not read) waits out of the queue with a
`NotQueued` warning Event saying why (the webhooks cannot see runtimes, so nobody else can tell the user), and is
read again whenever an object it refers to appears or changes. Once queued it keeps the pod sets it was read with,
and is admitted with the objects it was read with: the trainer, too, runs a TrainJob from the copy of its runtime
it took when it first saw it, whatever becomes of the runtime later.

The kinds held back pod by pod (a LeaderWorkerSet, plain pods) are clusters/kube/gated.py's: one more list+watch,
of the pods that name a queue, feeds it, and it uses the steps below (submit, progress, finished, ...) for its
workloads as this module does for objects.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any

import aiohttp
import structlog

from admission.labels import (
    ADMITTED_FLAVOR,
    CHECKPOINT_COMPLETED_AT,
    CHECKPOINT_ID,
    CHECKPOINT_REQUESTED_AT,
    CHECKPOINT_URL,
    DEACTIVATED,
    PLACED_POD_SET,
    QUEUE_LABEL,
    TOPOLOGY_ASSIGNMENT,
    WORKLOAD_LABEL,
    is_label_value,
    workload_label_value,
)
from admission.nodes import NodeInventory
from admission.workload import Admission, Workload
from clusters.kube.admitted import (
    admission_annotations,
    annotation_ops,
    decode_admission,
    flavor_labels,
    placements,
)
from clusters.kube.api import KubeApi, NotFound, status_of
from clusters.kube.events import rfc3339
from clusters.kube.gated import GatedWorkloads
from clusters.kube.nodes import BOUND_POD_SELECTOR, BOUND_PODS, NODES, NodeWatch
from clusters.kube.placed_pods import PlacedPods
from clusters.kube.topology_assignment import Assigned, assignment_of, without_pin
from clusters.kube.topology_assignment import encode as encode_assignment
from clusters.kube.topology_assignment import pinned as pin_to_domain
from clusters.kube.topology_assignment import read_annotation as read_assignment
from clusters.kube.watch import Reflector
from queues.controller import Controller
from queues.loop import ControllerLoop, wall_clock_ms
from queues.tasks import BackgroundTasks
from quota.config import QuotaConfig
from workloads.gates import GATED_POD, GatedKind, pod_name
from workloads.kind import JobKind, JSONPatch, Reference, ReferencedKind, Resolve, Status, parse_time
from workloads.problems import JobProblem
from workloads.reading import convert, split_key, workload_key
from workloads.registry import Registry, enabled_kinds
from workloads.rules import job_annotations

log = structlog.get_logger("kuota.kube")

Obj = dict[str, Any]

CHECKPOINT_POST_TIMEOUT_S = 5.0

#: The reflector of the pods of kinds held back pod by pod, beside one per kind.
PODS = GATED_POD.plural
#: The reflectors of the nodes and of the pods bound to them (when the quota file turns node features on).
NODE_REFLECTOR = "Node"
BOUND_POD_REFLECTOR = "BoundPod"
#: The reflector of the pods of pod sets placed node by node (kinds with pod templates), when a flavor has a topology.
PLACED_POD_REFLECTOR = "PlacedPod"


class Unplaceable(Exception):
    """An admitted workload's pod sets are not all in its object as read now (a TrainJob whose runtime went)."""


def object_key(kind: JobKind, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return workload_key(kind.kind, str(meta.get("namespace")), str(meta.get("name")))


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def is_admitted_running(kind: JobKind, obj: Mapping[str, Any]) -> bool:
    """Running under an admission kuota made: the annotation is there and the kind does not hold it back."""
    return kind.status(obj).finished is None and not kind.is_suspended(obj) and ADMITTED_FLAVOR in job_annotations(obj)


class KubeCluster:
    """The Cluster the controller drives on a real (or fake) API server."""

    def __init__(
        self,
        api: KubeApi,
        config: Callable[[], QuotaConfig],
        *,
        kinds: Registry | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        http: aiohttp.ClientSession | None = None,
    ) -> None:
        self.api = api
        self.config = config
        self.kinds = kinds if kinds is not None else enabled_kinds(config().job_kinds)
        self.clock = clock
        self._http = http
        self.controller: Controller | None = None
        self.loop: ControllerLoop | None = None
        self.jobs: dict[str, Obj] = {}
        """The latest body of every object submitted to the controller, by workload key."""
        self.submitted: set[str] = set()
        self.done: set[str] = set()
        """Jobs that finished while submitted: a later update (labels, TTL) must not submit them again."""
        self.suspending: set[str] = set()
        self.letting_end: set[str] = set()
        """Ended objects held back where their operator cannot finish them, whose `end_patch` is on its way."""
        self.awaiting_ack: dict[str, str | None] = {}
        """Victims asked to checkpoint → their completed-at annotation when asked (a new value is the answer)."""
        self.admitted_at: dict[str, int] = {}
        """When the ledger says a running Job was admitted (for rebuilt admissions)."""
        self.unreadable: dict[str, str] = {}
        self.patches = 0
        self._calls = BackgroundTasks("kube cluster calls")
        """The API calls the controller's commands made, each a task so that every command returns at once."""
        self.gated = GatedWorkloads(self)
        """The workloads of kinds held back pod by pod (clusters/kube/gated.py)."""
        self.placed_pods: PlacedPods | None = None
        """The gated pods of pod sets placed node by node, of kinds with pod templates (clusters/kube/placed_pods.py),
        when a flavor has a topology at start (like the kinds, decided once: the watch is made for it)."""
        self.reflectors = {
            kind.kind: self._reflector(kind)
            for kind in self.kinds
            if not isinstance(kind, GatedKind) or kind.defines_workloads
        }
        if self.kinds.gated:
            # One watch of pods for every such kind, of the pods that name a queue: the pod webhook stamps kuota's
            # queue label on each pod it gates, so no other pod is held in memory.
            self.reflectors[PODS] = Reflector(
                api, GATED_POD, self.gated.pods_listed, self.gated.pod_event, label_selector=QUEUE_LABEL
            )
        self.nodes: NodeWatch | None = None
        """The nodes and the pods bound to them (clusters/kube/nodes.py), when the quota file turns node features
        on at start; like the kinds, this is decided once, since the RBAC and watches are made for it."""
        if config().watches_nodes:
            self.nodes = NodeWatch(self._node_changed, self._room_on_nodes)
            self.reflectors[NODE_REFLECTOR] = Reflector(api, NODES, self.nodes.nodes_listed, self.nodes.node_event)
            self.reflectors[BOUND_POD_REFLECTOR] = Reflector(
                api, BOUND_PODS, self.nodes.pods_listed, self.nodes.pod_event, field_selector=BOUND_POD_SELECTOR
            )
        if any(f.topology for f in config().flavors):
            self.placed_pods = PlacedPods(self)
            self.reflectors[PLACED_POD_REFLECTOR] = Reflector(
                api, GATED_POD, self.placed_pods.pods_listed, self.placed_pods.pod_event, label_selector=PLACED_POD_SET
            )
        self.referenced_kinds: dict[str, ReferencedKind] = {
            referenced.kind: referenced for kind in self.kinds for referenced in kind.referenced_kinds
        }
        """The kinds of the objects that enabled kinds read their pod sets from (a TrainJob's runtimes)."""
        for name, referenced in self.referenced_kinds.items():
            assert name not in self.reflectors, f"{name} is both a job kind and a kind job kinds refer to"
            self.reflectors[name] = self._referenced_reflector(referenced)
        self.referenced: dict[Reference, Obj] = {}
        """The latest body of every object of those kinds."""
        self.read_with: dict[str, dict[Reference, Obj]] = {}
        """For a submitted workload of such a kind, the objects it was read with (it is admitted with them)."""
        self.waiting: dict[str, tuple[JobKind, Obj]] = {}
        """Objects of such kinds that kuota manages but could not queue (their runtime is missing, say): read again
        when an object they refer to appears or changes."""
        self.not_queued: Callable[[str, str], None] | None = None
        """Told (workload key, reason) when one of those cannot be queued, once per reason."""
        self._watches = BackgroundTasks("kube watches")

    # -- life ---------------------------------------------------------------------------------------------------

    def _reflector(self, kind: JobKind) -> Reflector:
        """The list+watch of one kind, reporting to on_list and on_event with the kind."""

        def listed(items: list[Obj]) -> None:
            self.on_list(kind, items)

        def changed(event: str, obj: Obj) -> None:
            self.on_event(kind, event, obj)

        return Reflector(self.api, kind, listed, changed)

    def _referenced_reflector(self, kind: ReferencedKind) -> Reflector:
        """The list+watch of a kind that job kinds refer to, reporting to on_referenced_list and _event."""

        def listed(items: list[Obj]) -> None:
            self.on_referenced_list(kind, items)

        def changed(event: str, obj: Obj) -> None:
            self.on_referenced_event(kind, event, obj)

        return Reflector(self.api, kind, listed, changed)

    def attach(self, controller: Controller, loop: ControllerLoop | None) -> None:
        self.controller = controller
        self.loop = loop
        if self.nodes is not None:
            # The engine places on the live inventory: the manager binds each running workload's placement into it
            # (the pods of those workloads then step aside, clusters/kube/inventory.py) and each cycle copies it.
            controller.manager.nodes = self.nodes.inventory

    def start_watching(self) -> None:
        for name, reflector in self.reflectors.items():
            self._watches.start(reflector.run(), f"kuota-watch-{name}")

    async def stop(self) -> None:
        await asyncio.gather(self._watches.close(), self._calls.close())
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def settle(self, timeout_s: float = 5.0) -> None:
        """Wait for the API calls in flight (tests, shutdown)."""
        await self._calls.wait(timeout_s)

    def spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        self._calls.start(self._guard(coro, what), what)

    async def _guard(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("kube_call_failed", call=what, status=status_of(exc), error=str(exc)[:300])

    def wake(self) -> None:
        if self.loop is not None:
            self.loop.wake()

    # -- nodes --------------------------------------------------------------------------------------------------

    def _node_changed(self, node: str, ready: bool, since: int | None) -> None:
        if self.controller is not None:
            self.controller.node_changed(node, ready, self.clock(), since)

    def _room_on_nodes(self) -> None:
        if self.controller is not None:
            self.controller.room_on_nodes()
            self.wake()

    def workloads_on(self, node: str) -> frozenset[str]:
        if self.nodes is None:
            return frozenset()
        labels = self.nodes.workload_labels_on(node)
        if not labels:
            return frozenset()
        by_label = {workload_label_value(key): key for key in self.submitted}
        return frozenset(by_label[label] for label in labels if label in by_label)

    def node_inventory(self) -> NodeInventory | None:
        return self.nodes.inventory if self.nodes is not None else None

    # -- what the watch reports ---------------------------------------------------------------------------------

    def later(self, step: Callable[[], None]) -> None:
        """Run `step` once the current one is done (never inside a call from the controller)."""
        asyncio.get_running_loop().call_soon(step)

    def on_list(self, kind: JobKind, items: list[Obj]) -> None:
        """A full list of one kind (at start, or after 410 Gone): what is not in it was deleted meanwhile."""
        if isinstance(kind, GatedKind):
            self.gated.owners_listed(kind, items)
            return
        present = {object_key(kind, obj) for obj in items}
        prefix = f"{kind.kind}/"
        for key in [k for k in (*self.submitted, *self.waiting) if k.startswith(prefix)]:
            if key not in present:
                self.deleted(key)
        self.done = {k for k in self.done if not k.startswith(prefix) or k in present}
        for obj in items:
            self.observe(kind, obj)

    def on_event(self, kind: JobKind, event: str, obj: Obj) -> None:
        if isinstance(kind, GatedKind):
            self.gated.owner_event(kind, event, obj)
            return
        if event == "DELETED":
            key = object_key(kind, obj)
            self.done.discard(key)
            self.deleted(key)
        else:
            self.observe(kind, obj)

    def on_referenced_list(self, kind: ReferencedKind, items: list[Obj]) -> None:
        """A full list of a kind that job kinds refer to: what is not in it was deleted meanwhile."""
        fresh = {reference: obj for obj in items if (reference := kind.reference(obj)) is not None}
        for reference in [r for r in self.referenced if (r.group, r.kind) == (kind.group, kind.kind)]:
            if reference not in fresh:
                del self.referenced[reference]
        changed = {reference for reference, obj in fresh.items() if self.referenced.get(reference) != obj}
        self.referenced.update(fresh)
        self._read_waiting(changed)

    def on_referenced_event(self, kind: ReferencedKind, event: str, obj: Obj) -> None:
        reference = kind.reference(obj)
        if reference is None:
            return
        if event == "DELETED":
            self.referenced.pop(reference, None)  # queued objects keep what they were read with
            return
        self.referenced[reference] = obj
        self._read_waiting({reference})

    def resolve(self, reference: Reference) -> Obj | None:
        """An object that job kinds refer to, as last listed or watched; None while there is none."""
        return self.referenced.get(reference)

    def _read_waiting(self, changed: set[Reference]) -> None:
        """Read again the objects that wait for one of `changed`."""
        if not changed:
            return
        for kind, obj in list(self.waiting.values()):
            if changed.intersection(kind.references(obj)):
                self.observe(kind, obj)

    def _resolver(self, key: str) -> Resolve:
        """Looks up what the workload `key` was read with first, then what is there now."""
        seen = self.read_with.get(key, {})
        return lambda reference: seen[reference] if reference in seen else self.referenced.get(reference)

    def deleted(self, key: str) -> None:
        self._release(key)
        self.jobs.pop(key, None)
        self.waiting.pop(key, None)
        self.read_with.pop(key, None)
        self.unreadable.pop(key, None)
        self.suspending.discard(key)
        self.letting_end.discard(key)
        self.awaiting_ack.pop(key, None)
        if key in self.submitted:
            self.submitted.discard(key)
            if self.controller is not None:
                self.controller.job_deleted(key, self.clock())
            self.wake()

    def observe(self, kind: JobKind, obj: Obj) -> None:
        key = object_key(kind, obj)
        controller = self.controller
        if controller is None:
            return
        status = kind.status(obj)
        if status.finished is not None:
            self._let_end(kind, key, obj)
        if key not in self.submitted:
            if key in self.done or status.finished is not None:
                self.waiting.pop(key, None)
                return
            workload = self._workload(kind, key, obj)
            if workload is not None:
                self.submit(workload, obj)
                if workload.admission is not None:
                    self.report_ready(kind, key, obj)  # found running: its readiness now, not at its next change
                elif DEACTIVATED in job_annotations(obj):
                    controller.found_deactivated(key, str(job_annotations(obj)[DEACTIVATED]))
            return
        if self.progress(key, obj, status):
            self.suspended(key)
        elif status.finished is None:
            self.report_ready(kind, key, obj)

    def _let_end(self, kind: JobKind, key: str, obj: Obj) -> None:
        """Let an object that has ended for kuota reach its terminal state where it is held back from it (a Job
        suspended by an eviction that crossed its last pod's success: workloads/kinds/job.py), once."""
        if not kind.end_patch(obj):
            self.letting_end.discard(key)
            return
        if key in self.letting_end:
            return
        self.letting_end.add(key)
        log.info("job_let_end", job=key)
        self.spawn(self._patch(key, lambda current: kind.end_patch(current or obj)), f"let end {key}")

    def report_ready(self, kind: JobKind, key: str, obj: Obj) -> None:
        """Tell the controller how many of an admitted, running object's pods are ready (gang readiness)."""
        controller = self.controller
        if controller is None or not is_admitted_running(kind, obj):
            return
        controller.pods_reported(key, kind.ready_pods(obj), self.clock())
        if controller.dirty:
            self.wake()

    def progress(self, key: str, obj: Obj, status: Status) -> bool:
        """What a submitted workload's object says now: it finished (the controller is told), it answered a
        checkpoint request; True when it was being stopped and holds no pods any more (for the caller to tell)."""
        previous = self.jobs.get(key) or {}
        self.jobs[key] = obj
        if status.finished is not None:
            self.finished(key, status.finished)
            return False
        self.checkpoint_news(key, previous, obj)
        return key in self.suspending and status.stopped

    def submit(self, workload: Workload, obj: Obj) -> None:
        """Hand a workload seen for the first time to the controller; `obj` is what the later steps read."""
        self.jobs[workload.name] = obj
        self.submitted.add(workload.name)
        if self.controller is not None:
            self.controller.submit(workload, self.clock())
            self.wake()

    def suspended(self, key: str) -> None:
        """A stopped workload holds no pods any more: its quota is free."""
        self.suspending.discard(key)
        if self.controller is not None:
            self.controller.suspended(key, self.clock())
            self.wake()

    def with_admission(
        self, workload: Workload, flavor: str, assignment: Mapping[str, Assigned] | None = None
    ) -> Workload:
        """A workload found running under an admission kuota made, with that admission rebuilt from its
        `kuota.dev/admitted-flavor` annotation (and its placement on nodes from `kuota.dev/topology-assignment`,
        read into `assignment`), dated as the ledger says."""
        team = next((t for t in self.config().teams if t.name == workload.team), None)
        names = {p.name for p in workload.pod_sets}
        admission = Admission(
            flavors=decode_admission(flavor, workload.pod_sets, team),
            counts={p.name: p.count for p in workload.pod_sets},
            admitted_at=self.admitted_at.get(workload.name, self.clock()),
            placement={name: dict(a.placement.nodes) for name, a in (assignment or {}).items() if name in names},
        )
        return dataclasses.replace(workload, admission=admission)

    def finished(self, key: str, succeeded: bool) -> None:
        """A submitted workload has ended: told once, and not submitted again while its object stays."""
        self._release(key)
        self.submitted.discard(key)
        self.done.add(key)
        self.suspending.discard(key)
        self.awaiting_ack.pop(key, None)
        self.jobs.pop(key, None)
        self.read_with.pop(key, None)
        if self.controller is not None:
            self.controller.job_finished(key, self.clock(), succeeded)
            self.wake()

    def note_problems(self, key: str, kind: JobKind, problems: tuple[JobProblem, ...]) -> None:
        """Why an object kuota manages is not queued, logged once per reason (nothing when none); for a kind that
        reads referenced objects, `not_queued` is told too (nobody else can tell the user)."""
        if not problems:
            self.unreadable.pop(key, None)
        elif self.unreadable.get(key) != problems[0].message:
            self.unreadable[key] = problems[0].message
            log.warning("job_not_queued", job=key, problems=[p.message for p in problems])
            if kind.referenced_kinds and self.not_queued is not None:
                self.not_queued(key, problems[0].message)

    def checkpoint_news(self, key: str, previous: Mapping[str, Any], obj: Mapping[str, Any]) -> None:
        """The job's answer to a checkpoint request, or a checkpoint it reports on its own, from its annotations."""
        controller = self.controller
        if controller is None:
            return
        annotations = job_annotations(obj)
        completed = annotations.get(CHECKPOINT_COMPLETED_AT)
        now = self.clock()
        if key in self.awaiting_ack and completed and completed != self.awaiting_ack[key]:
            self.awaiting_ack.pop(key)
            controller.checkpoint_acked(key, annotations.get(CHECKPOINT_ID) or None, now)
            self.wake()
        elif completed and completed != job_annotations(previous).get(CHECKPOINT_COMPLETED_AT):
            controller.checkpoint_reported(key, now, annotations.get(CHECKPOINT_ID) or None)

    def _workload(self, kind: JobKind, key: str, obj: Obj) -> Workload | None:
        config = self.config()
        conversion = convert(kind, obj, config, resolve=self.resolve)
        workload = conversion.workload
        if workload is None and conversion.problems and kind.referenced_kinds:
            self.waiting[key] = (kind, obj)  # before the NotQueued Event, which reads its uid from here
        else:
            self.waiting.pop(key, None)
        self.note_problems(key, kind, conversion.problems)
        if workload is None:
            return None
        if kind.referenced_kinds:
            self.read_with[key] = {r: found for r in kind.references(obj) if (found := self.resolve(r)) is not None}
        flavor = job_annotations(obj).get(ADMITTED_FLAVOR)
        team = next((t for t in config.teams if t.name == workload.team), None)
        suspended = kind.is_suspended(obj)
        earlier = read_assignment(job_annotations(obj))
        if flavor and not suspended:
            if self.placed_pods is not None:  # its gated pods (made after a restart) go where they were counted
                self.placed_pods.place(key, {name: a.placement for name, a in earlier.items()})
            return self.with_admission(workload, flavor, earlier)
        if flavor:
            # Requeued after a preemption: the selectors still hold the last flavors' labels and the domain it was
            # pinned to, which must not pin the workload to those flavors or that domain from now on.
            used = decode_admission(flavor, workload.pod_sets, team)
            pod_sets = []
            for pod_set in workload.pod_sets:
                stale = flavor_labels(config, used.get(pod_set.name, {}).values())
                selector = {k: v for k, v in pod_set.node_selector.items() if k not in stale}
                selector = without_pin(selector, earlier.get(pod_set.name))
                pod_sets.append(dataclasses.replace(pod_set, node_selector=selector))
            return dataclasses.replace(workload, pod_sets=tuple(pod_sets))
        if not suspended:
            # Running without an admission (created while the webhooks were away): stop it and queue it.
            log.warning("job_running_unadmitted", job=key)
            self.suspending.discard(key)
            self.spawn(self._patch(key, lambda current: kind.stop_patch(current or obj)), f"suspend unadmitted {key}")
        return workload

    # -- Cluster: what the controller decides -------------------------------------------------------------------

    def admit(
        self,
        workload: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        counts: Mapping[str, int],
        resume_from: str | None,
    ) -> None:
        key = workload.name
        if self.gated.owns(key):
            self.gated.admit(workload, flavors, resume_from)
            return
        kind = self._kind(key)
        config = self.config()
        annotations = admission_annotations(key, flavors, resume_from)
        # The engine's node counts, with the domain each pod set's nodes share (their labels, known now).
        placed = assignment_of(
            config, flavors, workload.admission.placement if workload.admission else {}, self.node_inventory()
        )

        resolve = self._resolver(key)
        # Pod sets placed node by node are admitted behind kuota's scheduling gate, and their pods let go one by one
        # onto the nodes counted (clusters/kube/placed_pods.py); one whose name is no label value cannot be told
        # apart by its pods' label, and is pinned to its domain only.
        gated = {name: p for name, p in placed.items() if self.placed_pods is not None and is_label_value(name)}

        def run_patch(current: Obj | None) -> JSONPatch:
            obj = current if current is not None else (self.jobs.get(key) or {})
            labels = {WORKLOAD_LABEL: workload_label_value(key)}
            earlier = read_assignment(job_annotations(obj))
            assigned: dict[str, Assigned] = {}
            where = {}
            for name, placement in placements(kind, obj, config, flavors, counts, resolve).items():
                selector = without_pin(placement.node_selector, earlier.get(name))
                if name in placed:
                    # Pinned to its domain; inside it the kube-scheduler picks the nodes.
                    selector, added = pin_to_domain(selector, placed[name])
                    assigned[name] = Assigned(placed[name], added)
                where[name] = dataclasses.replace(placement, node_selector=selector, labels=labels, gated=name in gated)
            missing = [p.name for p in workload.pod_sets if p.name not in where]
            if missing:
                # Letting it run would start those pods on no flavor's nodes: the admission fails instead.
                raise Unplaceable(f"{key}: pod sets {', '.join(missing)} are not in the object as it reads now")
            ops = kind.run_patch(obj, where)
            return annotation_ops(obj, {**annotations, TOPOLOGY_ASSIGNMENT: encode_assignment(assigned)}) + ops

        self.suspending.discard(key)
        if self.placed_pods is not None:
            self.placed_pods.place(key, gated)
        self.spawn(self._admit(key, run_patch), f"admit {key}")

    def request_checkpoint(self, workload: Workload, deadline: int, reason: str, preemptor: str | None) -> str:
        key = workload.name
        annotations = job_annotations(self.jobs.get(key) or {})
        self.awaiting_ack[key] = annotations.get(CHECKPOINT_COMPLETED_AT)
        url = annotations.get(CHECKPOINT_URL)
        if isinstance(url, str) and url.strip().startswith(("http://", "https://")):
            self.spawn(self._post_checkpoint(key, url.strip(), deadline, reason), f"checkpoint hook {key}")
            return "url"
        self.spawn(self._ask_by_annotation(key), f"checkpoint annotation {key}")
        return "annotation"

    def suspend(self, workload: Workload) -> None:
        key = workload.name
        self.awaiting_ack.pop(key, None)
        if self.gated.owns(key):
            self.gated.stop(key)
            return
        self.suspending.add(key)
        self._release(key)
        kind = self._kind(key)
        self.spawn(
            self._patch(key, lambda current: kind.stop_patch(current or self.jobs.get(key) or {})), f"suspend {key}"
        )

    def mark_deactivated(self, workload: Workload, message: str | None) -> None:
        key = workload.name
        if self.gated.owns(key):
            return  # no object of its own to carry the mark (its kind never reports readiness either)
        self.spawn(self._patch(key, {"metadata": {"annotations": {DEACTIVATED: message}}}), f"deactivation {key}")

    def last_checkpoint_at(self, workload: Workload) -> int | None:
        stamp = parse_time(job_annotations(self.jobs.get(workload.name) or {}).get(CHECKPOINT_COMPLETED_AT))
        return epoch_ms(stamp) if stamp is not None else None

    # -- the calls ----------------------------------------------------------------------------------------------

    def involved(self, key: str) -> dict[str, str | None] | None:
        """The object Events about a workload go on, when it is not the object its key names: a LeaderWorkerSet
        group's set, a plain pod or the first pod of a pod group (None otherwise, and while none is known)."""
        if not self.gated.owns(key):
            return None
        group = self.gated.groups.group(key)
        if group is None:
            return None
        kind = self.gated.kind(key)
        pods = sorted(group.pods, key=pod_name)
        target = group.owner if group.owner is not None else (pods[0] if pods else None)
        if target is None:
            return None
        metadata = target.get("metadata") or {}
        noun: JobKind = kind if group.owner is not None else GATED_POD
        return {
            "apiVersion": noun.api_version,
            "kind": noun.kind,
            "namespace": group.namespace,
            "name": str(metadata.get("name")),
            "uid": metadata.get("uid"),
        }

    def _release(self, key: str) -> None:
        """No gated pod of the workload is let go any more (it was stopped, ended or went)."""
        if self.placed_pods is not None:
            self.placed_pods.release(key)

    def _kind(self, key: str) -> JobKind:
        name = split_key(key)[0]
        kind = self.kinds.for_workload(name)
        if kind is None:
            raise KeyError(f"{key}: kind {name} is not enabled")
        return kind

    async def _patch(self, key: str, patch: Obj | Callable[[Obj | None], JSONPatch]) -> None:
        _, namespace, name = split_key(key)
        kind = self._kind(key)
        try:
            await self.api.patch_object(kind, namespace, name, patch)
            self.patches += 1
        except NotFound:
            log.info("job_gone_before_patch", job=key)
            self.deleted(key)

    async def _admit(self, key: str, patch: Callable[[Obj | None], JSONPatch]) -> None:
        """The run patch; when the API server refuses it for good (the client has retried what can be retried),
        the admission is undone so the quota it holds is not lost."""
        if key not in self.submitted:
            # It ended (or was deleted) between the decision and this call, typically a requeued Job whose last pod
            # completed as it was being suspended: the controller was told and gave its quota back; nothing to run.
            log.info("admission_dropped_job_ended", job=key)
            return
        try:
            await self._patch(key, patch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("admission_failed", job=key, status=status_of(exc), error=str(exc)[:300])
            self._release(key)
            if self.controller is not None and key in self.submitted:
                self.controller.admission_failed(key, self.clock())
                self.wake()

    async def _ask_by_annotation(self, key: str) -> None:
        if self.gated.owns(key):
            self.gated.ask_for_checkpoint(key)
            return
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
                            self.wake()
                        elif checkpoint is None:
                            await self._ask_by_annotation(key)  # accepted; the id comes through the annotations
                        return
                    log.info("checkpoint_hook_refused", job=key, status=response.status)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.info("checkpoint_hook_failed", job=key, error=str(exc)[:200])
            await asyncio.sleep(min(delay, max(0.0, (deadline - self.clock()) / 1000)))
            delay = min(delay * 2, 5.0)
