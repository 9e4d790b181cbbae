"""Two controller processes writing the same and different events at once: every row exactly once."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.accounting.builders import stream
from tests.accounting.test_ledger import assert_rows

REPO_ROOT = Path(__file__).resolve().parents[2]
COUNT = 60


async def _writer(url: str, own_prefix: str) -> dict[str, int]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.accounting.writer_process",
        url,
        "shared",
        own_prefix,
        str(COUNT),
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    summary: dict[str, int] = json.loads(stdout.decode().strip().splitlines()[-1])
    return summary


async def test_two_processes_write_the_same_and_different_events(ledger_url: str) -> None:
    first, second = await asyncio.gather(_writer(ledger_url, "one"), _writer(ledger_url, "two"))
    each = len(stream(COUNT)) * 2
    assert first == second == {"written": each, "rejected": 0, "backlog": 0}
    await assert_rows(
        ledger_url, stream(COUNT, prefix="shared") + stream(COUNT, prefix="one") + stream(COUNT, prefix="two")
    )
