"""A pod set's topology wish and tolerations, read from its pod template (spec/topology.md).

`kuota.dev/topology-required: LEVEL` or `kuota.dev/topology-preferred: LEVEL` on the template's annotations (Kueue's
`kueue.x-k8s.io/podset-required-topology` / `-preferred-topology` accepted too); on the object's own annotations
they apply to every pod set that does not say otherwise. A level that no topology of the quota file has is a
problem: the flavor is not chosen yet, but such a wish could never be met on any flavor. A quota file with no
topologies at all places nothing on nodes: there the wish is ignored (Kueue's TAS samples still run, placed by the
scheduler alone, as before topologies existed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.labels import (
    KUEUE_TOPOLOGY_PREFERRED,
    KUEUE_TOPOLOGY_REQUIRED,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
)
from quota.pod_set import TopologyRequest
from quota.taints import Toleration
from workloads.problems import JobProblem, JobProblemKind

_KEYS = (
    (TOPOLOGY_REQUIRED, True),
    (KUEUE_TOPOLOGY_REQUIRED, True),
    (TOPOLOGY_PREFERRED, False),
    (KUEUE_TOPOLOGY_PREFERRED, False),
)


def topology_request(
    template: Mapping[str, Any],
    job: Mapping[str, Any],
    where: str,
    levels: frozenset[str],
    problems: list[JobProblem],
) -> TopologyRequest | None:
    """The wish on the template's annotations, else on the object's; None: no wish (pods go anywhere)."""
    if not levels:
        return None
    for given, place in ((template, f"{where} metadata.annotations"), (job, "metadata.annotations")):
        found = [(key, required) for key, required in _KEYS if key in given]
        if not found:
            continue
        if len(found) > 1:
            names = ", ".join(key for key, _ in found)
            problems.append(
                JobProblem(
                    JobProblemKind.INVALID_FIELD,
                    place,
                    f"{place} asks for more than one topology ({names}); keep one",
                )
            )
            return None
        key, required = found[0]
        level = given[key]
        field = f"{place}[{key}]"
        if not isinstance(level, str) or not level:
            problems.append(JobProblem(JobProblemKind.INVALID_FIELD, field, f"{field} must name a node label"))
            return None
        if level not in levels:
            known = ", ".join(sorted(levels)) or "none: the quota file declares no topologies"
            problems.append(
                JobProblem(
                    JobProblemKind.INVALID_FIELD,
                    field,
                    f"{field} is {level!r}, a level of no topology in the quota file (levels: {known})",
                )
            )
            return None
        return TopologyRequest(level, required)
    return None


def tolerations_of(pod_spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    """The pod spec's tolerations; entries of the wrong shape are left out (kube-apiserver refuses them anyway)."""
    raw = pod_spec.get("tolerations")
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        key, operator, value, effect = (item.get(k) or "" for k in ("key", "operator", "value", "effect"))
        if all(isinstance(part, str) for part in (key, operator, value, effect)):
            out.append(Toleration(str(key), str(operator) or "Equal", str(value), str(effect)))
    return tuple(out)
