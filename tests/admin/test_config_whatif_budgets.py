"""POST /api/v1/config/diff with {"whatif": ...} carries the budget windows of both quota files, as `kuota whatif
--json` does: a proposal that adds a monthly budget across 1 April shows March spent at 02:30 on the 31st."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from accounting.ledger import Ledger
from admin.auth import TokenStore, add_token
from kuota.runtime import Runtime
from quota.loader import load_config_text
from tests.accounting.test_whatif_budgets import TEAM, TRACE, budget, kuota
from tests.admin.test_config_whatif import serve


async def test_the_config_diff_whatif_reports_budget_windows_side_by_side(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    (tmp_path / "none.yaml").write_text(TEAM)
    (tmp_path / "trace.csv").write_text(TRACE)
    kuota("simulate", "--config", str(tmp_path / "none.yaml"), "--trace", str(tmp_path / "trace.csv"),
          "--start", "2021-03-31", "--database-url", url, "--json", "--no-progress")  # fmt: skip
    token = add_token(tmp_path / "tokens.yaml", "viewer", "viewer")
    runtime = Runtime(load_config_text(TEAM), TEAM, ledger=Ledger(url))
    runner, base = await serve(runtime, TokenStore.from_file(tmp_path / "tokens.yaml"))
    body = {"text": budget(10), "whatif": {"from": "2021-03-31", "to": "2021-04-03"}}
    try:
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
            http.post(f"{base}/api/v1/config/diff", json=body) as response,
        ):
            status, answer = response.status, await response.json(content_type=None)
    finally:
        await runner.cleanup()

    assert status == 200, answer
    (owner,) = answer["whatif"]["budgets"]
    assert owner["owner"] == "ml" and owner["baseline"] == []
    rows: list[dict[str, Any]] = owner["proposal"]
    assert [(r["label"], r["spent_hours"], r["remaining_hours"], r["exhausted_at"]) for r in rows] == [
        ("2021-03", "12", "0", "2021-03-31T02:30:00Z"),
        ("2021-04", "2", "8", None),
    ]
    teams = {row["team"]: row for row in answer["whatif"]["teams"]}
    assert teams["ml"]["proposal"]["p95_wait_s"] == 72_000 and teams["ml"]["baseline"]["p95_wait_s"] == 0
