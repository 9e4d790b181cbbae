"""TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2): the pod sets of the training runtime it names.

A TrainJob has no pod templates of its own. `spec.runtimeRef` names a ClusterTrainingRuntime (the default kind) or
a TrainingRuntime of the TrainJob's namespace, whose `spec.template` is a JobSet template; the trainer runs a JobSet
built from it, and each replicated job is a pod set named after it (as Kueue names them), the whole TrainJob one
gang. What the trainer changes in that template is read the way it changes it (kubeflow/trainer's pkg/runtime/core
and its ML-policy plugins):

* pods: a replicated job runs `replicas` × `parallelism` pods (1 each when absent). The trainer step, the replicated
  job labelled `trainer.kubeflow.org/trainjob-ancestor-step: trainer`, runs one replica of the runtime's
  `mlPolicy.numNodes` pods (1 when absent); the dataset and model initializer steps run one replica.
  `spec.trainer.numNodes` overrides the count of the first trainer step or, in an MPI runtime, of the replicated
  job named `node` (one fewer, at least 1, with `runLauncherAsNode`: the launcher is a node too);
* requests: `spec.trainer.resourcesPerNode` is laid over the resources of the container named `node` of the trainer
  step (and of the `node` job of an MPI runtime with `runLauncherAsNode`), requests and limits resource by resource;
* `spec.runtimePatches`: each manager's patch is merged in list order. Their schema has no resources and no counts;
  what kuota reads of them is where pods may go (the node selector, merged key by key; tolerations, replaced) and
  the job templates' labels (which can make a replicated job the trainer step).

The runtime is looked up by whoever reads (`Resolve`): one that does not exist (yet) is a problem that keeps the
TrainJob out of the queue until it appears. The trainer copies a runtime into a snapshot when it first handles a
TrainJob and runs the TrainJob from that copy, while kuota reads the runtime as it is when it reads the TrainJob.

Admitting writes kuota's own runtime patch (manager `kuota.dev/manager`, moved last so that it is merged last): per
pod set, the node selector and tolerations of its flavor and the pods' labels (kuota's `kuota.dev/workload`; for a pod
set placed node by node, kuota's scheduling gate and `kuota.dev/placed-pod-set` too), in the same request as
`spec.suspend: false`, which the
trainer accepts because the TrainJob was suspended before it. The trainer reports the end with the `Complete` and
`Failed` conditions. Its `Suspended` condition follows `spec.suspend` at once, so a suspended TrainJob counts as
stopped only once its child jobs report none active.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

from admission.labels import PLACED_POD_SET, SCHEDULING_GATE
from workloads.kind import (
    JSONPatch,
    Path,
    Placement,
    PodTemplate,
    Reference,
    ReferencedKind,
    Resolve,
    SuspendFieldKind,
    dotted,
    pod_spec_at,
    pointer,
    set_ops,
    value_at,
    whole_number,
)
from workloads.problems import JobProblem, JobProblemKind, not_a, short
from workloads.quantities import is_map, mapping, quantity

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
TRAINING_RUNTIME = ReferencedKind(GROUP, VERSION, "TrainingRuntime", "trainingruntimes", namespaced=True)
CLUSTER_TRAINING_RUNTIME = ReferencedKind(
    GROUP, VERSION, "ClusterTrainingRuntime", "clustertrainingruntimes", namespaced=False
)
_RUNTIMES = {k.kind: k for k in (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)}

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
INITIALIZER_STEPS = frozenset({"dataset-initializer", "model-initializer"})
NODE = "node"
"""The trainer's name for the training container, and for the replicated job of an MPI runtime's nodes."""

MANAGER = "kuota.dev/manager"
"""The manager of kuota's entry in `spec.runtimePatches`."""

_PATCHES: Path = ("spec", "runtimePatches")
_NOT_SET = -1


class _JobPatch(NamedTuple):
    """What one manager's runtime patch says of one replicated job, in the parts kuota reads (None: not said)."""

    labels: Mapping[str, Any] | None
    node_selector: Mapping[str, Any] | None
    tolerations: list[Any] | None


