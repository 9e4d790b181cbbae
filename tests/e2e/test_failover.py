"""Two `kuota serve` processes, one real Lease: only the leader decides; when it is killed the other takes over,
rebuilding its state from the Jobs and the ledger, and admits nothing twice; when it is stopped it hands over at
once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from sqlalchemy import create_engine, text

from kuota.components.controller import LEADER_LABEL
from tests.e2e.conftest import Rig, eventually, running
from tests.kube.manifests import complete


def serve(rig: Rig, name: str, *, lease_duration: int) -> subprocess.Popen[bytes]:
    kubeconfig = rig.kuota_kubeconfig(name=name)
    argv = [
        str(Path(sys.executable).with_name("kuota")), "serve", "--components", "controller",
        "--config", str(rig.quota), "--kubeconfig", str(kubeconfig), "--database-url", rig.database_url,
        "--lease-duration", str(lease_duration), "--requeue-backoff", "1s",
    ]  # fmt: skip
    log = (rig.tmp / f"{name}.log").open("wb")
    env = {**os.environ, "POD_NAME": name, "POD_NAMESPACE": "kuota-system"}
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


@pytest.fixture
async def replica_pods(rig: Rig) -> AsyncIterator[None]:
    """The pods the two replicas would run in (kwok leaves them pending: what matters is their labels)."""
    core = client.CoreV1Api(rig.admin)
    for name in ("kuota-a", "kuota-b"):
        body = {
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "kuota"}},
            "spec": {"containers": [{"name": "kuota", "image": "registry.invalid/kuota:1"}]},
        }
        await core.create_namespaced_pod("kuota-system", body)
    try:
        yield
    finally:
        for name in ("kuota-a", "kuota-b"):
            await core.delete_namespaced_pod(name, "kuota-system", grace_period_seconds=0)


async def leader_pods(rig: Rig) -> set[str]:
    """The replicas' pods labelled as the leader's: what config/deploy's kuota-admin Service selects."""
    found = await client.CoreV1Api(rig.admin).list_namespaced_pod("kuota-system", label_selector=f"{LEADER_LABEL}=true")
    return {pod.metadata.name for pod in found.items}


async def holder(rig: Rig) -> str | None:
    try:
        lease = await client.CoordinationV1Api(rig.admin).read_namespaced_lease("kuota-controller", "kuota-system")
    except ApiException:
        return None
    return lease.spec.holder_identity or None


async def start_pair(rig: Rig, *, lease_duration: int) -> tuple[dict[str, subprocess.Popen[bytes]], str]:
    """Two replicas, started one after the other: both migrate the shared SQLite ledger at start, and two
    migrations at once on one SQLite file collide ("database is locked"); the second waits for the first to
    lead, then for its own controller to be up."""
    processes = {"kuota-a": serve(rig, "kuota-a", lease_duration=lease_duration)}
    first = await eventually(lambda: holder(rig), timeout_s=30, what="a leader")
    processes["kuota-b"] = serve(rig, "kuota-b", lease_duration=lease_duration)
    await eventually(
        lambda: "controller_started" in _log(rig, "kuota-b") or processes["kuota-b"].poll() is not None,
        timeout_s=30,
        what="the second replica is up",
    )
    assert processes["kuota-b"].poll() is None, _log(rig, "kuota-b")[-2000:]
    return processes, first


def stop_all(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_standby_takes_over_when_the_leader_is_killed(rig: Rig, replica_pods: None) -> None:
    processes, first = await start_pair(rig, lease_duration=2)
    try:
        leader = first.split("_")[0]
        await eventually(lambda: _labelled(rig, {leader}), what="the leader labels its pod")
        for name in ("a", "b"):
            await rig.create_job(name, cpu="400m", runtime_s=5)
        for name in ("a", "b"):
            await rig.wait_job(name, running, "admitted by the first leader")
        await rig.create_job("c", cpu="400m", runtime_s=0.5)

        processes[leader].send_signal(signal.SIGKILL)  # no Lease release, no flush: a crash
        processes[leader].wait()
        second = await eventually(
            lambda: _other_holder(rig, first), timeout_s=20, what="the standby takes the expired Lease"
        )
        assert second.split("_")[0] != leader
        # The killed leader could not take its label back; the pod's next container does, at start.
        await eventually(lambda: _labelled(rig, {"kuota-a", "kuota-b"}), what="the new leader labels its pod")
        processes[leader] = serve(rig, leader, lease_duration=2)
        await eventually(lambda: _labelled(rig, {second.split("_")[0]}), what="the restarted replica unlabels")
        for name in ("a", "b", "c"):
            await rig.wait_job(name, complete, "completes", timeout_s=40)
    finally:
        stop_all(*processes.values())

    engine = create_engine(rig.database_url.replace("+aiosqlite", ""))
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT workload_id, attempt FROM admissions")).all()
    engine.dispose()
    admitted = [workload for workload, _ in rows]
    assert sorted(admitted) == sorted(set(admitted)), f"admitted twice: {rows}"
    assert {f"Job/{rig.namespace}/{n}" for n in ("a", "b", "c")} <= set(admitted)


async def _labelled(rig: Rig, expected: set[str]) -> bool:
    return await leader_pods(rig) == expected


async def _other_holder(rig: Rig, first: str) -> str | None:
    now = await holder(rig)
    return now if now and now != first else None


async def test_graceful_shutdown_hands_over_at_once(rig: Rig, replica_pods: None) -> None:
    # A 60 s Lease: without the release the standby could not take over for a minute; it retries every 12 s.
    processes, first = await start_pair(rig, lease_duration=60)
    try:
        await asyncio.sleep(1)  # the standby has tried and found the Lease held
        leader = first.split("_")[0]
        processes[leader].send_signal(signal.SIGTERM)  # releases the Lease: the standby need not wait 60 s
        assert processes[leader].wait(20) == 0
        second = await eventually(lambda: _other_holder(rig, first), timeout_s=30, what="handed over at its next try")
        assert second.split("_")[0] != leader
        # Stopping, the old leader took its label back; the new one labelled its own pod.
        await eventually(lambda: _labelled(rig, {second.split("_")[0]}), what="the label moved with the Lease")
    finally:
        stop_all(*processes.values())


def _log(rig: Rig, name: str) -> str:
    path: Path = rig.tmp / f"{name}.log"
    return path.read_text(errors="replace") if path.exists() else ""
