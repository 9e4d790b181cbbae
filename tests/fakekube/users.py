"""Who is making a request. The fake server authenticates nobody and authorizes everything; identity only
matters because admission webhooks see it in AdmissionReview.request.userInfo."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

USER_HEADER = "X-Fake-User"
GROUPS_HEADER = "X-Fake-Groups"  # comma-separated


@dataclass(frozen=True)
class UserInfo:
    username: str
    groups: tuple[str, ...] = ("system:authenticated",)
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"username": self.username}
        if self.uid:
            wire["uid"] = self.uid
        wire["groups"] = list(self.groups)
        if self.extra:
            wire["extra"] = self.extra
        return wire


# What kubeadm's admin.conf authenticates as since Kubernetes 1.29.
ADMIN = UserInfo("kubernetes-admin", ("kubeadm:cluster-admins", "system:authenticated"))
JOB_CONTROLLER = UserInfo(
    "system:serviceaccount:kube-system:job-controller",
    ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
)
