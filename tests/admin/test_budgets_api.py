"""Budgets through the admin API and /metrics, on a live server around a real controller: every budget's spending
(exact and in resource-hours), a team's view with its own and its cohorts' budgets, the restriction a spent budget
puts on a team and the reason its pending work shows."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.admin.conftest import CONFIG, Server, serve
from tests.admin.test_dashboard import CHROMIUM, FLAGS

BUDGETS = (
    CONFIG.replace(
        "cohorts: [{name: org}]",
        "cohorts: [{name: org, budgets: [{window: week, resources: {nvidia.com/gpu: 5000}, "
        "onExhausted: noBorrowing}]}]",
    )
    .replace(
        "    preemption: {withinTeam: LowerPriority, reclaimWithinCohort: Any}",
        "    preemption: {withinTeam: LowerPriority, reclaimWithinCohort: Any}\n"
        "    budgets: [{window: day, resources: {nvidia.com/gpu: 0}, onExhausted: block, blockAbove: zero}]",
    )
    .replace(
        "    queues: [vision/default, vision/batch]",
        "    queues: [vision/default, vision/batch]\n    budgets: [{window: month, resources: {nvidia.com/gpu: 1000}}]",
    )
)


@pytest.fixture(scope="module")
def budget_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(tmp_path_factory, BUDGETS)


def test_budgets_endpoint_lists_spending_and_restrictions(budget_server: Server) -> None:
    body = budget_server.get("/api/v1/budgets", who="watcher").json()
    found = {(b["owner"], b["scope"], b["window"]): b for b in body["budgets"]}
    assert set(found) == {("org", "cohort", "week"), ("nlp", "team", "day"), ("vision", "team", "month")}
    nlp = found[("nlp", "team", "day")]
    assert nlp["exhausted"] and nlp["limit"] == 0 and nlp["effect"] == "no new admissions"
    assert nlp["end"] is not None and nlp["block_above"] == "zero"
    vision = found[("vision", "team", "month")]
    assert vision["limit"] == 1000 * 1000 * 3_600_000 and vision["limit_hours"] == "1000"
    assert vision["spent"] > 0 and not vision["exhausted"], "vision's admitted work has been spending since"
    assert body["restricted"]["nlp"].startswith("budget spent: team nlp's day budget of 0 nvidia.com/gpu-hours")
    assert "vision" not in body["restricted"]


def test_team_view_shows_its_own_and_its_cohorts_budgets(budget_server: Server) -> None:
    team = budget_server.get("/api/v1/teams/nlp", who="nlp-lead").json()
    assert {(b["owner"], b["window"]) for b in team["budgets"]} == {("nlp", "day"), ("org", "week")}
    assert team["budget_restriction"].startswith("budget spent: team nlp's day budget")
    vision = budget_server.get("/api/v1/teams/vision").json()
    assert {(b["owner"], b["window"]) for b in vision["budgets"]} == {("vision", "month"), ("org", "week")}
    assert vision["budget_restriction"] is None


def test_pending_work_says_the_budget_holds_it_back(budget_server: Server) -> None:
    queue = budget_server.get("/api/v1/queues/nlp").json()
    assert queue["pending"] == 3, "nothing of nlp was admitted: its budget of 0 is spent from the start"
    reasons = [w["reason"] or "" for w in queue["workloads"]]
    assert any(r.startswith("budget spent: team nlp's day budget") for r in reasons), reasons


def test_metrics_report_budget_spent_and_remaining(budget_server: Server) -> None:
    text = budget_server.get("/metrics").text
    assert 'kuota_budget_remaining{resource="nvidia.com/gpu",scope="team",team="nlp",window="day"} 0.0' in text
    assert 'kuota_budget_limit{resource="nvidia.com/gpu",scope="cohort",team="org",window="week"} 5000.0' in text
    spent = [
        line
        for line in text.splitlines()
        if line.startswith('kuota_budget_spent{resource="nvidia.com/gpu",scope="team",team="vision"')
    ]
    assert len(spent) == 1 and float(spent[0].rsplit(" ", 1)[1]) > 0


def test_budgets_need_a_token(budget_server: Server) -> None:
    assert requests.get(budget_server.url + "/api/v1/budgets", timeout=10).status_code == 401


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_dashboard_shows_budgets(budget_server: Server, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    url = f"{budget_server.url}/#token={budget_server.tokens['watcher']}"
    dom = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert 'data-loaded="true"' in dom, dom[-2000:]
    budgets = dom[dom.index('id="budgets"') : dom.index("Pending queues")]
    assert "<td>org (cohort)</td>" in budgets and "<td>rolling:72h</td>" not in budgets
    assert "<td>nlp</td><td>nvidia.com/gpu</td><td>day</td>" in budgets and "<td>spent</td>" in budgets
    assert "<td>vision</td><td>nvidia.com/gpu</td><td>month</td>" in budgets and "<td>1000</td>" in budgets
