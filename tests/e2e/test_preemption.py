"""Preemption on the real control plane, over both checkpoint hooks: the victim is asked to checkpoint (through
its annotations, or by a POST to its checkpoint URL), then suspended when it answers or when its priority class's
checkpointTimeout runs out; the Job controller deletes its pods, kuota requeues it, the preemptor runs, and when
the victim is admitted again it is told where to resume."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.e2e.conftest import Rig, checkpoint_hook, eventually, running, suspended

MERGE = "application/merge-patch+json"


async def start_victim_and_preemptor(rig: Rig, **victim: Any) -> None:
    await rig.create_job("victim", cpu="800m", **victim)  # runs until stopped
    await rig.wait_job("victim", running, "admitted")
    await eventually(lambda: rig.pods("victim"), what="victim's pod exists")
    await rig.create_job("urgent", cpu="800m", runtime_s=1, labels={"kuota.dev/priority-class": "high"})


async def test_annotation_handshake_acked_then_preemptor_runs(rig: Rig) -> None:
    controller = await rig.controller()
    await start_victim_and_preemptor(rig)
    await eventually(
        lambda: rig.job_matches(
            "victim", lambda j: "kuota.dev/checkpoint-requested-at" in j["metadata"]["annotations"]
        ),
        what="checkpoint asked",
    )
    assert running(await rig.job("victim"))  # not stopped before it answers

    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # The job's own checkpoint code answering: the annotations kuota documents (alice may set these two).
    await rig.batch.patch_namespaced_job(
        "victim",
        rig.namespace,
        {
            "metadata": {
                "annotations": {"kuota.dev/checkpoint-completed-at": stamp, "kuota.dev/checkpoint-id": "ckpt-7"}
            }
        },
        _content_type=MERGE,
    )
    await rig.wait_job("victim", suspended, "suspended after its ack")
    await eventually(lambda: _no_pods(rig, "victim"), what="the Job controller removed the victim's pods")
    await rig.wait_job("urgent", running, "preemptor admitted")
    assert controller.runtime.controller is not None
    track = controller.runtime.controller.tracking[f"Job/{rig.namespace}/victim"]
    assert track.resume_from == "ckpt-7"
    await eventually(lambda: _reasons_include(rig, "victim", "Requeued"), what="requeued")
    # One Event for the eviction with its checkpoint request, one for the suspension with the handshake's end.
    told = await rig.told("victim")
    assert "CheckpointTimedOut" not in told and "CheckpointRequested" not in told, told
    assert any("checkpoint requested via annotation" in m for m in told["Preempted"]), told
    assert any("(checkpoint ckpt-7 done)" in m for m in told["Suspended"]), told
    # The preemptor waited for its victim: told it was queued. (A Job admitted at once is told Admitted alone.)
    assert "Queued" in await rig.reasons("urgent")

    # Once the preemptor is done the victim runs again, told where to resume.
    readmitted = await rig.wait_job("victim", running, "readmitted", timeout_s=30)
    assert readmitted["metadata"]["annotations"]["kuota.dev/resume-from"] == "ckpt-7"


async def test_checkpoint_url_hook_acked(rig: Rig) -> None:
    async with checkpoint_hook("s3://ckpt/step-1200") as (url, calls):
        controller = await rig.controller()
        await start_victim_and_preemptor(rig, labels={}, annotations={"kuota.dev/checkpoint-url": url})
        await rig.wait_job("victim", suspended, "suspended after the hook answered")
        await rig.wait_job("urgent", running, "preemptor admitted")
        assert calls and calls[0]["workload"] == f"Job/{rig.namespace}/victim"
        assert {"reason", "deadline"} <= set(calls[0])
        assert controller.runtime.controller is not None
        track = controller.runtime.controller.tracking[f"Job/{rig.namespace}/victim"]
        assert track.resume_from == "s3://ckpt/step-1200"
        assert "CheckpointTimedOut" not in await rig.reasons("victim")


async def test_checkpoint_timeout_suspends_anyway(rig: Rig) -> None:
    await rig.controller()
    await start_victim_and_preemptor(rig)
    await eventually(
        lambda: rig.job_matches(
            "victim", lambda j: "kuota.dev/checkpoint-requested-at" in j["metadata"]["annotations"]
        ),
        what="checkpoint asked",
    )
    # The victim never answers: its class (low) gives it 1.5 s.
    await rig.wait_job("victim", suspended, "suspended at the deadline", timeout_s=10)
    await rig.wait_job("urgent", running, "preemptor admitted")
    await eventually(lambda: _reasons_include(rig, "victim", "CheckpointTimedOut"), what="timed out event")


async def _no_pods(rig: Rig, job: str) -> bool:
    return not await rig.pods(job)


async def _reasons_include(rig: Rig, job: str, reason: str) -> bool:
    return reason in await rig.reasons(job)
