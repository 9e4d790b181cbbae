"""The one interface every kind of job implements, and what the framework needs from it.

A kind answers, for an object of its kind as the API server sends it (plain JSON mappings): where its pod templates
are and how many pods each runs at once (its pod sets), whether it is waiting, which JSON patch lets it run with an
admission (per pod set: node selector, tolerations, and the count where partial admission lowered it), which patch
stops it, and whether it has finished. Everything else (queue, priority, checkpoint URL, requests, never-fits) is
the framework's and the same for every kind. Kinds are pure and synchronous: the webhooks and the cluster adapter
call them on the request path and inside the controller's watch.

Most operators define a boolean that holds their object back (`spec.suspend`, `spec.runPolicy.suspend`):
`SuspendFieldKind` is that mechanism once, so such a kind only says where its switch and templates are.

A few kinds keep their pod templates in another object they name (a TrainJob runs the JobSet template of the
training runtime in its `spec.runtimeRef`). Such a kind lists the kinds it refers to (`referenced_kinds`), says
which objects one of its objects refers to (`references`), and reads its templates with those objects looked up
(`resolved_templates`, given a `Resolve`); its plain `templates` says what the object alone tells. Whoever reads
it supplies the lookup: the cluster adapter watches the referenced kinds; the webhooks have no lookup, and read
what they can from the object alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from admission.labels import PLACED_POD_SET, SCHEDULING_GATE
from workloads.problems import JobProblem, JobProblemKind, not_a, short
from workloads.quantities import is_map, mapping

JSONPatch = list[dict[str, Any]]
Path = tuple[str | int, ...]
"""A location in an object as keys and list indexes, e.g. ("spec", "replicatedJobs", 0, "template")."""


def pointer(path: Path) -> str:
    """An RFC 6901 JSON pointer to `path`."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def dotted(path: Path) -> str:
    """`path` as messages spell it: spec.replicatedJobs[0].template."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@dataclass(frozen=True, slots=True)
class Reference:
    """Another object that an object's pod sets are read from (a TrainJob's training runtime)."""

    group: str
    kind: str
    namespace: str | None
    """None for a cluster-scoped object."""
    name: str

    def __str__(self) -> str:
        """As messages name it: `ClusterTrainingRuntime torch-distributed`, `TrainingRuntime ml/torch-init`."""
        return f"{self.kind} {self.name}" if self.namespace is None else f"{self.kind} {self.namespace}/{self.name}"


Resolve = Callable[[Reference], Mapping[str, Any] | None]
"""Looks a referenced object up: its body as the API server sends it, or None while it does not exist."""


@dataclass(frozen=True, slots=True)
class ReferencedKind:
    """A kind of object that objects of some job kind refer to: what the cluster adapter lists and watches for it."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def noun(self) -> str:
        return f"{self.group}/{self.version} {self.kind}"

    def reference(self, obj: Any) -> Reference | None:
        """The reference naming `obj`, an object of this kind as the API server lists it (None if it has no name)."""
        metadata = mapping(mapping(obj).get("metadata"))
        name, namespace = metadata.get("name"), metadata.get("namespace")
        if not isinstance(name, str) or not name:
            return None
        if not self.namespaced:
            return Reference(self.group, self.kind, None, name)
        if not isinstance(namespace, str) or not namespace:
            return None
        return Reference(self.group, self.kind, namespace, name)


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod set of an object, where it is and how many pods it runs at once."""

    name: str
    """The pod set's name, unique in the object (Kueue's names where Kueue has them: `main`, replica types...)."""
    path: Path
    """Where the PodSpec is: the run patch writes below it, messages quote it."""
    spec: Mapping[str, Any]
    count: int
    scaled: Path | None = None
    """The count field kuota may lower to admit fewer pods (partial admission); None: all pods or none."""
    source: Reference | None = None
    """The object the PodSpec was read from when it is not the object itself (`path` is then a path in it)."""

    @property
    def where(self) -> str:
        """The PodSpec's place as messages quote it, naming the object it is in when that is another one."""
        return dotted(self.path) if self.source is None else f"{self.source} {dotted(self.path)}"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an admitted pod set runs: the whole node selector and toleration list to set, and its count."""

    node_selector: Mapping[str, str]
    tolerations: Sequence[Mapping[str, Any]]
    count: int | None = None
    """Set when partial admission admitted fewer pods than the pod set asks for."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels the pods get (kuota's `kuota.dev/workload`), set on the pod template's metadata."""
    gated: bool = False
    """Whether the pods wait behind kuota's scheduling gate, to be let go one by one onto the nodes of a placement
    (a pod set placed node by node by a topology): the template gets the gate and the `kuota.dev/placed-pod-set`
    label naming its pod set; when False, a template keeps neither (an earlier admission's are taken away)."""


