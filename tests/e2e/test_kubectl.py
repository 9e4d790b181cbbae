"""kubectl (built from the same Kubernetes release as the control plane) against kuota: a Job created with
`kubectl create` by a user is queued by kuota's webhook inside kube-apiserver, admitted and run."""

from __future__ import annotations

import asyncio

import yaml

from tests.e2e.conftest import USER, Rig, running
from tests.kube.manifests import complete


async def test_kubectl_create_job_is_queued_and_admitted(rig: Rig) -> None:
    await rig.controller()
    manifest = yaml.safe_dump(rig.manifest("from-kubectl", runtime_s=0.5))
    done = await asyncio.to_thread(
        rig.plane.kubectl, "--as", USER, "create", "-f", "-", "-o", "jsonpath={.spec.suspend}", input=manifest
    )
    assert done.stdout == "true"  # suspended by the mutating webhook before kubectl saw it
    await rig.wait_job("from-kubectl", running, "admitted")
    await rig.wait_job("from-kubectl", complete, "run", timeout_s=30)
    listed = await asyncio.to_thread(rig.plane.kubectl, "get", "events", "-n", rig.namespace, "-o", "name")
    assert listed.stdout.strip()
