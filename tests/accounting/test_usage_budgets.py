"""`kuota usage --budgets FILE`: each budget of a quota file in its window as of --to, spending read from the ledger
(SQLite and PostgreSQL), in the table, in CSV after the usage rows, and in JSON beside them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from tests.accounting.builders import GPU
from tests.accounting.test_cli import invoke, url_with_usage

__all__ = ["url_with_usage"]  # the fixture: nlp/a 2 GPUs 09:00-10:30 UTC on 2026-03-02, cv/b 1 GPU for 10:00:00-01

QUOTA = """
flavors: [{name: h100}, {name: a100}]
cohorts: [{name: org, budgets: [{window: month, resources: {nvidia.com/gpu: 100}}]}]
teams:
  - name: nlp
    parent: org
    queues: [nlp/default]
    quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 8}, cpu: {nominal: 64}}}]
    budgets: [{window: day, resources: {nvidia.com/gpu: 2}, onExhausted: lowerPriority}]
  - name: vision
    parent: org
    queues: [vision/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
    budgets: [{rolling: 1h, resources: {nvidia.com/gpu: 1}}]
"""


def test_usage_shows_budgets_as_of_the_end_of_the_period(url_with_usage: str, tmp_path: Path) -> None:
    quota = tmp_path / "quota.yaml"
    quota.write_text(QUOTA)
    period = ["--from", "2026-03-02T00:00", "--to", "2026-03-02T10:30", "--database-url", url_with_usage]
    code, out, err = invoke("usage", *period, "--budgets", str(quota), "-o", "json")
    assert code == 0, err
    body = json.loads(out)
    assert {(u["team"], u["resource"]) for u in body["usage"]} == {("nlp", "cpu"), ("nlp", GPU), ("vision", GPU)}
    budgets = {(b["owner"], b["window"]): b for b in body["budgets"]}
    # As of 10:30: nlp's day holds its 2 GPUs × 1.5 h; vision's last hour (09:30-10:30) its one GPU-second; the
    # cohort's month both.
    nlp = budgets[("nlp", "day")]
    assert (nlp["spent_hours"], nlp["limit_hours"], nlp["remaining_hours"], nlp["exhausted"]) == ("3", "2", "0", True)
    assert nlp["spent"] == str(2000 * 90 * 60_000) and nlp["start"] == "2026-03-02T00:00:00Z"
    assert nlp["on_exhausted"] == "lowerPriority"
    vision = budgets[("vision", "rolling:1h")]
    assert vision["spent"] == str(1000 * 1000) and not vision["exhausted"] and vision["end"] is None
    org = budgets[("org", "month")]
    assert org["scope"] == "cohort" and org["spent"] == str(2000 * 90 * 60_000 + 1000 * 1000)
    assert org["start"] == "2026-03-01T00:00:00Z" and org["end"] == "2026-04-01T00:00:00Z"

    code, out, _ = invoke("usage", *period, "--budgets", str(quota), "-o", "csv")
    usage, budget_rows = out.split("\n\n")
    assert len(list(csv.DictReader(io.StringIO(usage)))) == 3
    rows = list(csv.DictReader(io.StringIO(budget_rows)))
    assert [(r["owner"], r["window"], r["spent_hours"]) for r in rows] == [
        ("org", "month", "3"),
        ("nlp", "day", "3"),
        ("vision", "rolling:1h", "0"),
    ]

    code, out, _ = invoke("usage", *period, "--budgets", str(quota))
    table = out[out.index("Budgets") :]
    assert code == 0 and all(word in table for word in ("OWNER", "cohort", "nlp", "vision", "spent:", "0 %")), out


def test_a_bad_budget_file_is_refused_with_path_and_line(url_with_usage: str, tmp_path: Path) -> None:
    quota = tmp_path / "quota.yaml"
    quota.write_text(QUOTA.replace("{rolling: 1h,", "{rolling: 1h, window: day,"))
    period = ["--from", "2026-03-02T00:00", "--to", "2026-03-02T10:30", "--database-url", url_with_usage]
    code, _, err = invoke("usage", *period, "--budgets", str(quota))
    assert code == 2 and "teams[1].budgets[0] (line 14): give exactly one of `window`" in err, err
