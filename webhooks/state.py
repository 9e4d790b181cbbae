"""What the webhooks read on the request path: the current quota file and who kuota is. Memory only.

The quota file is reloaded when it changes on disk (a ConfigMap update swaps the file under a symlink); a file that
no longer loads is logged and the previous one stays in force, so a bad edit never opens or closes the door.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import structlog

from admission.never_fits import Capacity
from quota.config import QuotaConfig
from quota.loader import ConfigError, load_config_file
from webhooks.files import file_signature
from workloads.registry import Registry, enabled_kinds
from workloads.rules import ConfigIndex, config_index

DEFAULT_SERVICE_ACCOUNT = "system:serviceaccount:kuota-system:kuota"

log = structlog.get_logger("kuota.webhook")


@dataclass(frozen=True, slots=True)
class ConfigView:
    """One quota file with everything derived from it that requests look up."""

    config: QuotaConfig
    index: ConfigIndex
    capacity: Capacity

    @classmethod
    def of(cls, config: QuotaConfig) -> ConfigView:
        return cls(config, config_index(config), Capacity(config))


class WebhookState:
    def __init__(
        self,
        config: QuotaConfig,
        *,
        service_account: str = DEFAULT_SERVICE_ACCOUNT,
        config_path: Path | None = None,
        kinds: Registry | None = None,
    ) -> None:
        self.view = ConfigView.of(config)
        self.kinds = kinds if kinds is not None else enabled_kinds(config.job_kinds)
        """The kinds served; fixed for the process's life (the webhook configuration and RBAC are, too)."""
        self.service_account = service_account
        self.config_path = config_path
        self.ready = False
        self._signature = file_signature(config_path) if config_path is not None else None

    @classmethod
    def from_file(
        cls, path: Path, *, service_account: str = DEFAULT_SERVICE_ACCOUNT, kinds: Registry | None = None
    ) -> WebhookState:
        """Raises ConfigError when the file does not load: at start there is nothing to fall back on."""
        return cls(load_config_file(path), service_account=service_account, config_path=path, kinds=kinds)

    def replace_config(self, config: QuotaConfig) -> None:
        self.view = ConfigView.of(config)

    async def reload_if_changed(self) -> bool:
        """Load the quota file again if it changed; keep the current one if the new one is bad."""
        path = self.config_path
        if path is None:
            return False
        signature = file_signature(path)
        if signature is None or signature == self._signature:
            return False
        self._signature = signature
        try:
            # Off the event loop: a large file takes a while to validate, and requests keep the old view meanwhile.
            view = await asyncio.to_thread(lambda: ConfigView.of(load_config_file(path)))
        except ConfigError as exc:
            log.error("quota file rejected; keeping the previous one", path=str(path), error=exc.render())
            return False
        if view.config.job_kinds != self.view.config.job_kinds:
            log.warning(
                "jobKinds changed in the quota file; the kinds served change when kuota restarts",
                path=str(path),
                serving=list(self.kinds.names()),
            )
        self.view = view
        log.info("quota file reloaded", path=str(path), teams=len(view.config.teams))
        return True
