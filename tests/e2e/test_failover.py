"""Two kuota controllers, one Lease: only the leader decides; when it dies the other takes over, rebuilding its
state from the Jobs and the ledger, and admits nothing twice."""

from __future__ import annotations

from sqlalchemy import text

from kuota.components.controller import ControllerComponent
from tests.e2e.conftest import Rig, eventually
from tests.e2e.test_lifecycle import complete, queued_job


async def leader_of(rig: Rig) -> ControllerComponent:
    return await eventually(lambda: next((c for c in rig.controllers if c.runtime.leader), None), what="a leader")


async def test_standby_takes_over_when_the_leader_dies(rig: Rig) -> None:
    await rig.controller()
    await rig.controller()
    first = await leader_of(rig)
    assert sum(c.runtime.leader for c in rig.controllers) == 1
    for name in ("a", "b"):
        await rig.batch.create_namespaced_job("default", queued_job(name, cpu="400m", runtime_s=4))
    await eventually(lambda: all(rig.job(n)["spec"].get("suspend") is False for n in ("a", "b")))
    await rig.batch.create_namespaced_job("default", queued_job("c", cpu="400m", runtime_s=0.3))

    await first.kill()  # no Lease release, no flush: a crash
    rig.controllers.remove(first)
    second = await leader_of(rig)
    assert second is not first
    assert second.runtime.controller is not None
    # The new leader found a and b running (with their admissions) and c still waiting for quota.
    running = {n for n, w in second.runtime.controller.manager.workloads.items() if w.admission is not None}
    assert {"default/a", "default/b"} <= running
    for name in ("a", "b", "c"):
        await eventually(lambda n=name: complete(rig.job(n)), timeout_s=15, what=f"{name} completes")

    assert second.runtime.ledger is not None
    await second.runtime.ledger.flush()
    async with second.runtime.ledger.engine.connect() as connection:
        rows = (await connection.execute(text("SELECT workload_id, attempt FROM admissions"))).all()
    admitted = [w for w, _ in rows]
    assert sorted(admitted) == sorted(set(admitted)), f"admitted twice: {rows}"
    assert {"default/c"} <= set(admitted)


async def test_graceful_shutdown_hands_over_at_once(rig: Rig) -> None:
    await rig.controller(lease_duration=30)
    await rig.controller(lease_duration=30)
    first = await leader_of(rig)
    await first.stop()  # releases the Lease: the standby need not wait 30 s
    rig.controllers.remove(first)
    second = await leader_of(rig)
    assert second is not first
    lease = rig.server.get_object("Lease", "kuota-system", "kuota-controller")
    assert lease is not None and lease["spec"]["holderIdentity"] == second.identity
