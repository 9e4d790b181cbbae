"""The Kubernetes adapter tells the controller how many of an admitted Job's pods are ready, from each status it
sees: also for a Job found already running when the controller starts (its readiness is known at once, not at its
next change, so a ready gang is never timed out for want of a watch event); a gated pod's from its Ready
condition. A queued Job that carries kuota's
deactivation mark stays out of the queue for a controller that starts later."""

from __future__ import annotations

import copy
from typing import Any

from admission.labels import ADMITTED_FLAVOR, DEACTIVATED
from clusters.kube.cluster import KubeCluster
from queues.controller import Controller
from queues.journal import RecordingJournal
from queues.loop import LoopTimers
from quota.config import QuotaConfig, WaitForPodsReady
from quota.loader import load_config_text
from workloads.kinds.job import JOB
from workloads.registry import REGISTRY

from ...workloads.examples import manifest, submitted
from .test_gated import CONFIG as GATED_CONFIG
from .test_gated import Rig as GatedRig
from .test_gated import admitted_plain_pod

CONFIG = load_config_text(
    """
flavors: [{name: default}]
waitForPodsReady: {timeout: 1m, recoveryTimeout: 30s}
teams:
  - name: ml
    queues: [ml/ml]
    quotas: [{flavor: default, resources: {cpu: {nominal: 100}, memory: {nominal: 1Ti}}}]
"""
)


def running_job(name: str, ready: int) -> dict[str, Any]:
    """Kueue's sample Job (3 pods at once), admitted by kuota and running, with `ready` pods ready."""
    obj = submitted(copy.deepcopy(manifest("kueue/jobs__sample-job.yaml")[1]))
    obj["metadata"]["name"] = name
    obj["metadata"].pop("generateName", None)
    obj["metadata"].setdefault("annotations", {})[ADMITTED_FLAVOR] = "default"
    obj["spec"]["suspend"] = False
    obj["status"] = {"active": 3, "ready": ready}
    return obj


def rig() -> tuple[KubeCluster, Controller]:
    now = 1_000_000
    cluster = KubeCluster(object(), lambda: CONFIG, kinds=REGISTRY.enabled(["Job"]), clock=lambda: now)  # type: ignore[arg-type]
    controller = Controller(CONFIG, cluster, LoopTimers(), RecordingJournal())
    cluster.attach(controller, None)
    return cluster, controller


def test_a_job_found_running_reports_its_readiness_at_once() -> None:
    cluster, controller = rig()
    cluster.observe(JOB, running_job("ready", 3))
    cluster.observe(JOB, running_job("starting", 1))
    assert set(controller.manager.workloads) == {"Job/ml/ready", "Job/ml/starting"}
    assert controller.not_ready == {"Job/ml/starting"}
    assert controller.tracking["Job/ml/starting"].ready_deadline == 1_000_000 + 60_000


def test_each_status_change_is_reported() -> None:
    cluster, controller = rig()
    cluster.observe(JOB, running_job("train", 1))
    assert controller.not_ready == {"Job/ml/train"}
    cluster.observe(JOB, running_job("train", 3))
    assert not controller.not_ready
    cluster.observe(JOB, running_job("train", 2))  # a pod failed: the recovery timeout runs
    assert controller.not_ready == {"Job/ml/train"}
    assert controller.tracking["Job/ml/train"].ready_deadline == 1_000_000 + 30_000


def test_a_queued_job_marked_deactivated_stays_out_of_the_queue() -> None:
    cluster, controller = rig()
    marked = running_job("marked", 0)
    marked["spec"]["suspend"] = True
    marked["metadata"]["annotations"] = {DEACTIVATED: "deactivated: its pods were not all ready in time 2 times"}
    plain = running_job("plain", 0)
    plain["spec"]["suspend"] = True
    plain["metadata"]["annotations"] = {}
    cluster.observe(JOB, marked)
    cluster.observe(JOB, plain)
    assert controller.manager.deactivated == {"Job/ml/marked"}
    assert controller.manager.messages["Job/ml/marked"].endswith("2 times")
    assert [w.name for w in controller.manager.heads()] == ["Job/ml/plain"]


async def test_a_gated_pods_readiness_comes_from_its_ready_condition() -> None:
    gated = GatedRig()
    gated.controller = Controller(gated_config(), gated.cluster, LoopTimers(), gated.journal, backoff_base_ms=60_000)
    gated.cluster.attach(gated.controller, None)
    key = await admitted_plain_pod(gated)
    gated.cluster.gated.pod_event("MODIFIED", gated.server.pod("kueue-sleep-x7k2p"))
    assert gated.controller.not_ready == {key}, "let go but not ready yet"
    ready = copy.deepcopy(gated.server.pod("kueue-sleep-x7k2p"))
    ready["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    gated.cluster.gated.pod_event("MODIFIED", ready)
    assert not gated.controller.not_ready


def gated_config() -> QuotaConfig:
    return GATED_CONFIG.model_copy(update={"wait_for_pods_ready": WaitForPodsReady(timeout=60_000)})
