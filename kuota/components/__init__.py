"""The long-lived parts `kuota serve` runs, each built from the command's options and the shared Runtime."""

from __future__ import annotations

from collections.abc import Sequence

from quota.config import QuotaConfig
from workloads.registry import Registry, UnknownKind, enabled_kinds


class StartError(Exception):
    """A component cannot start with the options given; the message says which and why."""


def job_kinds(flag: Sequence[str] | None, config: QuotaConfig) -> Registry:
    """The kinds a process queues: `--kinds` when given, else the quota file's `jobKinds` (Job when it has none).

    Read once at start: the webhook configuration and the RBAC rules are made for a set of kinds, so a later
    change of `jobKinds` in the quota file takes effect when kuota restarts (a reload says so in the log)."""
    try:
        return enabled_kinds(flag if flag is not None else config.job_kinds)
    except UnknownKind as exc:
        where = "--kinds" if flag is not None else "jobKinds in the quota file"
        raise StartError(f"{where}: {exc}") from None
