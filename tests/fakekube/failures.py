"""Failures a test asks for: the next N requests that match answer with an error Status instead of being
served."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from . import errors


@dataclass
class InjectedFailure:
    code: int
    verb: str | None  # get | list | watch | create | update | patch | delete | deletecollection; None: any
    resource: str | None  # "jobs", "jobs/status", "leases.coordination.k8s.io"; None: any
    path: str | None  # fnmatch glob over the URL path, e.g. "/apis/batch/v1/namespaces/*/jobs*"; None: any
    remaining: int  # how many more requests fail; counts down to 0
    message: str | None = None
    user: str | None = None  # only requests made as this username; None: anyone
    retry_after_s: int = 1
    hits: int = 0

    def matches(self, verb: str, resource: str, plural: str, path: str, user: str) -> bool:
        if self.remaining <= 0:
            return False
        if self.user is not None and self.user != user:
            return False
        if self.verb is not None and self.verb != verb:
            return False
        if self.resource is not None and self.resource not in (resource, plural):
            return False
        return self.path is None or fnmatch.fnmatchcase(path, self.path)

    def error(self) -> errors.ApiError:
        if self.code == 429:
            return errors.too_many_requests(
                self.message or "Too many requests, please try again later.", self.retry_after_s
            )
        if self.code == 500:
            return errors.internal_error(self.message or "injected failure")
        reason = errors.REASONS_BY_CODE.get(self.code, "")
        status = errors.status_object(self.code, reason, self.message or f"injected failure ({self.code})", {})
        headers = {"Retry-After": str(self.retry_after_s)} if self.code in (503, 504) else {}
        return errors.ApiError(status, headers)
