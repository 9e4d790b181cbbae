"""The Ray cluster shape that RayCluster and RayJob share: a head group and worker groups.

The head is one pod; each worker group runs `replicas` × `numOfHosts` pods (multi-host workers, e.g. TPU slices)
of its template. Pod sets are named `head` and after each worker group's `groupName`, as Kueue names them.
"""

from __future__ import annotations

from typing import Any

from workloads.kind import Path, PodTemplate, dotted, pod_spec_at, whole_number
from workloads.problems import JobProblem, not_a
from workloads.quantities import is_map


def ray_templates(
    cluster: Any, base: Path, problems: list[JobProblem], noun: str, reserved: tuple[str, ...] = ()
) -> list[PodTemplate]:
    """The head and worker-group templates of the Ray cluster spec at `base`. Pod sets are told apart by name, so
    a worker group may not be called `head`, nor any of `reserved` (a RayJob's `submitter`), nor repeat a name."""
    if not is_map(cluster):
        problems.append(not_a("an object", dotted(base), noun))
        return []
    out: list[PodTemplate] = []
    head = cluster.get("headGroupSpec")
    head_path = (*base, "headGroupSpec", "template", "spec")
    if not is_map(head):
        problems.append(not_a("an object", dotted((*base, "headGroupSpec")), noun))
    else:
        pod = pod_spec_at(head, head_path, problems, noun)
        if pod is not None:
            out.append(PodTemplate("head", head_path, pod, 1))
    groups = cluster.get("workerGroupSpecs")
    if groups is None:
        return out
    if not isinstance(groups, list):
        problems.append(not_a("a list", dotted((*base, "workerGroupSpecs")), noun))
        return out
    for i, group in enumerate(groups):
        group_base = (*base, "workerGroupSpecs", i)
        if not is_map(group):
            problems.append(not_a("an object", dotted(group_base), noun))
            continue
        name = group.get("groupName")
        taken = {"head", *reserved, *(t.name for t in out)}
        if not isinstance(name, str) or not name or name in taken:
            others = ", ".join(sorted(taken))
            problems.append(not_a(f"a name other than {others}", dotted((*group_base, "groupName")), noun))
            continue
        path = (*group_base, "template", "spec")
        pod = pod_spec_at(group, path, problems, noun)
        replicas = whole_number(group.get("replicas"), (*group_base, "replicas"), problems, 1)
        hosts = whole_number(group.get("numOfHosts"), (*group_base, "numOfHosts"), problems, 1)
        if pod is not None:
            out.append(PodTemplate(name, path, pod, replicas * hosts))
    return out
