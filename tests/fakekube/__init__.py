"""A fake Kubernetes API server for end-to-end tests: real REST and watch wire protocol on 127.0.0.1,
admission webhooks called like the real apiserver calls them, and a fake kubelet that runs Jobs on a wall
clock.

async with FakeKubeServer() as server: api = await server.api_client() ...
"""

from .errors import ApiError
from .failures import InjectedFailure
from .kubelet import FAIL_ANNOTATION, RUNTIME_ANNOTATION, FakeKubelet
from .server import DEFAULT_NAMESPACES, FakeKubeServer, RequestRecord
from .users import ADMIN, GROUPS_HEADER, USER_HEADER, UserInfo
from .webhooks import AdmissionRecord

__all__ = [
    "ADMIN",
    "DEFAULT_NAMESPACES",
    "FAIL_ANNOTATION",
    "GROUPS_HEADER",
    "RUNTIME_ANNOTATION",
    "USER_HEADER",
    "AdmissionRecord",
    "ApiError",
    "FakeKubeServer",
    "FakeKubelet",
    "InjectedFailure",
    "RequestRecord",
    "UserInfo",
]
