"""Names of the labels and annotations kuota reads from and writes on Jobs (semantics.md, "Labels and annotations").

Kueue's spellings are accepted on input so that Kueue users keep their manifests; kuota always writes its own.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

# Labels a user sets (queue and priority class are labels because selectors and matchConditions must see them).
QUEUE_LABEL: Final = "kuota.dev/queue"
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL: Final = "kuota.dev/priority-class"
KUEUE_PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"

# Annotations a user sets.
MIN_PARALLELISM: Final = "kuota.dev/min-parallelism"
KUEUE_MIN_PARALLELISM: Final = "kueue.x-k8s.io/job-min-parallelism"
CHECKPOINT_URL: Final = "kuota.dev/checkpoint-url"
# On a pod template: keep the pod set's pods inside one domain of a topology level (spec/topology.md).
TOPOLOGY_REQUIRED: Final = "kuota.dev/topology-required"
TOPOLOGY_PREFERRED: Final = "kuota.dev/topology-preferred"
KUEUE_TOPOLOGY_REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_TOPOLOGY_PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
EXPECTED_RUNTIME: Final = "kuota.dev/expected-runtime"

# The checkpoint handshake: kuota asks, the job answers.
CHECKPOINT_REQUESTED_AT: Final = "kuota.dev/checkpoint-requested-at"
CHECKPOINT_COMPLETED_AT: Final = "kuota.dev/checkpoint-completed-at"
CHECKPOINT_ID: Final = "kuota.dev/checkpoint-id"

# Set by kuota only.
RESUME_FROM: Final = "kuota.dev/resume-from"
ADMITTED_FLAVOR: Final = "kuota.dev/admitted-flavor"
WORKLOAD_ID: Final = "kuota.dev/workload-id"
# Set by kuota on every pod template (and gated pod) it lets run: which workload the pods are, so that the pods on a
# node tell which admitted workloads a node failure takes down. A label, so that `kubectl get pods -l` finds a
# workload's pods; its value is workload_label_value(key), since a key (`KIND/NAMESPACE/NAME`) is no label value.
WORKLOAD_LABEL: Final = "kuota.dev/workload"
# Set by kuota on an admitted workload placed on nodes by a topology: per pod set, its domain and pods per node (JSON,
# clusters/kube/topology_assignment.py), so that a restarted controller binds the same nodes.
TOPOLOGY_ASSIGNMENT: Final = "kuota.dev/topology-assignment"
# Set by kuota on a workload it deactivated (gang readiness: its pods were not ready in time too often), with the
# reason; it keeps the workload out of the queue across controller restarts until an operator releases it.
DEACTIVATED: Final = "kuota.dev/deactivated"

# Plain pods run as one gang when they share a group name and say how many pods the group has (Kueue's spellings
# are accepted too, as for the queue).
POD_GROUP_LABEL: Final = "kuota.dev/pod-group"
KUEUE_POD_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT: Final = "kuota.dev/pod-group-total-count"
KUEUE_POD_GROUP_TOTAL_COUNT: Final = "kueue.x-k8s.io/pod-group-total-count"

# On the pods of kinds held back pod by pod (LeaderWorkerSet, plain Pods): the scheduling gate kuota's webhook
# creates them with and only kuota removes, and the pod set a pod of a pod group belongs to (set by the webhook).
SCHEDULING_GATE: Final = "kuota.dev/admission"
POD_SET: Final = "kuota.dev/pod-set"
# Set by kuota on the pod templates of a pod set it placed node by node (a topology flavor) of a kind with pod
# templates (Job, JobSet, ...): the pod set's name. The template gets kuota's scheduling gate too, so its pods wait
# until kuota lets each go onto a node of the placement; the label is how kuota's pod watch finds them (as a label,
# so that a label selector keeps every other pod out of that watch) and which pod set each is.
PLACED_POD_SET: Final = "kuota.dev/placed-pod-set"

# On Namespaces: lets the webhook configurations send kuota every Job of a namespace the quota file manages.
MANAGED_NAMESPACE_LABEL: Final = "kuota.dev/managed"

#: Annotations nobody but kuota may set or change: they are what makes a Job count as admitted.
KUOTA_OWNED_ANNOTATIONS: Final = (
    ADMITTED_FLAVOR,
    WORKLOAD_ID,
    RESUME_FROM,
    CHECKPOINT_REQUESTED_AT,
    DEACTIVATED,
    TOPOLOGY_ASSIGNMENT,
)


_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def is_label_value(text: str) -> bool:
    """Whether `text` is a valid Kubernetes label value (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends)."""
    return _LABEL_VALUE.fullmatch(text) is not None


def workload_label_value(key: str) -> str:
    """The `kuota.dev/workload` label of a workload's pods: a digest of its key (`KIND/NAMESPACE/NAME`, up to 253
    characters a part and with slashes, is no label value, which is at most 63 characters of [A-Za-z0-9._-]). 160
    bits: two workloads of one cluster never share one."""
    return hashlib.sha256(key.encode()).hexdigest()[:40]
