"""Every suspend-switch kind through kuota on the real control plane, with its upstream CRD installed.

Each kind's own CRD (../shared/data/crds) is installed server-side, so kube-apiserver validates every object and
every status against the operator's schema; kuota's webhooks and RBAC are those `kuota manifests --kinds` makes of
config/deploy. The user alice creates the kind's upstream example: kube-apiserver calls kuota's webhook for the
kind's path, which suspends it; she may not start it herself, nor move it to another queue once admitted. kuota
admits it with one patch (node selector and toleration of the admitted flavor in every pod template, the switch
off), the test plays the operator (tests/kube/kinds.py), the scheduler binds the pods to kwok nodes the flavor
tolerates, and when the operator reports the end, kuota closes the ledger interval of `KIND/NAMESPACE/NAME`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from sqlalchemy import text

from tests.e2e.conftest import Rig, checkpoint_hook, eventually
from tests.kube.kinds import KINDS, KUEUE_SAMPLES, Operator, example, kind, kueue_sample, suspend_body

POOL_A = {"kuota.dev/pool": "a"}
TOLERATION = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}


async def denied(call: Any) -> str:
    with pytest.raises(ApiException) as caught:
        await call
    assert caught.value.status in (400, 403, 422), caught.value.body
    return str(caught.value.body)


def _templates_placed(kind_name: str, obj: dict[str, Any]) -> bool:
    templates = kind(kind_name).read_templates(obj)
    return bool(templates) and all(
        t.spec.get("nodeSelector") == POOL_A and TOLERATION in (t.spec.get("tolerations") or []) for t in templates
    )


async def _all_bound(operator: Operator, name: str, count: int) -> bool:
    pods = await operator.pods(name)
    return len(pods) == count and all(p["spec"].get("nodeName") for p in pods)


@pytest.mark.parametrize("kind_name", KINDS)
async def test_kind_is_queued_guarded_admitted_placed_and_released(krig: Rig, kind_name: str) -> None:
    job_kind = kind(kind_name)
    name = "train"
    key = f"{kind_name}/{krig.namespace}/{name}"

    created = await krig.create(example(kind_name, name, namespace=krig.namespace))
    assert job_kind.is_suspended(created)  # kube-apiserver called kuota's webhook on the kind's own path
    assert "only kuota may start" in await denied(krig.patch(kind_name, name, suspend_body(kind_name, False)))

    controller = await krig.controller()
    admitted = await krig.wait(kind_name, name, lambda o: not job_kind.is_suspended(o), "admitted")
    assert _templates_placed(kind_name, admitted), admitted["spec"]
    annotations = admitted["metadata"]["annotations"]
    assert annotations["kuota.dev/workload-id"] == key
    assert annotations["kuota.dev/admitted-flavor"] == "pool-a"
    moved = {"metadata": {"labels": {"kuota.dev/queue": "elsewhere"}}}
    assert "queue" in await denied(krig.patch(kind_name, name, moved))

    operator = Operator(krig.admin, krig.namespace)
    made = await operator.start(kind_name, admitted)
    assert len(made) == job_kind.pod_count(admitted)
    # The pods carry kuota's toleration of the nodes' taint: without it the scheduler would bind none.
    await eventually(lambda: _all_bound(operator, name, len(made)), what="the scheduler bound every pod")

    runtime = controller.runtime
    assert runtime.controller is not None
    assert key in runtime.controller.manager.workloads
    if kind_name == "RayCluster":
        await krig.delete(kind_name, name)  # a cluster never finishes: its quota is held until it goes
    else:
        await operator.succeed(kind_name, admitted)
    await eventually(lambda: key not in runtime.controller.manager.workloads, what="quota released")
    assert not any(runtime.controller.manager.usage.values())

    assert runtime.ledger is not None
    await runtime.ledger.flush()
    async with runtime.ledger.engine.connect() as connection:
        rows = (
            await connection.execute(text("SELECT ended_at FROM usage_intervals WHERE workload_id = :w"), {"w": key})
        ).all()
    assert rows and all(ended is not None for (ended,) in rows)
    events = await client.CoreV1Api(krig.admin).list_namespaced_event(krig.namespace)
    mine = {e.reason for e in events.items if (e.involved_object.kind, e.involved_object.name) == (kind_name, name)}
    assert "Admitted" in mine


async def test_a_gang_that_could_never_run_whole_is_refused_at_the_door(krig: Rig) -> None:
    # The team may ever hold 1 CPU. The JobSet's workers (4 × 220m) and driver (220m) each fit, but a gang runs
    # whole or not at all: kube-apiserver relays kuota's denial of the create.
    body = await denied(krig.create(example("JobSet", "too-big", namespace=krig.namespace, cpu="220m")))
    assert "2 pod sets need 1100m cpu together (880m + 220m)" in body
    assert "team ml can never hold more than 1 of it" in body


@pytest.mark.parametrize(
    "sample",
    [
        "jobs__sample-jobset.yaml",
        "jobs__sample-pytorchjob.yaml",
        "jobs__sample-mpijob.yaml",
        "jobs__ray-job-sample.yaml",
    ],
)
async def test_kueues_own_samples_with_kueues_label_are_queued_and_admitted(krig: Rig, sample: str) -> None:
    obj = kueue_sample(KUEUE_SAMPLES / sample, "from-kueue", namespace=krig.namespace)
    job_kind = kind(obj["kind"])
    created = await krig.create(obj)
    assert job_kind.is_suspended(created)  # the CEL matchCondition lets Kueue's label through to kuota
    await krig.controller()
    admitted = await krig.wait(obj["kind"], "from-kueue", lambda o: not job_kind.is_suspended(o), "admitted")
    assert _templates_placed(obj["kind"], admitted)
    assert admitted["metadata"]["annotations"]["kuota.dev/workload-id"] == f"{obj['kind']}/{krig.namespace}/from-kueue"


async def test_a_rayjob_checkpoints_over_its_url_before_a_jobset_takes_its_place(krig: Rig) -> None:
    """The URL hook style on a kind that is not a Job: the victim's checkpoint URL is POSTed, its answer is the
    checkpoint it resumes from; the operator (the test) stops the RayJob once kuota suspends it, and only then
    does the higher-priority JobSet start."""
    async with checkpoint_hook("s3://ray/step-42") as (url, calls):
        operator = Operator(krig.admin, krig.namespace)
        playing = asyncio.create_task(operator.play({"victim": "RayJob", "urgent": "JobSet"}))
        try:
            controller = await krig.controller()
            ray = kind("RayJob")
            victim = example(
                "RayJob", "victim", namespace=krig.namespace, cpu="400m", annotations={"kuota.dev/checkpoint-url": url}
            )
            await krig.create(victim)  # 2 pods × 400m of the team's 1 CPU
            await krig.wait("RayJob", "victim", lambda o: not ray.is_suspended(o), "admitted")
            urgent = example(
                "JobSet", "urgent", namespace=krig.namespace, cpu="150m", labels={"kuota.dev/priority-class": "high"}
            )
            await krig.create(urgent)  # 5 pods × 150m: fits only without the RayJob
            jobset = kind("JobSet")
            await krig.wait(
                "JobSet",
                "urgent",
                lambda o: not jobset.is_suspended(o),
                "admitted once the RayJob stopped",
                timeout_s=30,
            )
            assert ray.is_suspended(await krig.get("RayJob", "victim"))
            assert calls and calls[0]["workload"] == f"RayJob/{krig.namespace}/victim"
            runtime = controller.runtime
            assert runtime.controller is not None
            assert runtime.controller.tracking[f"RayJob/{krig.namespace}/victim"].resume_from == "s3://ray/step-42"
        finally:
            playing.cancel()
            await asyncio.gather(playing, return_exceptions=True)