class _Own(NamedTuple):
    """What the TrainJob itself says, each part type-checked once."""

    runtime: ReferencedKind | None
    runtime_name: str | None
    num_nodes: int | None
    resources: dict[str, dict[str, Any]]
    """`spec.trainer.resourcesPerNode`'s requests and limits, the quantities that read."""
    patches: dict[str, list[_JobPatch]]
    """Every other manager's patch by replicated job name, in list order."""


class TrainJobKind(SuspendFieldKind):
    group: ClassVar[str] = GROUP
    version: ClassVar[str] = VERSION
    kind: ClassVar[str] = "TrainJob"
    plural: ClassVar[str] = "trainjobs"
    succeeded: ClassVar[tuple[str, ...]] = ("Complete",)
    failed: ClassVar[tuple[str, ...]] = ("Failed",)
    suspended_condition: ClassVar[str | None] = None
    referenced_kinds: ClassVar[tuple[ReferencedKind, ...]] = (TRAINING_RUNTIME, CLUSTER_TRAINING_RUNTIME)

    @property
    def count_fields(self) -> str:
        return "spec.trainer.numNodes"

    # -- reading -------------------------------------------------------------------------------------------------

    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        # The object alone: its own parts are checked, and its pod templates are in the runtime.
        self._own(spec, problems)
        return []

    def references(self, obj: Mapping[str, Any], namespace: str | None = None) -> tuple[Reference, ...]:
        runtime, name = self._runtime_ref(mapping(mapping(obj).get("spec")).get("runtimeRef"), [])
        found = _runtime_reference(runtime, name, _namespace(obj, namespace))
        return () if found is None else (found,)

    def resolved_templates(
        self,
        obj: Mapping[str, Any],
        spec: Mapping[str, Any],
        problems: list[JobProblem],
        resolve: Resolve,
        namespace: str | None = None,
    ) -> list[PodTemplate]:
        own = self._own(spec, problems)
        namespace = _namespace(obj, namespace)
        reference = _runtime_reference(own.runtime, own.runtime_name, namespace)
        if reference is None:
            return []  # its problem is said already (or, without a namespace, by the reader)
        runtime = resolve(reference)
        if runtime is None:
            metadata = mapping(obj.get("metadata"))
            name = metadata.get("name") or metadata.get("generateName")
            problems.append(
                JobProblem(
                    JobProblemKind.UNKNOWN_REFERENCE,
                    "spec.runtimeRef.name",
                    f"TrainJob {namespace}/{name}: its runtime {reference.kind} {reference.name} is not known (yet); "
                    "ask your cluster admin to create it (kuota queues the TrainJob once it exists), or submit the "
                    "TrainJob again naming an existing runtime in spec.runtimeRef",
                )
            )
            return []
        found: list[JobProblem] = []
        out = _runtime_templates(reference, runtime, own, found)
        # The runtime's problems are said at their place in the runtime.
        problems.extend(JobProblem(p.kind, f"{reference} {p.field}", f"{reference} {p.message}") for p in found)
        return out

    def _own(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> _Own:
        runtime, name = self._runtime_ref(spec.get("runtimeRef"), problems)
        num_nodes, resources = self._trainer(spec.get("trainer"), problems)
        return _Own(runtime, name, num_nodes, resources, self._patches(spec.get("runtimePatches"), problems))

    def _runtime_ref(self, ref: Any, problems: list[JobProblem]) -> tuple[ReferencedKind | None, str | None]:
        if not is_map(ref):
            problems.append(not_a("an object", "spec.runtimeRef", self.noun))
            return None, None
        name = ref.get("name")
        if not isinstance(name, str) or not name:
            problems.append(not_a("a non-empty string", "spec.runtimeRef.name", self.noun))
            name = None
        group = ref.get("apiGroup")
        if group is not None and not isinstance(group, str):
            problems.append(not_a("a string", "spec.runtimeRef.apiGroup", self.noun))
            return None, name
        if group not in (None, GROUP):
            problems.append(
                JobProblem(
                    JobProblemKind.INVALID_FIELD,
                    "spec.runtimeRef.apiGroup",
                    f"spec.runtimeRef.apiGroup is {short(group)}, which is not the group of training runtimes; "
                    f"set it to {GROUP} (or leave it out)",
                )
            )
            return None, name
        kind = ref.get("kind")
        if kind is not None and not isinstance(kind, str):
            problems.append(not_a("a string", "spec.runtimeRef.kind", self.noun))
            return None, name
        runtime = _RUNTIMES.get(kind if kind is not None else CLUSTER_TRAINING_RUNTIME.kind)
        if runtime is None:
            problems.append(
                JobProblem(
                    JobProblemKind.INVALID_FIELD,
                    "spec.runtimeRef.kind",
                    f"spec.runtimeRef.kind is {short(kind)}, which is not a kind of training runtime; set it to "
                    "ClusterTrainingRuntime or TrainingRuntime (or leave it out for a ClusterTrainingRuntime)",
                )
            )
        return runtime, name

    def _trainer(self, trainer: Any, problems: list[JobProblem]) -> tuple[int | None, dict[str, dict[str, Any]]]:
        if trainer is None:
            return None, {}
        if not is_map(trainer):
            problems.append(not_a("an object", "spec.trainer", self.noun))
            return None, {}
        nodes = whole_number(trainer.get("numNodes"), ("spec", "trainer", "numNodes"), problems, _NOT_SET)
        resources: dict[str, dict[str, Any]] = {}
        per_node = trainer.get("resourcesPerNode")
        if per_node is not None and not is_map(per_node):
            problems.append(not_a("an object", "spec.trainer.resourcesPerNode", self.noun))
        elif per_node is not None:
            for part in ("requests", "limits"):
                values = per_node.get(part)
                if values is None:
                    continue
                where = f"spec.trainer.resourcesPerNode.{part}"
                if not is_map(values):
                    problems.append(not_a("an object", where, self.noun))
                    continue
                resources[part] = {
                    str(resource): raw
                    for resource, raw in values.items()
                    if quantity(raw, f"{where}[{resource}]", problems) is not None
                }
        return (None if nodes == _NOT_SET else nodes), resources

    def _patches(self, patches: Any, problems: list[JobProblem]) -> dict[str, list[_JobPatch]]:
        if patches is None:
            return {}
        if not isinstance(patches, list):
            problems.append(not_a("a list", dotted(_PATCHES), self.noun))
            return {}
        out: dict[str, list[_JobPatch]] = {}
        for i, entry in enumerate(patches):
            base = (*_PATCHES, i)
            if not is_map(entry):
                problems.append(not_a("an object", dotted(base), self.noun))
                continue
            if entry.get("manager") == MANAGER:
                continue  # kuota's own: the placement of the last admission, written again at the next
            jobs_path = (*base, "trainingRuntimeSpec", "template", "spec")
            jobs = _descend(entry, base, jobs_path[len(base) :], problems, self.noun)
            replicated = jobs.get("replicatedJobs") if jobs is not None else None
            if replicated is None:
                continue
            if not isinstance(replicated, list):
                problems.append(not_a("a list", dotted((*jobs_path, "replicatedJobs")), self.noun))
                continue
            for j, job in enumerate(replicated):
                found = self._job_patch(job, (*jobs_path, "replicatedJobs", j), problems)
                if found is not None:
                    out.setdefault(found[0], []).append(found[1])
        return out

    def _job_patch(self, job: Any, base: Path, problems: list[JobProblem]) -> tuple[str, _JobPatch] | None:
        if not is_map(job):
            problems.append(not_a("an object", dotted(base), self.noun))
            return None
        name = job.get("name")
        if not isinstance(name, str) or not name:
            problems.append(not_a("a non-empty string", dotted((*base, "name")), self.noun))
            return None
        metadata = _descend(job, base, ("template", "metadata"), problems, self.noun)
        pod = _descend(job, base, ("template", "spec", "template", "spec"), problems, self.noun)
        pod_path = (*base, "template", "spec", "template", "spec")
        labels = _string_map(metadata, "labels", (*base, "template", "metadata"), problems, self.noun)
        selector = _string_map(pod, "nodeSelector", pod_path, problems, self.noun)
        tolerations = pod.get("tolerations") if pod is not None else None
        if tolerations is not None and not (isinstance(tolerations, list) and all(map(is_map, tolerations))):
            problems.append(not_a("a list of objects", dotted((*pod_path, "tolerations")), self.noun))
            tolerations = None
        return name, _JobPatch(labels, selector, tolerations)

    # -- status and patches --------------------------------------------------------------------------------------

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        # The trainer counts child Jobs with a pod running or pending: none exactly when no pod is left.
        statuses = mapping(obj.get("status")).get("jobsStatus")
        if not isinstance(statuses, list):
            return 0
        return sum(_count(s.get("active")) for s in statuses if is_map(s))

    def run_patch(self, obj: Mapping[str, Any], placements: Mapping[str, Placement]) -> JSONPatch:
        jobs: list[dict[str, Any]] = []
        for name, placement in placements.items():
            pod: dict[str, Any] = {}
            if placement.node_selector:
                pod["nodeSelector"] = dict(placement.node_selector)
            if placement.tolerations:
                pod["tolerations"] = [dict(t) for t in placement.tolerations]
            if placement.gated:
                pod["schedulingGates"] = [{"name": SCHEDULING_GATE}]
            # The pods' labels go through the runtime patch too (the TrainJob has no pod template of its own), so
            # that a failed node names the TrainJob whose pods ran there.
            labels = {**placement.labels, **({PLACED_POD_SET: name} if placement.gated else {})}
            template: dict[str, Any] = {"metadata": {"labels": labels}} if labels else {}
            if pod:
                template["spec"] = pod
            if template:
                jobs.append({"name": name, "template": {"spec": {"template": template}}})
        entry = {
            "manager": MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs} if jobs else {}}},
        }
        ops = _entry_ops(obj, entry)
        ops.extend(set_ops(obj, self.suspend_path, False))
        return ops


