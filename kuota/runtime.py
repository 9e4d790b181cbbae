"""What the components of one `kuota serve` process share: the quota file, the ledger, the controller and its loop.

The controller component builds the controller and the loop and sets them here; the admin component reads
queues, workloads and credits through this object and sends operator actions through it, so that every action
is carried out on the one scheduling thread and audited in one place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from accounting.ledger import Ledger
from admin.parsing import WhatIf
from queues.controller import Controller
from queues.loop import ControllerLoop, wall_clock_ms
from queues.wait_estimates import Estimator
from quota.config import QuotaConfig
from quota.loader import load_config_file, load_config_text


class NotLeader(RuntimeError):
    """This replica does not run the controller (or is not the leader): actions go to the leader."""


@dataclass
class Runtime:
    config: QuotaConfig
    config_text: str
    config_path: Path | None = None
    ledger: Ledger | None = None
    controller: Controller | None = None
    loop: ControllerLoop | None = None
    leader: bool = False
    started_ms: int = field(default_factory=wall_clock_ms)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    on_fatal: Callable[[str], None] | None = None
    """Set by `kuota serve`: a component that cannot go on calls it with the reason, and the process stops with
    a non-zero exit after stopping every component (so the controller releases its Lease)."""

    @classmethod
    def from_file(cls, path: Path) -> Runtime:
        config = load_config_file(path)  # ConfigError, also when the file cannot be read
        return cls(config, path.read_text(encoding="utf-8"), path)

    def now(self) -> int:
        return self.loop.clock() if self.loop is not None else wall_clock_ms()

    def require_controller(self) -> Controller:
        if self.controller is None or not self.leader:
            raise NotLeader("this replica is not the leader; retry against the leader or later")
        return self.controller

    def wake(self) -> None:
        if self.loop is not None:
            self.loop.wake()

    def hold(self, workload: str, actor: str) -> None:
        self.require_controller().hold(workload, actor, self.now())
        self.wake()

    def release(self, workload: str, actor: str) -> None:
        self.require_controller().release(workload, actor, self.now())
        self.wake()

    def preempt(self, workload: str, actor: str) -> None:
        self.require_controller().preempt(workload, actor, self.now())
        self.wake()

    @property
    def whatif(self) -> WhatIf | None:
        """What-if replays of the ledger for the admin API's config diff (sim.whatif), run in its worker process."""
        from sim.whatif import whatif_json

        return whatif_json

    @property
    def estimator(self) -> Estimator | None:
        """Wait-time simulations for the admin API's workload view (sim.estimates), run in its worker process."""
        from sim.estimates import estimate_json

        return estimate_json

    def apply_config(self, text: str, source: str, config: QuotaConfig | None = None) -> QuotaConfig:
        """Validate and apply a new quota file (ConfigError or ReloadRejected leave the old one in force); `config`
        is `text` already validated (elsewhere, off the event loop), so it is not parsed again."""
        if config is None:
            config = load_config_text(text, source=source)
        if self.controller is not None:
            self.controller.reload(config, text, source, self.now())
        self.config, self.config_text = config, text
        self.wake()
        return config
