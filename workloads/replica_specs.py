"""The replica-specs shape that Kubeflow's v1 jobs and the MPI Operator's MPIJob share.

`spec.<x>ReplicaSpecs` maps a replica type (Master, Worker, Launcher...) to `replicas` pods of a template, and
`spec.runPolicy.suspend` holds the job back. Each replica type is a pod set named in lower case, as Kueue names
them; the whole job is one gang. The operators report the end with a `Succeeded` or `Failed` condition and a
stopped job with `Suspended`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workloads.kind import Path, PodTemplate, SuspendFieldKind, count_of, dotted, pod_spec_at, whole_number
from workloads.problems import JobProblem, not_a
from workloads.quantities import is_map, mapping


class ReplicaSpecsKind(SuspendFieldKind):
    """A kind whose pods are `spec.<replica_specs>.<ReplicaType>` (the Kubeflow v1 shape, which MPIJob shares)."""

    suspend_path: ClassVar[Path] = ("spec", "runPolicy", "suspend")
    succeeded: ClassVar[tuple[str, ...]] = ("Succeeded",)
    failed: ClassVar[tuple[str, ...]] = ("Failed",)
    replica_specs: ClassVar[str]

    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        specs = spec.get(self.replica_specs)
        if not is_map(specs):
            problems.append(not_a("an object", f"spec.{self.replica_specs}", self.noun))
            return []
        out: list[PodTemplate] = []
        for replica_type, replica in specs.items():
            base = ("spec", self.replica_specs, str(replica_type))
            if not is_map(replica):
                problems.append(not_a("an object", dotted(base), self.noun))
                continue
            path = (*base, "template", "spec")
            pod = pod_spec_at(replica, path, problems, self.noun)
            count = whole_number(replica.get("replicas"), (*base, "replicas"), problems, 1)
            if pod is not None:
                out.append(PodTemplate(str(replica_type).lower(), path, pod, count))
        return out

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        statuses = mapping(mapping(obj.get("status")).get("replicaStatuses"))
        return sum(s.get("active", 0) for s in statuses.values() if is_map(s) and isinstance(s.get("active", 0), int))

    def ready_pods(self, obj: Mapping[str, Any]) -> int:
        # As Kueue reads these operators: pods active (running) or succeeded, per replica type.
        statuses = mapping(mapping(obj.get("status")).get("replicaStatuses"))
        return sum(count_of(s.get("active")) + count_of(s.get("succeeded")) for s in statuses.values() if is_map(s))
