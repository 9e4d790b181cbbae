"""What admin needs from the process it runs in (kuota.runtime.Runtime fits): described here as a Protocol
because admin sits below the composition root and must not import it.

Everything admin reads is a read-only property, so that the process's own (wider, mutable) attributes fit; the
controller and its loop are read through queues.read_model, and changed only through `hold`, `release`, `preempt`
and `apply_config`, which the process carries out on the scheduling loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from accounting.ledger import Ledger
from admin.parsing import WhatIf
from queues.read_model import ControllerReader, LoopReader
from queues.wait_estimates import Estimator
from quota.config import QuotaConfig


class RuntimePort(Protocol):
    @property
    def config(self) -> QuotaConfig: ...

    @property
    def config_text(self) -> str: ...

    @property
    def config_path(self) -> Path | None:
        """The quota file the process was started with (None: given inline or from a ConfigMap)."""
        ...

    @property
    def ledger(self) -> Ledger | None: ...

    @property
    def controller(self) -> ControllerReader | None:
        """None on a replica that does not run the controller."""
        ...

    @property
    def loop(self) -> LoopReader | None: ...

    @property
    def leader(self) -> bool: ...

    def now(self) -> int: ...

    def hold(self, workload: str, actor: str) -> None: ...

    def release(self, workload: str, actor: str) -> None: ...

    def preempt(self, workload: str, actor: str) -> None: ...

    def apply_config(self, text: str, source: str, config: QuotaConfig | None = None) -> QuotaConfig: ...

    @property
    def whatif(self) -> WhatIf | None:
        """The what-if replay the config diff runs in a worker process (None: not offered)."""
        ...

    @property
    def estimator(self) -> Estimator | None:
        """The wait-time simulation the workload view runs in a worker process (None: not offered)."""
        ...


class AdminOptions(Protocol):
    """The options of `kuota serve` the admin component reads."""

    @property
    def admin_host(self) -> str: ...

    @property
    def admin_port(self) -> int: ...

    @property
    def admin_token_file(self) -> Path | None: ...

    @property
    def admin_tls_cert(self) -> Path | None: ...

    @property
    def admin_tls_key(self) -> Path | None: ...