def _namespace(obj: Mapping[str, Any], namespace: str | None) -> str | None:
    if namespace:
        return namespace
    found = mapping(obj.get("metadata")).get("namespace")
    return found if isinstance(found, str) and found else None


def _runtime_reference(runtime: ReferencedKind | None, name: str | None, namespace: str | None) -> Reference | None:
    """The runtime a TrainJob in `namespace` names, None when it names none kuota can look up."""
    if runtime is None or name is None:
        return None
    if not runtime.namespaced:
        return Reference(runtime.group, runtime.kind, None, name)
    return Reference(runtime.group, runtime.kind, namespace, name) if namespace else None


def _descend(
    container: Any, base: Path, keys: Path, problems: list[JobProblem], noun: str, *, required: bool = False
) -> Mapping[str, Any] | None:
    """The object at `keys` below `container` (itself an object, at `base`); None where a part is absent (a problem
    when `required`) or is not an object (a problem)."""
    here = container
    for depth, key in enumerate(keys):
        here = here.get(key)
        if here is None and not required:
            return None
        if not is_map(here):
            problems.append(not_a("an object", dotted((*base, *keys[: depth + 1])), noun))
            return None
    return here if is_map(here) else None


def _string_map(
    container: Mapping[str, Any] | None, key: str, base: Path, problems: list[JobProblem], noun: str
) -> Mapping[str, Any] | None:
    value = container.get(key) if container is not None else None
    if value is None:
        return None
    if not is_map(value) or not all(isinstance(v, str) for v in value.values()):
        problems.append(not_a("a map of strings", dotted((*base, key)), noun))
        return None
    return value


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _runtime_templates(
    reference: Reference, runtime: Mapping[str, Any], own: _Own, problems: list[JobProblem]
) -> list[PodTemplate]:
    """The pod sets of the runtime's JobSet template as the trainer runs them for this TrainJob; problems are said
    at their path in the runtime."""
    noun = _RUNTIMES[reference.kind].noun
    spec = _descend(runtime, (), ("spec",), problems, noun, required=True)
    if spec is None:
        return []
    policy = _descend(spec, ("spec",), ("mlPolicy",), problems, noun)
    nodes = 1
    mpi: Mapping[str, Any] | None = None
    if policy is not None:
        nodes = whole_number(policy.get("numNodes"), ("spec", "mlPolicy", "numNodes"), problems, 1)
        mpi = _descend(policy, ("spec", "mlPolicy"), ("mpi",), problems, noun)
    launcher_is_node = mpi is not None and mpi.get("runLauncherAsNode") is True
    jobs = _descend(spec, ("spec",), ("template", "spec"), problems, noun, required=True)
    if jobs is None:
        return []
    replicated = jobs.get("replicatedJobs")
    if not isinstance(replicated, list):
        problems.append(not_a("a list", "spec.template.spec.replicatedJobs", noun))
        return []
    out: list[PodTemplate] = []
    trainer_seen = False
    for i, job in enumerate(replicated):
        base: Path = ("spec", "template", "spec", "replicatedJobs", i)
        if not is_map(job):
            problems.append(not_a("an object", dotted(base), noun))
            continue
        name = job.get("name")
        if not isinstance(name, str) or not name:
            problems.append(not_a("a non-empty string", dotted((*base, "name")), noun))
            continue
        replicas = whole_number(job.get("replicas"), (*base, "replicas"), problems, 1)
        job_spec = _descend(job, base, ("template", "spec"), problems, noun, required=True)
        if job_spec is None:
            continue
        pod_path = (*base, "template", "spec", "template", "spec")
        pod = pod_spec_at(job_spec, pod_path, problems, noun)
        parallelism = whole_number(job_spec.get("parallelism"), (*base, "template", "spec", "parallelism"), problems, 1)
        metadata = _descend(job, base, ("template", "metadata"), problems, noun)
        labels = dict(_string_map(metadata, "labels", (*base, "template", "metadata"), problems, noun) or {})
        patches = own.patches.get(name, [])
        for patch in patches:
            labels.update(patch.labels or {})
        step = labels.get(ANCESTOR_LABEL)
        count = nodes if step == TRAINER_STEP and policy is not None else parallelism
        if own.num_nodes is not None:
            if mpi is not None:
                if name == NODE:
                    count = max(own.num_nodes - 1, 1) if launcher_is_node else own.num_nodes
            elif step == TRAINER_STEP and not trainer_seen:
                count = own.num_nodes
        trainer_seen = trainer_seen or step == TRAINER_STEP
        if pod is None:
            continue
        sized = (step == TRAINER_STEP and policy is not None) or (launcher_is_node and name == NODE)
        pod = _patched_pod(pod, patches, own.resources if sized else {})
        if step == TRAINER_STEP or step in INITIALIZER_STEPS:
            replicas = 1
        out.append(PodTemplate(name, pod_path, pod, replicas * count, source=reference))
    return out


