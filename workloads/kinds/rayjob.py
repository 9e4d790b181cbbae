"""RayJob (ray.io/v1): the Ray cluster it creates (head and worker groups) plus, in the default K8sJobMode, the
submitter pod, all one gang.

`spec.suspend` holds it back: KubeRay creates no cluster for a suspended RayJob and deletes the one it made when
the RayJob is suspended again. KubeRay reports the end in `status.jobDeploymentStatus` (`Complete`, `Failed`) and
a stopped RayJob as `Suspended` there; it writes no conditions kuota could read instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workloads.kind import PodTemplate, Status, SuspendFieldKind, dotted, parse_time
from workloads.problems import JobProblem, not_a
from workloads.quantities import is_map, mapping
from workloads.ray_cluster_spec import ray_templates

_DONE = {"Complete": True, "Failed": False, "ValidationFailed": False}
_NOT_RUNNING = frozenset({"", "New", "Suspended"})


class RayJobKind(SuspendFieldKind):
    group: ClassVar[str] = "ray.io"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "RayJob"
    plural: ClassVar[str] = "rayjobs"

    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        submitter = spec.get("submitterPodTemplate")
        mode = spec.get("submissionMode") or "K8sJobMode"
        reserved = ("submitter",) if mode == "K8sJobMode" and submitter is not None else ()
        out = ray_templates(spec.get("rayClusterSpec"), ("spec", "rayClusterSpec"), problems, self.noun, reserved)
        if mode == "K8sJobMode" and submitter is not None:
            # submitterPodTemplate is itself the pod template: its PodSpec is right below it.
            path = ("spec", "submitterPodTemplate", "spec")
            pod = submitter.get("spec") if is_map(submitter) else None
            if not is_map(pod):
                problems.append(not_a("an object", dotted(path), self.noun))
            else:
                out.append(PodTemplate("submitter", path, pod, 1))
        return out

    def status(self, obj: Mapping[str, Any]) -> Status:
        status = mapping(obj.get("status"))
        deployment = status.get("jobDeploymentStatus")
        deployment = deployment if isinstance(deployment, str) else ""
        if deployment in _DONE:
            return Status(_DONE[deployment], parse_time(status.get("endTime")), stopped=True)
        return Status(stopped=self.is_suspended(obj) and deployment in _NOT_RUNNING)

    def ready_pods(self, obj: Mapping[str, Any]) -> int:
        # As Kueue reads a RayJob: ready when KubeRay reports the cluster it runs on `ready`.
        cluster = mapping(mapping(obj.get("status")).get("rayClusterStatus"))
        return self.pod_count(obj) if cluster.get("state") == "ready" else 0


RAYJOB = RayJobKind()
