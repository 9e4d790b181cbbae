"""JobSet (jobset.x-k8s.io/v1alpha2): every replicated job is a pod set, and the whole JobSet one gang.

A replicated job runs `replicas` child Jobs of its template, each with the child Job's pods at once, so its pod
set counts replicas × the child's parallelism (capped by completions). `spec.suspend` holds the JobSet back; the
JobSet controller marks it `Suspended` once its child Jobs are suspended, and `Completed` or `Failed` at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workloads.kind import PodTemplate, SuspendFieldKind, count_of, dotted, pod_spec_at, whole_number
from workloads.problems import JobProblem, not_a
from workloads.quantities import is_map, mapping


class JobSetKind(SuspendFieldKind):
    group: ClassVar[str] = "jobset.x-k8s.io"
    version: ClassVar[str] = "v1alpha2"
    kind: ClassVar[str] = "JobSet"
    plural: ClassVar[str] = "jobsets"
    succeeded: ClassVar[tuple[str, ...]] = ("Completed",)
    failed: ClassVar[tuple[str, ...]] = ("Failed",)

    def templates(self, spec: Mapping[str, Any], problems: list[JobProblem]) -> list[PodTemplate]:
        replicated = spec.get("replicatedJobs")
        if not isinstance(replicated, list):
            problems.append(not_a("a list", "spec.replicatedJobs", self.noun))
            return []
        out: list[PodTemplate] = []
        for i, item in enumerate(replicated):
            base = ("spec", "replicatedJobs", i)
            if not is_map(item):
                problems.append(not_a("an object", dotted(base), self.noun))
                continue
            name = item.get("name")
            if not isinstance(name, str) or not name:
                problems.append(not_a("a non-empty string", dotted((*base, "name")), self.noun))
                continue
            replicas = whole_number(item.get("replicas"), (*base, "replicas"), problems, 1)
            job = item.get("template")
            if not is_map(job):
                problems.append(not_a("an object", dotted((*base, "template")), self.noun))
                continue
            job_spec = job.get("spec")
            if not is_map(job_spec):
                problems.append(not_a("an object", dotted((*base, "template", "spec")), self.noun))
                continue
            path = (*base, "template", "spec", "template", "spec")
            pod = pod_spec_at(job_spec, path, problems, self.noun)
            parallelism = whole_number(
                job_spec.get("parallelism"), (*base, "template", "spec", "parallelism"), problems, 1
            )
            completions = job_spec.get("completions")
            if completions is not None:
                parallelism = min(
                    parallelism,
                    whole_number(completions, (*base, "template", "spec", "completions"), problems, parallelism),
                )
            if pod is not None:
                out.append(PodTemplate(name, path, pod, replicas * parallelism))
        return out

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        statuses = mapping(obj.get("status")).get("replicatedJobsStatus")
        if not isinstance(statuses, list):
            return 0
        return sum(s.get("active", 0) for s in statuses if is_map(s) and isinstance(s.get("active", 0), int))

    def ready_pods(self, obj: Mapping[str, Any]) -> int:
        # The JobSet controller counts child Jobs per replicated job: `ready` ones have every pod ready,
        # `succeeded` ones are done. Each stands for its replicated job's pods per child Job.
        statuses = mapping(obj.get("status")).get("replicatedJobsStatus")
        if not isinstance(statuses, list):
            return 0
        jobs = {s.get("name"): count_of(s.get("ready")) + count_of(s.get("succeeded")) for s in statuses if is_map(s)}
        replicated = mapping(obj.get("spec")).get("replicatedJobs")
        replicas = (
            {r.get("name"): r.get("replicas", 1) for r in replicated if is_map(r)}
            if isinstance(replicated, list)
            else {}
        )
        ready = 0
        for template in self.read_templates(obj):
            count = count_of(replicas.get(template.name))
            if count:
                ready += min(jobs.get(template.name, 0), count) * (template.count // count)
        return ready


JOBSET = JobSetKind()
