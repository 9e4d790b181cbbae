"""`kuota serve --cluster sim`, the local try-out, behaves like the cluster mode where it can: the quota file is
reloaded when it changes, and the controller's counters and histograms reach the admin component's /metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

from admin.metrics import REGISTRY
from kuota.commands.serve import ServeOptions
from kuota.components.controller import ControllerComponent
from kuota.runtime import Runtime

QUOTA = Path(__file__).resolve().parents[2] / "config" / "samples" / "org-quota.yaml"


def sample(name: str) -> float:
    return sum(s.value for metric in REGISTRY.collect() for s in metric.samples if s.name == name)


async def test_the_simulated_cluster_reloads_its_quota_file_and_counts_in_prometheus(tmp_path: Path) -> None:
    quota = tmp_path / "quota.yaml"
    quota.write_text(QUOTA.read_text())
    options = ServeOptions(
        quota, None, None, "127.0.0.1", 0, "system:serviceaccount:kuota-system:kuota",
        cluster="sim", database_url=f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}",
    )  # fmt: skip
    runtime = Runtime.from_file(quota)
    cycles_before = sample("kuota_scheduling_cycles_total")
    component = ControllerComponent(options, runtime)
    await component.start()
    try:
        for _ in range(100):
            if sample("kuota_scheduling_cycles_total") > cycles_before:
                break
            await asyncio.sleep(0.05)
        assert sample("kuota_scheduling_cycles_total") > cycles_before
        assert sample("kuota_admitted_workloads_total") > 0

        assert runtime.config.fair_sharing.enabled
        quota.write_text(QUOTA.read_text().replace("fairSharing:\n  enabled: true", "fairSharing:\n  enabled: false"))
        for _ in range(100):
            if not runtime.config.fair_sharing.enabled:
                break
            await asyncio.sleep(0.1)
        assert not runtime.config.fair_sharing.enabled
        assert runtime.controller is not None and not runtime.controller.config.fair_sharing.enabled
    finally:
        await component.stop()
