"""Four kinds of three teams in one cohort on the real control plane, with a checkpointed preemption across kinds.

tests/e2e/quota-cohort.yaml: vision, nlp and speech hold one CPU each in the cohort `lab` and may borrow one more.
vision runs a JobSet gang (5 pods); nlp runs a PyTorchJob (low priority) and, borrowing speech's idle CPU, a batch
Job (high priority). Then speech submits a RayJob: to reclaim its CPU kuota picks nlp's lower-priority borrower, the
PyTorchJob, asks it to checkpoint through its annotations, suspends it once it answers, waits until its operator
reports it stopped, and only then starts the RayJob. When the batch Job ends, the PyTorchJob runs again, told where
to resume. The operators are played by the test (tests/kube/kinds.py); the Job is the real Job controller's.

Nothing is over quota at any moment: a sampler reads the pods that exist every 100 ms (what the cluster really
runs, per team and in the cohort), and afterwards every instant of the ledger's usage intervals is summed.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client
from sqlalchemy import text

from tests.e2e.conftest import Rig, eventually, running
from tests.kube.kinds import Operator, example, kind
from tests.kube.manifests import complete

pytestmark = pytest.mark.quota_template("quota-cohort.yaml")

TEAM_LIMIT_M = 2000  # nominal 1 CPU + borrowing limit 1 CPU
COHORT_M = 3000  # three teams' nominal CPU
#: name → (kind, team, CPU per pod)
OBJECTS = {
    "vision-gang": ("JobSet", "vision", "200m"),  # 5 pods: 1 CPU
    "nlp-pt": ("PyTorchJob", "nlp", "500m"),  # 2 pods: 1 CPU
    "speech-ray": ("RayJob", "speech", "500m"),  # 2 pods: 1 CPU
}
BATCH = "nlp-batch"  # 1 pod of 1 CPU, high priority, nlp's borrower of speech's CPU


def _milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


def _team_of_pod(pod: Any) -> str | None:
    labels = pod.metadata.labels or {}
    owner = labels.get("testing.kuota.dev/owner") or labels.get("job-name")
    if owner == BATCH:
        return "nlp"
    return OBJECTS[owner][1] if owner in OBJECTS else None


async def sample_pods(rig: Rig, seen: list[dict[str, int]]) -> None:
    """Every 100 ms, the CPU that the pods which exist and have not ended ask for, per team and in all."""
    core = client.CoreV1Api(rig.admin)
    while True:
        pods = await core.list_namespaced_pod(rig.namespace)
        use: dict[str, int] = defaultdict(int)
        for pod in pods.items:
            team = _team_of_pod(pod)
            if team is None or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
                continue
            for container in pod.spec.containers:
                use[team] += _milli(((container.resources and container.resources.requests) or {}).get("cpu", "0"))
        use["cohort"] = sum(use.values())
        seen.append(dict(use))
        await asyncio.sleep(0.1)


def _peaks(intervals: list[tuple[str, int, datetime, datetime | None]]) -> dict[str, int]:
    """The most CPU each team, and the cohort, held at any instant of the ledger's usage intervals."""
    instants = sorted({start for _, _, start, _ in intervals})
    peaks: dict[str, int] = defaultdict(int)
    for instant in instants:
        held: dict[str, int] = defaultdict(int)
        for team, milli, start, end in intervals:
            if start <= instant and (end is None or instant < end):
                held[team] += milli
        for team, milli in held.items():
            peaks[team] = max(peaks[team], milli)
        peaks["cohort"] = max(peaks["cohort"], sum(held.values()))
    return dict(peaks)


async def _answer_checkpoint(rig: Rig, name: str, checkpoint: str) -> None:
    """The training code of the PyTorchJob: when kuota asks for a checkpoint, write one and say where."""
    await rig.wait(
        "PyTorchJob",
        name,
        lambda o: "kuota.dev/checkpoint-requested-at" in (o["metadata"].get("annotations") or {}),
        "asked to checkpoint",
        timeout_s=30,
    )
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    answer = {"kuota.dev/checkpoint-completed-at": stamp, "kuota.dev/checkpoint-id": checkpoint}
    await rig.patch("PyTorchJob", name, {"metadata": {"annotations": answer}})


