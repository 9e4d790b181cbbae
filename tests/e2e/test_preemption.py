"""Preemption on a cluster: the victim is asked to checkpoint through its annotations, then suspended (when it
answers, or when its priority class's checkpointTimeout runs out), requeued, and the preemptor runs."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.e2e.conftest import Rig, eventually
from tests.e2e.test_lifecycle import queued_job

MERGE = "application/merge-patch+json"


def annotations(rig: Rig, name: str) -> dict[str, str]:
    return rig.job(name)["metadata"].get("annotations") or {}


def reasons(rig: Rig, name: str) -> list[str]:
    return [e["reason"] for e in rig.server.objects("Event", "default") if e["involvedObject"]["name"] == name]


async def start_victim_and_preemptor(rig: Rig) -> None:
    await rig.batch.create_namespaced_job("default", queued_job("victim", cpu="800m", runtime_s=60))
    await eventually(lambda: rig.job("victim")["spec"].get("suspend") is False, what="victim admitted")
    await rig.batch.create_namespaced_job(
        "default", queued_job("urgent", cpu="800m", runtime_s=0.3, **{"kuota.dev/priority-class": "high"})
    )


async def test_checkpoint_handshake_acked_then_preemptor_runs(rig: Rig) -> None:
    controller = await rig.controller()
    await start_victim_and_preemptor(rig)
    await eventually(lambda: "kuota.dev/checkpoint-requested-at" in annotations(rig, "victim"), what="checkpoint asked")
    assert rig.job("victim")["spec"]["suspend"] is False  # not killed before it answers

    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await rig.batch.patch_namespaced_job(  # the job's own checkpoint code answering
        "victim",
        "default",
        {
            "metadata": {
                "annotations": {"kuota.dev/checkpoint-completed-at": stamp, "kuota.dev/checkpoint-id": "ckpt-7"}
            }
        },
        _content_type=MERGE,
    )
    await eventually(lambda: rig.job("victim")["spec"]["suspend"] is True, what="victim suspended after its ack")
    await eventually(lambda: rig.job("urgent")["spec"].get("suspend") is False, what="preemptor admitted")
    assert controller.runtime.controller is not None
    track = controller.runtime.controller.tracking["default/victim"]
    assert track.resume_from == "ckpt-7"
    await eventually(lambda: "Requeued" in reasons(rig, "victim"))
    assert {"Preempted", "CheckpointRequested", "CheckpointAcked", "Suspended"} <= set(reasons(rig, "victim"))
    assert "CheckpointTimedOut" not in reasons(rig, "victim")


async def test_checkpoint_timeout_suspends_anyway(rig: Rig) -> None:
    await rig.controller()
    await start_victim_and_preemptor(rig)
    await eventually(lambda: "kuota.dev/checkpoint-requested-at" in annotations(rig, "victim"))
    # The victim never answers: its class (low) gives it 1.5 s.
    await eventually(lambda: rig.job("victim")["spec"]["suspend"] is True, timeout_s=5, what="suspended at deadline")
    await eventually(lambda: rig.job("urgent")["spec"].get("suspend") is False, what="preemptor admitted")
    await eventually(lambda: "CheckpointTimedOut" in reasons(rig, "victim"))
