"""A budget on the real control plane: a team's cpu budget of 7.2 cpu-seconds a day is spent by a running Job while
another waits for quota; the waiting Job gets the BudgetWarning Event at 80 % and BudgetExhausted at 100 %, posted
by kuota through kube-apiserver, and is not admitted once the first Job's quota is free (`blockAbove: zero`); the
running Job is never stopped."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Rig, eventually, running, suspended
from tests.kube.manifests import complete

# 2m cpu-hours = 7.2 cpu-seconds: a 500m Job reaches 80 % after 11.52 s and 100 % after 14.4 s.
BUDGET = "    budgets: [{window: day, resources: {cpu: 2m}, onExhausted: block, blockAbove: zero}]\n"


@pytest.mark.quota_extra(BUDGET)
async def test_budget_events_and_block_on_the_real_control_plane(rig: Rig) -> None:
    controller = await rig.controller()
    await rig.create_job("first", cpu="500m", runtime_s=20)
    await rig.wait_job("first", running, "admitted")
    await rig.create_job("second", cpu="800m", runtime_s=1)  # 500m + 800m > the team's 1 cpu: it waits

    async def reason(name: str) -> bool:
        return name in await rig.reasons("second")

    await eventually(lambda: reason("BudgetWarning"), timeout_s=30, what="BudgetWarning on the waiting Job")
    await eventually(lambda: reason("BudgetExhausted"), timeout_s=30, what="BudgetExhausted on the waiting Job")
    assert running(await rig.job("first")), "a spent budget never stops running work"
    await rig.wait_job("first", complete, "first runs to its end", timeout_s=40)

    runtime = controller.runtime
    assert runtime.controller is not None
    manager = runtime.controller.manager
    workload = f"Job/{rig.namespace}/second"
    await eventually(lambda: not any(manager.usage.values()), what="first's quota released")
    await eventually(
        lambda: manager.messages.get(workload, "").startswith("budget spent: team ml's day budget"),
        what="second refused for the budget",
    )
    assert suspended(await rig.job("second")), "not admitted while the day's budget is spent"