@dataclass(frozen=True, slots=True)
class Status:
    """What the cluster adapter needs from an object's status."""

    finished: bool | None = None
    """True when it succeeded, False when it failed, None while it has not finished."""
    finished_at: datetime | None = None
    stopped: bool = False
    """Stopped and holding no pods (after the stop patch): its quota can go to someone else."""


class JobKind(ABC):
    """A kind of job kuota queues. Subclasses set the class attributes and implement the abstract methods."""

    group: ClassVar[str]
    version: ClassVar[str]
    kind: ClassVar[str]
    plural: ClassVar[str]
    partial_admission: ClassVar[bool] = False
    """Whether some pod set can start with fewer pods (its template names `scaled`)."""
    referenced_kinds: ClassVar[tuple[ReferencedKind, ...]] = ()
    """The kinds of the other objects that objects of this kind read their pod sets from (none for most kinds)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def noun(self) -> str:
        """How messages name an object of this kind (`batch/v1 Job`)."""
        return f"{self.api_version} {self.kind}"

    @property
    def held_by(self) -> str:
        """What holds a waiting object back, as users set it (`spec.suspend: true`)."""
        return "kuota's hold"

    @property
    def count_fields(self) -> str:
        """What sets how many pods the object runs at once, for messages."""
        return "its pod counts"

    @abstractmethod
    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        """The pod templates of an object whose `spec` is given, with a problem for each part of the wrong type."""

    @abstractmethod
    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        """Held back from running: what the webhook makes every new object and what only kuota may undo."""

    @abstractmethod
    def suspend_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        """The JSON patch that makes a new object wait (empty when it already does)."""

    @abstractmethod
    def run_patch(self, obj: Mapping[str, Any], placements: Mapping[str, Placement]) -> JSONPatch:
        """The JSON patch that lets an admitted object run where `placements` says, per pod set name."""

    @abstractmethod
    def stop_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        """The JSON patch that stops a running object (a victim of preemption) so that its pods go away."""

    @abstractmethod
    def status(self, obj: Mapping[str, Any]) -> Status:
        """Finished or not, and stopped or not, from the object's status."""

    def end_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        """For an object that has finished for kuota (`status`) but is held back where its operator cannot give it
        its terminal state, the JSON patch that lets it get there; empty for most kinds and states (a batch/v1 Job
        suspended after its success was decided is completed only once it runs again)."""
        return []

    def ready_pods(self, obj: Mapping[str, Any]) -> int | None:
        """How many of a running object's pods are ready (or already done) as its status reports them, for gang
        readiness (waitForPodsReady); None when the kind's status does not say, which kuota takes as ready."""
        return None

    def pod_labels_patch(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> JSONPatch:
        """Ops that copy kuota's labels as the mutating webhook leaves them on the object (queue, priority class)
        to where the kind's pods take their labels from. None for a kind held back as a whole object; a kind
        whose pods are held one by one (a LeaderWorkerSet) puts them on its pod templates, so that its pods name
        their queue to the pod webhook."""
        return []

    def metadata_problems(self, labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> list[JobProblem]:
        """What is wrong with the kind's own labels and annotations (a pod group's name and size)."""
        return []

    def hold_problem(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
        """Why this create (`old` None) or update by someone other than kuota would let pods past kuota's hold
        in a way only this kind has, as a denial message; None when it would not."""
        return None

    def references(self, obj: Mapping[str, Any], namespace: str | None = None) -> tuple[Reference, ...]:
        """The other objects whose content `obj`'s pod sets are read from; none for most kinds.

        `namespace` is the object's namespace where its body does not say (a CREATE review may not).
        """
        return ()

    def resolved_templates(
        self,
        obj: Mapping[str, Any],
        spec: Mapping[str, Any],
        problems: list[JobProblem],
        resolve: Resolve,
        namespace: str | None = None,
    ) -> list[PodTemplate]:
        """The pod templates of `obj` (whose `spec` is given) with the objects it references looked up by `resolve`.

        A kind with references reads them here, with a problem for each it cannot find; every other kind's
        templates are its `templates`.
        """
        return self.templates(spec, problems)

    def read_templates(self, obj: Any, resolve: Resolve | None = None) -> list[PodTemplate]:
        """The templates of `obj`, problems ignored: for objects the webhooks already let through.

        Without `resolve`, a kind whose pod sets live in objects it references has none.
        """
        spec = mapping(mapping(obj).get("spec"))
        if resolve is None:
            return self.templates(spec, [])
        return self.resolved_templates(mapping(obj), spec, [], resolve)

    def pod_count(self, obj: Any, resolve: Resolve | None = None) -> int:
        """Pods the object runs at once, across all its pod sets."""
        return sum(t.count for t in self.read_templates(obj, resolve))


# -- reading helpers kinds share ------------------------------------------------------------------------------------


def pod_spec_at(container: Any, path: Path, problems: list[JobProblem], noun: str) -> Mapping[str, Any] | None:
    """The PodSpec under `container` (which is at `path[:-2]`) at its `template.spec`, or None with a problem.

    `path` is the PodSpec's own full path; its two last parts are the template's key and `spec` (`template`,
    `spec` in most kinds; `workerTemplate`, `spec` in a LeaderWorkerSet).
    """
    template = container.get(str(path[-2])) if is_map(container) else None
    if not is_map(template):
        problems.append(not_a("an object", dotted(path[:-1]), noun))
        return None
    pod = template.get("spec")
    if not is_map(pod):
        problems.append(not_a("an object", dotted(path), noun))
        return None
    selector = pod.get("nodeSelector")
    if selector is not None and not (is_map(selector) and all(isinstance(v, str) for v in selector.values())):
        problems.append(not_a("a map of strings", dotted((*path, "nodeSelector")), noun))
    return pod


def whole_number(value: Any, path: Path, problems: list[JobProblem], default: int) -> int:
    """A count field: a whole number of 0 or more, else a problem (and the default, so reading goes on)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        where = dotted(path)
        problems.append(
            JobProblem(
                JobProblemKind.INVALID_FIELD,
                where,
                f"{where} is {short(value)}; set it to a whole number of pods (0 or more)",
            )
        )
        return default
    return value


def condition_true(obj: Mapping[str, Any], *types: str) -> str | None:
    """The first of `types` whose condition is True in `status.conditions`, or None."""
    for condition in _conditions(obj):
        if condition.get("status") == "True" and condition.get("type") in types:
            return str(condition["type"])
    return None


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    conditions = mapping(obj.get("status")).get("conditions")
    if not isinstance(conditions, list):
        return []
    return [c for c in conditions if is_map(c)]


def condition_time(obj: Mapping[str, Any], *types: str) -> datetime | None:
    """When the first True condition of `types` last changed."""
    for condition in _conditions(obj):
        if condition.get("status") == "True" and condition.get("type") in types:
            return parse_time(condition.get("lastTransitionTime"))
    return None


def count_of(value: object) -> int:
    """A non-negative count from a status field (0 when absent or not a whole number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def parse_time(raw: object) -> datetime | None:
    """An RFC 3339 time as Kubernetes writes it, None when there is none or it does not read."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def value_at(obj: Any, path: Path) -> Any:
    """The value at `path`, None where any step is missing or of the wrong type."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(obj, list) or part >= len(obj):
                return None
            obj = obj[part]
        elif is_map(obj):
            obj = obj.get(part)
        else:
            return None
    return obj


def set_ops(obj: Mapping[str, Any], path: Path, value: Any) -> JSONPatch:
    """JSON patch ops that set `path` to `value`, adding the maps on the way that the object lacks."""
    for depth in range(len(path) - 1):
        if not is_map(value_at(obj, path[: depth + 1])):
            # Build the rest as one nested value, added where the object stops.
            nested: Any = value
            for part in reversed(path[depth + 1 :]):
                nested = {part: nested}
            return [{"op": "add", "path": pointer(path[: depth + 1]), "value": nested}]
    parent = value_at(obj, path[:-1])
    # "add" would replace a member that is there too; "replace" says so, and fails if the member went meanwhile.
    op = "replace" if is_map(parent) and path[-1] in parent else "add"
    return [{"op": op, "path": pointer(path), "value": value}]


def label_ops(obj: Mapping[str, Any], at: Path, labels: Mapping[str, str]) -> JSONPatch:
    """JSON patch ops that set `labels` in the metadata of the object at `at` (a pod template, or the pod itself
    at `()`), adding the maps it lacks and keeping its other labels."""
    metadata = value_at(obj, (*at, "metadata"))
    if not is_map(metadata):
        return [{"op": "add", "path": pointer((*at, "metadata")), "value": {"labels": dict(labels)}}]
    existing = metadata.get("labels")
    if not is_map(existing):
        return [{"op": "add", "path": pointer((*at, "metadata", "labels")), "value": dict(labels)}]
    return [
        {
            "op": "replace" if key in existing else "add",
            "path": pointer((*at, "metadata", "labels", key)),
            "value": value,
        }
        for key, value in labels.items()
    ]


def gate_ops(obj: Mapping[str, Any], template: PodTemplate, gated: bool) -> JSONPatch:
    """JSON patch ops that give a pod template kuota's scheduling gate (`gated`) or take it away, keeping every
    other gate: a template is admitted gated onto one placement and may be admitted ungated after a requeue."""
    existing = mapping(template.spec).get("schedulingGates")
    gates = (
        [g for g in existing if not (is_map(g) and g.get("name") == SCHEDULING_GATE)]
        if isinstance(existing, list)
        else []
    )
    wanted = [*gates, {"name": SCHEDULING_GATE}] if gated else gates
    if isinstance(existing, list) and existing == wanted:
        return []
    if not isinstance(existing, list) and not wanted:
        return []
    where = pointer((*template.path, "schedulingGates"))
    return [{"op": "add", "path": where, "value": wanted}] if wanted else [{"op": "remove", "path": where}]


class SuspendFieldKind(JobKind):
    """A kind whose operator holds an object back while a boolean is true (`suspend_path`)."""

    suspend_path: ClassVar[Path] = ("spec", "suspend")
    succeeded: ClassVar[tuple[str, ...]] = ()
    """Condition types that mean it finished well."""
    failed: ClassVar[tuple[str, ...]] = ()
    suspended_condition: ClassVar[str | None] = "Suspended"
    """The condition the operator sets once a suspended object holds no pods, if it has one."""

    @property
    def held_by(self) -> str:
        return f"{dotted(self.suspend_path)}: true"

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return value_at(obj, self.suspend_path) is True

    def suspend_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        if self.is_suspended(obj):
            return []
        return set_ops(obj, self.suspend_path, True)

    def stop_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        return set_ops(obj, self.suspend_path, True)

    def run_patch(self, obj: Mapping[str, Any], placements: Mapping[str, Placement]) -> JSONPatch:
        ops: JSONPatch = []
        for template in self.read_templates(obj):
            placement = placements.get(template.name)
            if placement is None:
                continue
            ops.append(
                {"op": "add", "path": pointer((*template.path, "nodeSelector")), "value": dict(placement.node_selector)}
            )
            if placement.tolerations:
                ops.append(
                    {
                        "op": "add",
                        "path": pointer((*template.path, "tolerations")),
                        "value": list(placement.tolerations),
                    }
                )
            if placement.count is not None and template.scaled is not None and placement.count != template.count:
                ops.append({"op": "add", "path": pointer(template.scaled), "value": placement.count})
            if template.path[-1:] == ("spec",):
                # The PodSpec's parent is the PodTemplateSpec, whose metadata the pods are made with.
                ops.extend(gate_ops(obj, template, placement.gated))
                labels = {**placement.labels, **({PLACED_POD_SET: template.name} if placement.gated else {})}
                if labels:
                    ops.extend(label_ops(obj, template.path[:-1], labels))
                if not placement.gated and PLACED_POD_SET in mapping(
                    value_at(obj, (*template.path[:-1], "metadata", "labels"))
                ):
                    ops.append(
                        {"op": "remove", "path": pointer((*template.path[:-1], "metadata", "labels", PLACED_POD_SET))}
                    )
        ops.extend(set_ops(obj, self.suspend_path, False))
        return ops

    def status(self, obj: Mapping[str, Any]) -> Status:
        done = condition_true(obj, *self.succeeded, *self.failed)
        if done is not None:
            return Status(done in self.succeeded, condition_time(obj, done), stopped=True)
        stopped = self.is_suspended(obj) and (
            (self.suspended_condition is not None and condition_true(obj, self.suspended_condition) is not None)
            or self.active_pods(obj) == 0
        )
        return Status(stopped=stopped)

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """Pods the operator reports as running (0 when the status says nothing)."""
        return 0
