"""RayCluster (ray.io/v1): a head and worker groups, one gang, that runs until it is deleted.

`spec.suspend` holds it back (KubeRay deletes a suspended cluster's pods). A RayCluster never finishes on its own:
its quota is held until it is deleted or preempted. KubeRay reports a stopped cluster with the
`RayClusterSuspended` condition, or `status.state: suspended` in older versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workloads.kind import PodTemplate, Status, SuspendFieldKind, condition_true
from workloads.problems import JobProblem
from workloads.quantities import mapping
from workloads.ray_cluster_spec import ray_templates


class RayClusterKind(SuspendFieldKind):
    group: ClassVar[str] = "ray.io"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "RayCluster"
    plural: ClassVar[str] = "rayclusters"

    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        # The spec is itself the Ray cluster spec.
        return ray_templates(spec, ("spec",), problems, self.noun)

    def status(self, obj: Mapping[str, Any]) -> Status:
        stopped = self.is_suspended(obj) and (
            condition_true(obj, "RayClusterSuspended") is not None
            # An empty state is a cluster still starting, pods and all: only KubeRay's word that they are gone counts.
            or mapping(obj.get("status")).get("state") == "suspended"
        )
        return Status(stopped=stopped)

    def ready_pods(self, obj: Mapping[str, Any]) -> int:
        # KubeRay says `ready` once the head and every worker run and are ready (Kueue reads the same state).
        return self.pod_count(obj) if mapping(obj.get("status")).get("state") == "ready" else 0


RAYCLUSTER = RayClusterKind()
