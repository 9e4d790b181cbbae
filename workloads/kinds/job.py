"""batch/v1 Job: one pod set, `main`, held back by `spec.suspend`, and the one kind that can start partially.

Partial admission lowers `spec.parallelism` to the count kuota found quota for (down to the min-parallelism
annotation), as Kueue does. The Job controller reports a suspended Job's pods gone with the `Suspended` condition.

A Job ends for kuota when its last pod is gone after the Job controller has decided its outcome, which can be
before its terminal condition. Since Kubernetes 1.31 the controller first sets `SuccessCriteriaMet` (or
`FailureTarget`), then finishes its pods' accounting (their finalizers, `succeeded`, `completionTime`) and only
then sets `Complete` (or `Failed`): on a busy control plane a second or more later, during which the Job's pods
are all terminal and hold nothing. Holding the quota until `Complete` made such a Job look like the most recently
admitted running workload, the first victim of the next preemption, and suspending it froze it there (1.37's
controller completes a Job it has already marked `Suspended` only once it runs again), so it was
requeued and admitted again for nothing: a fifth of the Jobs in a `--scale 0.2` run of bench/e2e.py. The interim
condition counts only with nothing left: no active pod, and `status.terminating` reported and 0 (a control plane
that does not report terminating pods makes kuota wait for the terminal condition). A Job that has ended so while
suspended (an eviction crossed its last pod's success) is let go (`end_patch`): nothing of it can start again, and
only then does the controller complete it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workloads.kind import (
    JSONPatch,
    PodTemplate,
    Status,
    SuspendFieldKind,
    condition_time,
    condition_true,
    count_of,
    parse_time,
    pod_spec_at,
    set_ops,
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
    #: The Job controller's interim conditions: the outcome is decided; the terminal condition follows.
    decided: ClassVar[tuple[str, ...]] = ("SuccessCriteriaMet", "FailureTarget")

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
        return self._decided_and_gone(obj) or found

    def _decided_and_gone(self, obj: Mapping[str, Any]) -> Status | None:
        """Finished by its interim condition once no pod is left (module docstring); None otherwise."""
        decided = condition_true(obj, *self.decided)
        if decided is None:
            return None
        status = mapping(obj.get("status"))
        terminating = status.get("terminating")
        if self.active_pods(obj) != 0 or type(terminating) is not int or terminating != 0:
            return None
        return Status(decided == "SuccessCriteriaMet", condition_time(obj, decided), stopped=True)

    def end_patch(self, obj: Mapping[str, Any]) -> JSONPatch:
        if not self.is_suspended(obj) or condition_true(obj, *self.succeeded, *self.failed) is not None:
            return []
        if self._decided_and_gone(obj) is None:
            return []
        return set_ops(obj, self.suspend_path, False)

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        active = mapping(obj.get("status")).get("active")
        return active if isinstance(active, int) else 0

    def ready_pods(self, obj: Mapping[str, Any]) -> int:
        # As Kueue counts a Job's readiness: pods ready now plus pods that already succeeded.
        status = mapping(obj.get("status"))
        return count_of(status.get("ready")) + count_of(status.get("succeeded"))


JOB = JobKindBatch()
