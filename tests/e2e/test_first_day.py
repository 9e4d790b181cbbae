"""README's first day, as written: `make try-kuota` against the control plane of `make cluster`, the sample Job four
times, the kuota client with the token try-kuota made, and a production Job that preempts with a checkpoint.

The control plane is the one `make cluster` starts (A100 nodes labelled and tainted as the Makefile's NODE_ARGS
have them), testing/try-kuota.sh runs unchanged (only its ports are moved to free ones), and the Jobs are
config/samples/job-nlp.yaml. The walk once promised that the second Job would borrow, which nlp's quota (16
nominal + 8 borrowing) does not allow for two 8-GPU pods; this test keeps README and the sample honest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_deployment import free_port
from tests.kube.controlplane import REPO, ControlPlane

SAMPLE = REPO / "config" / "samples" / "job-nlp.yaml"
# The Makefile's NODE_ARGS: what config/deploy/configmap.yaml's flavor selects and tolerates.
A100_LABELS = "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB,nvidia.com/gpu.count=8"
A100_TAINTS = "nvidia.com/gpu=present:NoSchedule"


def kuota_command() -> str:
    """The `kuota` script of the environment running the tests (make's .venv)."""
    return str(Path(sys.executable).parent / "kuota")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("first-day"))
    plane.up(nodes=8, node_labels=A100_LABELS, node_taints=A100_TAINTS)
    try:
        yield plane
    finally:
        plane.down()


@pytest.fixture(scope="module")
def try_kuota(plane: ControlPlane) -> Iterator[dict[str, str]]:
    """testing/try-kuota.sh running; the environment README tells the reader to export for the kuota client."""
    webhook_port, admin_port = free_port(), free_port()
    env = dict(os.environ, CLUSTER_DIR=str(plane.root), WEBHOOK_PORT=str(webhook_port), ADMIN_PORT=str(admin_port))
    env["KUOTA"] = kuota_command()
    log = plane.root / "try-kuota.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", str(REPO / "testing" / "try-kuota.sh")], cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 120
        while b'"event":"leading"' not in log.read_bytes():
            assert process.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(0.2)
        text = log.read_text(errors="replace")
        assert f"export KUOTA_SERVER=http://127.0.0.1:{admin_port} KUOTA_TOKEN=" in text
        token = (plane.root / "try" / "admin-token").read_text().strip()
        yield {"KUOTA_SERVER": f"http://127.0.0.1:{admin_port}", "KUOTA_TOKEN": token}
    finally:
        process.send_signal(signal.SIGTERM)  # the script exec'd kuota serve: this is kuota's pid
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def kubectl_json(plane: ControlPlane, *args: str) -> Any:
    return json.loads(plane.kubectl(*args, "-o", "json").stdout)


def jobs(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in kubectl_json(plane, "-n", "nlp", "get", "jobs")["items"]}


def until(check: Any, timeout_s: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not reached in {timeout_s:.0f} s: {what}"
        time.sleep(0.5)


def client(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [kuota_command(), *args, "-o", "json"], env=dict(os.environ, **env), capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_the_readme_walk(plane: ControlPlane, try_kuota: dict[str, str]) -> None:
    plane.kubectl("create", "namespace", "nlp")
    for _ in range(4):
        plane.kubectl("create", "-f", str(SAMPLE))

    def three_run_one_waits() -> bool:
        suspended = [j.get("spec", {}).get("suspend") for j in jobs(plane).values()]
        return suspended.count(False) == 3 and suspended.count(True) == 1

    until(three_run_one_waits, what="three Jobs admitted (the third borrowing), the fourth waiting")
    waiting = next(name for name, j in jobs(plane).items() if j["spec"]["suspend"])

    # The kuota client, with the token try-kuota made: the waiting Job, and why.
    queues = json.dumps(client(try_kuota, "queues"))
    assert f"Job/nlp/{waiting}" in queues and "insufficient unused quota for nvidia.com/gpu" in queues
    why = client(try_kuota, "why", f"nlp/{waiting}")
    assert json.dumps(why).count("nvidia.com/gpu") >= 1

    # A production Job preempts a research Job of nlp with a checkpoint request.
    production = SAMPLE.read_text().replace("research", "production").replace("llm-sft-", "urgent-")
    plane.kubectl("create", "-f", "-", input=production)

    def preempted_with_checkpoint() -> bool:
        events = kubectl_json(plane, "-n", "nlp", "get", "events")["items"]
        preempted = {e["involvedObject"]["name"]: e["message"] for e in events if e["reason"] == "Preempted"}
        asked = {name for name, message in preempted.items() if "checkpoint requested via" in message}
        return bool(asked) and all(n.startswith("llm-sft-") for n in preempted)

    until(preempted_with_checkpoint, what="a research Job preempted and asked to checkpoint")