def _started(name: str) -> Any:
    job_kind = kind(OBJECTS[name][0])
    return lambda o: not job_kind.is_suspended(o)


async def test_jobset_pytorchjob_rayjob_and_jobs_share_a_cohort(krig: Rig) -> None:
    rig = krig
    samples: list[dict[str, int]] = []
    operator = Operator(rig.admin, rig.namespace)
    tasks = [
        asyncio.create_task(operator.play({name: k for name, (k, _, _) in OBJECTS.items()})),
        asyncio.create_task(sample_pods(rig, samples)),
    ]
    try:
        controller = await rig.controller()
        runtime = controller.runtime

        def submit(name: str, **labels: str) -> Any:
            kind_name, team, cpu = OBJECTS[name]
            return rig.create(example(kind_name, name, namespace=rig.namespace, queue=team, cpu=cpu, labels=labels))

        await submit("vision-gang")
        await submit("nlp-pt")
        await rig.wait("JobSet", "vision-gang", _started("vision-gang"), "the gang admitted")
        await rig.wait("PyTorchJob", "nlp-pt", _started("nlp-pt"), "admitted")
        assert runtime.controller is not None  # leading since it admitted
        await rig.create_job(
            BATCH, cpu="1", runtime_s=12, labels={"kuota.dev/queue": "nlp", "kuota.dev/priority-class": "high"}
        )
        await rig.wait_job(BATCH, running, "admitted on speech's idle CPU")

        await submit("speech-ray")
        await _answer_checkpoint(rig, "nlp-pt", "s3://nlp/pt/step-300")
        await rig.wait("RayJob", "speech-ray", _started("speech-ray"), "admitted once nlp-pt stopped", timeout_s=30)
        victim = await rig.get("PyTorchJob", "nlp-pt")
        assert kind("PyTorchJob").is_suspended(victim)
        assert running(await rig.job(BATCH))  # the high-priority borrower kept running

        # The batch Job ends; nlp's PyTorchJob fits its own quota again and is told where to resume.
        await rig.wait_job(BATCH, complete, "completes", timeout_s=40)
        again = await rig.wait("PyTorchJob", "nlp-pt", _started("nlp-pt"), "readmitted", timeout_s=30)
        assert again["metadata"]["annotations"]["kuota.dev/resume-from"] == "s3://nlp/pt/step-300"

        for name, (kind_name, _, _) in OBJECTS.items():
            await operator.succeed(kind_name, await rig.get(kind_name, name))
        manager = runtime.controller.manager
        await eventually(lambda: not manager.workloads, what="every workload finished and released")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    assert samples
    teams = ("vision", "nlp", "speech")
    over = [s for s in samples if s["cohort"] > COHORT_M or any(s.get(t, 0) > TEAM_LIMIT_M for t in teams)]
    assert not over, over[:3]

    assert runtime.ledger is not None
    await runtime.ledger.flush()
    async with runtime.ledger.engine.connect() as connection:
        intervals = [
            (team, milli, start, end)
            for team, milli, start, end in (
                await connection.execute(
                    text(
                        "SELECT team, quantity_milli, started_at, ended_at FROM usage_intervals WHERE resource = 'cpu'"
                    )
                )
            ).all()
        ]
        preemptions = (await connection.execute(text("SELECT victim, preemptor, checkpoint_id FROM preemptions"))).all()
    peaks = _peaks(intervals)
    assert peaks["cohort"] == COHORT_M, peaks  # the cohort was full, never over
    assert all(peaks[team] <= TEAM_LIMIT_M for team in teams), peaks
    assert peaks["nlp"] == TEAM_LIMIT_M  # nlp did borrow
    ns = rig.namespace
    assert [tuple(row) for row in preemptions] == [
        (f"PyTorchJob/{ns}/nlp-pt", f"RayJob/{ns}/speech-ray", "s3://nlp/pt/step-300")
    ]
