"""The requests kuota sends for every Job (clusters/kube/direct.py), answered by kube-apiserver itself.

Nothing reads their 2xx answers, so they ask for the object's metadata only; kube-apiserver must honour that for a
patch and an Event create, and still answer a refusal with a JSON Status that kuota can read and classify."""

from __future__ import annotations

import os

import orjson
from kubernetes_asyncio import client

from clusters.kube.direct import DirectRequests
from tests.e2e.conftest import admin_client, delete_namespace, make_namespace
from tests.kube.controlplane import ControlPlane
from tests.kube.manifests import job_manifest

MERGE = "application/merge-patch+json"


async def test_patches_and_events_are_answered_with_metadata_only(control_plane: ControlPlane) -> None:
    namespace = f"direct-{os.getpid() % 1000}"
    admin = await admin_client(control_plane)
    await make_namespace(admin, namespace)
    try:
        await client.BatchV1Api(admin).create_namespaced_job(
            namespace, job_manifest("j", namespace=namespace, suspend=True)
        )
        direct = DirectRequests(admin)
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs/j"
        patched = await direct.send("PATCH", path, b'{"metadata":{"annotations":{"a":"b"}}}', MERGE)
        assert patched.status == 200
        answer = orjson.loads(patched.body)
        assert answer["kind"] == "PartialObjectMetadata"
        assert answer["metadata"]["annotations"]["a"] == "b"  # the patch did apply
        assert "spec" not in answer and "status" not in answer

        event = {
            "metadata": {"generateName": "j."},
            "involvedObject": {"kind": "Job", "apiVersion": "batch/v1", "namespace": namespace, "name": "j"},
            "reason": "Queued",
            "message": "waits",
            "type": "Normal",
        }
        created = await direct.send(
            "POST", f"/api/v1/namespaces/{namespace}/events", orjson.dumps(event), "application/json"
        )
        assert created.status == 201
        assert orjson.loads(created.body)["kind"] == "PartialObjectMetadata"

        refused = await direct.send("PATCH", path, b'{"spec":{"parallelism":"many"}}', MERGE)
        assert refused.status == 422
        status = orjson.loads(refused.body)
        assert (status["kind"], status["reason"]) == ("Status", "Invalid")
        await direct.close()
    finally:
        await delete_namespace(admin, namespace, wait_s=0)
        await admin.close()
