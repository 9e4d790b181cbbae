"""Workloads of several kinds through the admin API, as a cluster names them (`KIND/NAMESPACE/NAME`): a Job and a
JobSet of the same name are two workloads; `NAMESPACE/NAME` means the Job; lists filter by kind and namespace;
the usage report groups by kind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from accounting.ledger import Ledger
from accounting.migrate import upgrade_async
from admin.app import build_app
from admin.auth import TokenStore, add_token
from kuota.runtime import Runtime
from queues.controller import Controller
from queues.ledger_journal import LedgerJournal
from queues.loop import LoopTimers, wall_clock_ms
from quota.loader import load_config_text
from tests.admin.conftest import CONFIG, StubCluster, workload


@dataclass
class Api:
    url: str
    headers: dict[str, str]
    http: aiohttp.ClientSession

    async def get(self, path: str, **params: str) -> tuple[int, object]:
        async with self.http.get(self.url + path, headers=self.headers, params=params) as response:
            return response.status, await response.json()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    await upgrade_async(url)
    ledger = Ledger(url)
    await ledger.start()
    config = load_config_text(CONFIG)
    controller = Controller(config, StubCluster(), LoopTimers(), LedgerJournal(ledger))  # type: ignore[arg-type]
    now = wall_clock_ms()
    for index, name in enumerate(("Job/nlp/train", "JobSet/nlp/train", "PyTorchJob/vision/pt")):
        controller.submit(workload(name, name.split("/")[1], 1, now - 10_000 + index), now)
    for _ in range(10):  # one head per team per cycle
        if controller.schedule(wall_clock_ms()) is None:
            break
    await ledger.flush()
    token = add_token(tmp_path / "tokens.yaml", "root", "admin")
    runtime = Runtime(config, CONFIG, ledger=ledger, controller=controller, leader=True)
    runner = web.AppRunner(build_app(runtime, TokenStore.from_file(tmp_path / "tokens.yaml")), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession() as http:
        yield Api(f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}, http)
    await runner.cleanup()
    await ledger.close()


async def test_a_job_and_a_jobset_of_one_name_are_two_workloads(api: Api) -> None:
    status, body = await api.get("/api/v1/workloads/JobSet/nlp/train")
    assert status == 200 and isinstance(body, dict)
    assert body["workload"]["name"] == "JobSet/nlp/train" and body["workload"]["kind"] == "JobSet"
    assert body["workload"]["namespace"] == "nlp"
    # What a user types, ns/name, is the Job.
    status, body = await api.get("/api/v1/workloads/nlp/train")
    assert status == 200 and isinstance(body, dict) and body["workload"]["name"] == "Job/nlp/train"
    status, _ = await api.get("/api/v1/workloads/RayJob/nlp/train")
    assert status == 404


async def test_lists_filter_by_kind_and_by_the_namespace_inside_the_name(api: Api) -> None:
    _, listed = await api.get("/api/v1/workloads", kind="JobSet")
    assert isinstance(listed, dict) and [w["name"] for w in listed["items"]] == ["JobSet/nlp/train"]
    _, nlp = await api.get("/api/v1/workloads", namespace="nlp")
    assert isinstance(nlp, dict) and {w["name"] for w in nlp["items"]} == {"Job/nlp/train", "JobSet/nlp/train"}
    _, vision = await api.get("/api/v1/workloads", namespace="vision")
    assert isinstance(vision, dict) and [w["kind"] for w in vision["items"]] == ["PyTorchJob"]


async def test_usage_groups_by_kind(api: Api) -> None:
    start = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    end = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    status, body = await api.get("/api/v1/reports/usage", **{"from": start, "to": end, "by": "kind"})
    assert status == 200 and isinstance(body, dict), body
    assert body["by"] == "kind"
    assert {row["key"] for row in body["rows"]} == {"Job", "JobSet", "PyTorchJob"}