def _patched_pod(
    pod: Mapping[str, Any], patches: list[_JobPatch], resources: Mapping[str, Mapping[str, Any]]
) -> Mapping[str, Any]:
    """The PodSpec with the patches' node selectors and tolerations merged in, and `resources` laid over its `node`
    container's. The runtime's own PodSpec is left as it is (it is the adapter's copy of the runtime)."""
    out = dict(pod)
    for patch in patches:
        # Empty maps and lists are left out of a patch as the trainer writes it, so they change nothing.
        if patch.node_selector:
            out["nodeSelector"] = {**mapping(out.get("nodeSelector")), **patch.node_selector}
        if patch.tolerations:
            out["tolerations"] = list(patch.tolerations)
    containers = out.get("containers")
    if not any(resources.values()) or not isinstance(containers, list):
        return out
    for k, container in enumerate(containers):
        if is_map(container) and container.get("name") == NODE:
            base = mapping(container.get("resources"))
            merged = dict(base)
            for part, values in resources.items():
                if values:
                    merged[part] = {**mapping(base.get(part)), **values}
            out["containers"] = [*containers[:k], {**container, "resources": merged}, *containers[k + 1 :]]
            break
    return out


def _entry_ops(obj: Mapping[str, Any], entry: Mapping[str, Any]) -> JSONPatch:
    """Ops that make `entry` kuota's runtime patch, last in the list: an earlier one of kuota's is taken out first
    (tested to be there still, so that a list that changed meanwhile fails the patch rather than lose an entry)."""
    patches = value_at(obj, _PATCHES)
    if not isinstance(patches, list):
        return set_ops(obj, _PATCHES, [entry])
    ops: JSONPatch = []
    for i, item in enumerate(patches):
        if is_map(item) and item.get("manager") == MANAGER:
            where = pointer((*_PATCHES, i))
            ops += [{"op": "test", "path": f"{where}/manager", "value": MANAGER}, {"op": "remove", "path": where}]
            break
    ops.append({"op": "add", "path": pointer((*_PATCHES, "-")), "value": entry})
    return ops


TRAINJOB = TrainJobKind()
