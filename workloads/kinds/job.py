"""batch/v1 Job: one pod set, `main`, held back by `spec.suspend`, and the one kind that can start partially.

Partial admission lowers `spec.parallelism` to the count kuota found quota for (down to the min-parallelism
annotation), as Kueue does. The Job controller reports a suspended Job's pods gone with the `Suspended` condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workloads.kind import (
    PodTemplate,
    Status,
    SuspendFieldKind,
    condition_time,
    count_of,
    parse_time,
    pod_spec_at,
    whole_number,
)
from workloads.problems import JobProblem
from workloads.quantities import mapping

#: Kueue names the single pod set of a batch/v1 Job "main"; so do we, so names line up across both.
POD_SET_NAME = "main"

_POD = ("spec", "template", "spec")


class JobKindBatch(SuspendFieldKind):
    group: ClassVar[str] = "batch"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "Job"
    plural: ClassVar[str] = "jobs"
    partial_admission: ClassVar[bool] = True
    succeeded: ClassVar[tuple[str, ...]] = ("Complete",)
    failed: ClassVar[tuple[str, ...]] = ("Failed",)

    @property
    def count_fields(self) -> str:
        return "spec.parallelism"

    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        pod = pod_spec_at(spec, _POD, problems, self.noun)
        parallelism = whole_number(spec.get("parallelism"), ("spec", "parallelism"), problems, 1)
        completions = spec.get("completions")
        count = parallelism
        if completions is not None:
            completions = whole_number(completions, ("spec", "completions"), problems, parallelism)
            count = min(count, completions)  # never more pods at once than completions still wanted
        if pod is None:
            return []
        return [PodTemplate(POD_SET_NAME, _POD, pod, count, scaled=("spec", "parallelism"))]

    def status(self, obj: Mapping[str, Any]) -> Status:
        found = super().status(obj)
        if found.finished is not None:
            at = parse_time(mapping(obj.get("status")).get("completionTime"))
            return Status(found.finished, at or condition_time(obj, "Complete", "Failed"), stopped=True)
        return found

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        active = mapping(obj.get("status")).get("active")
        return active if isinstance(active, int) else 0

    def ready_pods(self, obj: Mapping[str, Any]) -> int:
        # As Kueue counts a Job's readiness: pods ready now plus pods that already succeeded.
        status = mapping(obj.get("status"))
        return count_of(status.get("ready")) + count_of(status.get("succeeded"))


JOB = JobKindBatch()
