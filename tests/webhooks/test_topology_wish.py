"""The validating webhook on a Job's topology wish: a level no topology of the quota file has is denied at its
annotation, a known one goes through."""

from __future__ import annotations

import copy

from quota.loader import load_config_text
from webhooks.state import WebhookState

from .helpers import QUOTA_FILE, call, gpu_job, mutated, review

TOPOLOGY = (
    "topologies:\n"
    "  - {name: fabric, levels: [topology.kuota.dev/block, topology.kuota.dev/rack, kubernetes.io/hostname]}\n"
)


def _state() -> WebhookState:
    text = QUOTA_FILE.read_text(encoding="utf-8").replace(
        "  - name: gpu-a100\n", "  - name: gpu-a100\n    topology: fabric\n", 1
    )
    return WebhookState(load_config_text(TOPOLOGY + text))


def _job_with(state: WebhookState, level: str) -> dict[str, object]:
    job = copy.deepcopy(gpu_job(parallelism=2))
    template = job["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})["kuota.dev/topology-required"] = level
    return mutated(state, job)


def test_an_unknown_level_is_denied_at_its_annotation() -> None:
    state = _state()
    response = call("validate", state, review(_job_with(state, "example.com/row")))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "metadata.annotations[kuota.dev/topology-required]" in message
    assert "'example.com/row', a level of no topology in the quota file" in message


def test_a_known_level_is_let_through() -> None:
    state = _state()
    response = call("validate", state, review(_job_with(state, "topology.kuota.dev/rack")))
    assert response["allowed"] is True, response
