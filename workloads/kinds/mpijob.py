"""MPIJob v2beta1 (kubeflow.org/v2beta1, the MPI Operator's): a launcher and its workers, one gang.

Its shape is the Kubeflow v1 one, the framework's `ReplicaSpecsKind` (`spec.mpiReplicaSpecs.{Launcher,Worker}`,
`spec.runPolicy.suspend`, `Succeeded` / `Failed` / `Suspended` conditions); it is its own kind because its API
version and operator are its own. The launcher is a pod set of its own: it usually asks for no GPU, and must not
be put on one.
"""

from __future__ import annotations

from typing import ClassVar

from workloads.replica_specs import ReplicaSpecsKind


class MPIJobKind(ReplicaSpecsKind):
    group: ClassVar[str] = "kubeflow.org"
    version: ClassVar[str] = "v2beta1"
    kind: ClassVar[str] = "MPIJob"
    plural: ClassVar[str] = "mpijobs"
    replica_specs: ClassVar[str] = "mpiReplicaSpecs"


MPIJOB = MPIJobKind()
