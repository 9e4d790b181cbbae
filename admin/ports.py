"""What admin needs from the process it runs in (kuota.runtime.Runtime fits): described here as a Protocol
because admin sits below the composition root and must not import it."""

from __future__ import annotations

from typing import Any, Protocol

from accounting.ledger import Ledger
from quota.config import QuotaConfig


class RuntimePort(Protocol):
    config: QuotaConfig
    config_text: str
    ledger: Ledger | None
    controller: Any
    """queues.controller.Controller, or None on a replica that does not run it."""
    leader: bool

    def now(self) -> int: ...

    def hold(self, workload: str, actor: str) -> None: ...

    def release(self, workload: str, actor: str) -> None: ...

    def preempt(self, workload: str, actor: str) -> None: ...

    def apply_config(self, text: str, source: str) -> QuotaConfig: ...
