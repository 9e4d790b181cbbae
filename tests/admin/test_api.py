"""Every endpoint against the live server: content, actions with their audit entries, errors as problem+json."""

from __future__ import annotations

import requests

from tests.admin.conftest import CONFIG, Server


def test_health_and_readiness_without_token(server: Server) -> None:
    assert requests.get(server.url + "/healthz", timeout=5).json() == {"status": "ok"}
    ready = requests.get(server.url + "/readyz", timeout=5).json()
    assert ready["ready"] and ready["ledger"] == "healthy" and ready["ledger_backlog"] >= 0


def test_tree_reports_quota_usage_and_borrowing(server: Server) -> None:
    tree = server.get("/api/v1/tree").json()
    assert tree["roots"] == ["org"]
    teams = {t["name"]: t for t in tree["teams"]}
    gpu = next(r for r in teams["nlp"]["resources"] if r["resource"] == "nvidia.com/gpu")
    assert gpu["nominal"] == {"value": "4", "milli": 4000}
    assert gpu["usage"]["milli"] == 4000 and gpu["borrowed"]["milli"] == 0
    memory = next(r for r in teams["nlp"]["resources"] if r["resource"] == "memory")
    assert memory["nominal"]["value"] == "64Gi" and memory["usage"]["value"] == "16Gi"
    cohort = tree["cohorts"][0]
    assert cohort["name"] == "org" and sorted(cohort["teams"]) == ["nlp", "vision"]
    assert server.get("/api/v1/teams/vision").json()["admitted"] == 1
    assert server.get("/api/v1/teams/nope").status_code == 404


def test_queues_in_order_with_positions_and_reasons(server: Server) -> None:
    vision = server.get("/api/v1/queues/vision").json()
    names = [w["name"] for w in vision["workloads"]]
    assert names == ["vision/huge", "vision/next"]
    huge, nxt = vision["workloads"]
    assert (huge["position_in_team"], huge["position_in_queue"]) == (1, 1)
    assert (nxt["position_in_team"], nxt["position_in_queue"]) == (2, 1)  # first of vision/batch
    assert huge["reason"] and "nvidia.com/gpu" in huge["reason"]
    assert {t["team"] for t in server.get("/api/v1/queues").json()["teams"]} == {"nlp", "vision"}


def test_workload_list_filters_and_pagination(server: Server) -> None:
    everything = server.get("/api/v1/workloads").json()
    assert everything["total"] == 6
    admitted = server.get("/api/v1/workloads", params={"state": "admitted"}).json()
    assert {w["name"] for w in admitted["items"]} == {"nlp/train-a", "nlp/train-b", "vision/big"}
    assert server.get("/api/v1/workloads", params={"team": "vision", "queue": "vision/batch"}).json()["total"] == 1
    assert server.get("/api/v1/workloads", params={"namespace": "nlp"}).json()["total"] == 3
    page = server.get("/api/v1/workloads", params={"limit": 2, "offset": 2}).json()
    assert len(page["items"]) == 2 and page["next_offset"] == 4
    bad = server.get("/api/v1/workloads", params={"limit": 501})
    assert bad.status_code == 400 and bad.headers["Content-Type"].startswith("application/problem+json")
    assert "limit" in bad.json()["detail"]


def test_workload_detail_has_ledger_history(server: Server) -> None:
    detail = server.get("/api/v1/workloads/nlp/train-a").json()
    assert detail["workload"]["state"] == "admitted"
    kinds = [e["kind"] for e in detail["history"]]
    assert kinds[:2] == ["WorkloadSeen", "Admitted"]
    assert detail["admissions"][0]["usage"][0]["milli"] > 0
    missing = server.get("/api/v1/workloads/nlp/ghost")
    assert missing.status_code == 404 and missing.json()["status"] == 404


def test_hold_release_are_audited_with_the_token_name(server: Server) -> None:
    held = server.post("/api/v1/workloads/vision/next/hold", who="vision-lead", json={"reason": "wait for data"})
    assert held.status_code == 200, held.text
    assert held.json()["before"] == {"state": "pending", "held": False}
    assert held.json()["after"] == {"state": "pending", "held": True}
    assert server.get("/api/v1/workloads/vision/next").json()["workload"]["status"] == "held"
    assert server.post("/api/v1/workloads/vision/next/release", who="vision-lead").status_code == 200
    server.flush()
    audit = server.get("/api/v1/audit", params={"actor": "vision-lead"}).json()["items"]
    assert [a["action"] for a in audit] == ["release", "hold"]
    assert audit[1]["after"]["reason"] == "wait for data"
    history = [e["kind"] for e in server.get("/api/v1/workloads/vision/next").json()["history"]]
    assert "Held" in history and "Released" in history


def test_team_lead_acts_only_on_own_team(server: Server) -> None:
    refused = server.post("/api/v1/workloads/vision/next/hold", who="nlp-lead")
    assert refused.status_code == 403 and "vision" in refused.json()["detail"]
    assert server.post("/api/v1/workloads/vision/next/hold", who="watcher").status_code == 403


def test_wrong_state_is_a_conflict(server: Server) -> None:
    r = server.post("/api/v1/workloads/nlp/train-a/hold")
    assert r.status_code == 409 and "pending" in r.json()["detail"]
    assert server.post("/api/v1/workloads/vision/next/preempt").status_code == 409


