"""Kubeflow Training Operator v1 jobs (kubeflow.org/v1): PyTorchJob, TFJob, XGBoostJob, PaddleJob and JAXJob.

They differ only in the name of their replica-specs field, so they share this module; the shape and its suspend
switch (`spec.runPolicy.suspend`) are the framework's `ReplicaSpecsKind`.
"""

from __future__ import annotations

from typing import ClassVar

from workloads.replica_specs import ReplicaSpecsKind


class PyTorchJobKind(ReplicaSpecsKind):
    group: ClassVar[str] = "kubeflow.org"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "PyTorchJob"
    plural: ClassVar[str] = "pytorchjobs"
    replica_specs: ClassVar[str] = "pytorchReplicaSpecs"


class TFJobKind(ReplicaSpecsKind):
    group: ClassVar[str] = "kubeflow.org"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "TFJob"
    plural: ClassVar[str] = "tfjobs"
    replica_specs: ClassVar[str] = "tfReplicaSpecs"


class XGBoostJobKind(ReplicaSpecsKind):
    group: ClassVar[str] = "kubeflow.org"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "XGBoostJob"
    plural: ClassVar[str] = "xgboostjobs"
    replica_specs: ClassVar[str] = "xgbReplicaSpecs"


class PaddleJobKind(ReplicaSpecsKind):
    group: ClassVar[str] = "kubeflow.org"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "PaddleJob"
    plural: ClassVar[str] = "paddlejobs"
    replica_specs: ClassVar[str] = "paddleReplicaSpecs"


class JAXJobKind(ReplicaSpecsKind):
    group: ClassVar[str] = "kubeflow.org"
    version: ClassVar[str] = "v1"
    kind: ClassVar[str] = "JAXJob"
    plural: ClassVar[str] = "jaxjobs"
    replica_specs: ClassVar[str] = "jaxReplicaSpecs"


PYTORCHJOB = PyTorchJobKind()
TFJOB = TFJobKind()
XGBOOSTJOB = XGBoostJobKind()
PADDLEJOB = PaddleJobKind()
JAXJOB = JAXJobKind()
