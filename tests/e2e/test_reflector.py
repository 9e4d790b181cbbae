"""What kuota's list+watch (clusters/kube/watch.py) hands over, from kube-apiserver's real lists and watches."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from kubernetes_asyncio import client

from clusters.kube.api import KubeApi
from clusters.kube.watch import Reflector
from tests.e2e.conftest import admin_client, delete_namespace, eventually, make_namespace
from tests.kube.controlplane import ControlPlane
from tests.kube.manifests import job_manifest
from workloads.kinds.job import JOB


async def test_objects_are_handed_over_without_managed_fields(control_plane: ControlPlane) -> None:
    namespace = f"reflect-{os.getpid() % 1000}"
    admin = await admin_client(control_plane)
    await make_namespace(admin, namespace)
    jobs = client.BatchV1Api(admin)
    listed: list[dict[str, Any]] = []
    events: list[tuple[str, dict[str, Any]]] = []
    try:
        await jobs.create_namespaced_job(namespace, job_manifest("listed", namespace=namespace, suspend=True))
        api = KubeApi(admin)
        reflector = Reflector(
            api,
            JOB,
            listed.extend,
            lambda kind, obj: events.append((kind, obj)),
            field_selector=f"metadata.namespace={namespace}",
        )
        task = asyncio.create_task(reflector.run())
        await eventually(lambda: listed, what="the list")
        await jobs.create_namespaced_job(namespace, job_manifest("watched", namespace=namespace, suspend=True))
        await eventually(lambda: any(obj["metadata"]["name"] == "watched" for _, obj in events), what="the watch")
        task.cancel()
        # The server does keep them: every write records its manager.
        stored = await jobs.read_namespaced_job("watched", namespace)
        assert stored.metadata.managed_fields
        handed = [*listed, *(obj for _, obj in events)]
        assert {obj["metadata"]["name"] for obj in handed} >= {"listed", "watched"}
        assert all("managedFields" not in obj["metadata"] for obj in handed)
        assert all(obj["metadata"]["resourceVersion"] and obj["spec"]["template"] for obj in handed)
    finally:
        await delete_namespace(admin, namespace, wait_s=0)
        await admin.close()