def test_preempt_with_checkpoint(server: Server) -> None:
    r = server.post("/api/v1/workloads/nlp/train-b/preempt", who="nlp-lead")
    assert r.status_code == 200, r.text
    assert r.json()["after"]["state"] == "evicting"
    server.flush()
    preemptions = server.get("/api/v1/preemptions").json()["items"]
    assert preemptions[0]["victim"] == "nlp/train-b" and preemptions[0]["reason"] == "Manual"
    assert preemptions[0]["checkpoint_requested_at"] is not None
    kinds = [e["kind"] for e in server.get("/api/v1/workloads/nlp/train-b").json()["history"]]
    assert "PreemptionIssued" in kinds and "CheckpointRequested" in kinds


def test_usage_report_json_and_csv(server: Server) -> None:
    params = {"from": "2000-01-01T00:00:00Z", "to": "2100-01-01T00:00:00Z", "by": "team"}
    report = server.get("/api/v1/reports/usage", params=params).json()
    assert {r["key"] for r in report["rows"]} == {"nlp", "vision"}
    csv = server.get("/api/v1/reports/usage", params={**params, "format": "csv", "by": "flavor"})
    assert csv.headers["Content-Type"].startswith("text/csv")
    assert csv.text.splitlines()[0] == "flavor,resource,milli_seconds,hours"
    bad = server.get("/api/v1/reports/usage", params={"from": "2100-01-01", "to": "2000-01-01"})
    assert bad.status_code == 400


def test_credits(server: Server) -> None:
    credits = server.get("/api/v1/credits").json()
    assert {c["team"] for c in credits["teams"]} == {"nlp", "vision"}
    assert all(0 < float(c["factor"]) <= 1 for c in credits["teams"])


def test_config_validate_diff_apply(server: Server) -> None:
    assert server.get("/api/v1/config").json()["teams"] == ["nlp", "vision"]
    invalid = server.post("/api/v1/config/validate", json={"text": "teams: [{name: x, parent: nowhere}]"}).json()
    assert not invalid["valid"] and invalid["problems"]
    smaller = CONFIG.replace(
        "{nominal: 4}, memory: {nominal: 64Gi}}}]\n    preemption",
        "{nominal: 1, borrowingLimit: 0}, memory: {nominal: 64Gi}}}]\n    preemption",
    )
    diff = server.post("/api/v1/config/diff", who="watcher", json={"text": smaller}).json()
    assert diff["valid"] and any(c["node"] == "nlp" and c["field"] == "nominal" for c in diff["changes"])
    effects = {a["workload"]: a["effect"] for a in diff["affected"]}
    assert "above the team's new maximum" in effects["nlp/train-a"]
    assert "could never fit" in effects["vision/huge"] and "nlp/later" not in effects
    assert server.post("/api/v1/config/apply", who="watcher", json={"text": CONFIG}).status_code == 403
    rejected = server.post("/api/v1/config/apply", json={"text": "nonsense: ["})
    assert rejected.status_code == 422
    applied = server.post("/api/v1/config/apply", json={"text": CONFIG + "\n# same, touched\n"})
    assert applied.status_code == 200, applied.text
    server.flush()
    assert server.get("/api/v1/audit", params={"actor": "root"}).json()["items"][0]["action"] == "apply-config"


def test_request_size_limit(server: Server) -> None:
    r = server.post("/api/v1/config/validate", json={"text": "x" * (2 * 1024 * 1024)})
    assert r.status_code == 413 and r.json()["status"] == 413


def test_metrics(server: Server) -> None:
    text = requests.get(server.url + "/metrics", timeout=5).text
    for name in (
        'kuota_pending_workloads{status="inadmissible",team="vision"}',
        "kuota_admitted_workloads_total",
        "kuota_team_nominal_quota",
        "kuota_fair_share_credit",
        "kuota_ledger_outbox_depth",
        "kuota_admission_attempt_duration_seconds_bucket",
        "kuota_team_weighted_share",
    ):
        assert name in text, name


def test_readiness_says_when_the_scheduling_loop_keeps_failing(server: Server) -> None:
    class FailingLoop:
        healthy = False
        failures = 3
        last_error = "RuntimeError: usage must be in [0, 2**63)"

        def clock(self) -> int:
            return 0

    previous = server.runtime.loop
    server.runtime.loop = FailingLoop()  # type: ignore[assignment]
    try:
        response = requests.get(server.url + "/readyz", timeout=5)
        ready = response.json()
        assert response.status_code == 503 and not ready["ready"]
        assert ready["scheduling"] == "failing" and "2**63" in ready["detail"]
    finally:
        server.runtime.loop = previous
    assert requests.get(server.url + "/readyz", timeout=5).json()["scheduling"] in ("running", "standby")


def test_every_action_is_one_log_line(server: Server) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        assert server.post("/api/v1/workloads/vision/next/hold", who="vision-lead").status_code == 200
        assert server.post("/api/v1/workloads/vision/next/release", who="vision-lead").status_code == 200
    lines = [line for line in logs if line["event"] == "admin_action"]
    assert [(line["actor"], line["action"], line["target"]) for line in lines] == [
        ("vision-lead", "hold", "vision/next"),
        ("vision-lead", "release", "vision/next"),
    ]
    assert lines[0]["after"]["held"] is True and lines[0]["recorded"] is True
