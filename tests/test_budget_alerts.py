"""The budget alert rules in config/prometheus: a PrometheusRule whose expressions read only metrics kuota exports
(collected here from a controller with budgets), with the labels those metrics carry."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from admin.metrics import RuntimeCollector
from kuota.runtime import Runtime
from queues.controller import Controller
from queues.loop import LoopTimers
from quota.loader import load_config_text
from tests.admin.conftest import StubCluster

RULES = Path(__file__).resolve().parents[1] / "config" / "prometheus" / "kuota-budget-alerts.yaml"
CONFIG = """
flavors: [{name: a100}]
cohorts: [{name: org, budgets: [{rolling: 72h, resources: {nvidia.com/gpu: 10}}]}]
teams:
  - name: nlp
    parent: org
    queues: [nlp/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 4}}}]
    budgets: [{window: month, resources: {nvidia.com/gpu: 100}}]
"""


def exported() -> str:
    config = load_config_text(CONFIG)
    controller = Controller(config, StubCluster(), LoopTimers())  # type: ignore[arg-type]
    runtime = Runtime(config, CONFIG, controller=controller, leader=True)
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(runtime))
    return generate_latest(registry).decode()


def test_rules_read_only_exported_budget_metrics() -> None:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert doc["kind"] == "PrometheusRule" and doc["apiVersion"] == "monitoring.coreos.com/v1"
    rules = [rule for group in doc["spec"]["groups"] for rule in group["rules"]]
    assert {r["alert"] for r in rules} == {"KuotaBudgetNearlySpent", "KuotaBudgetExhausted"}
    text = exported()
    for scope, team, window in (("team", "nlp", "month"), ("cohort", "org", "rolling:72h")):
        labels = f'resource="nvidia.com/gpu",scope="{scope}",team="{team}",window="{window}"'
        for name in ("kuota_budget_spent", "kuota_budget_remaining", "kuota_budget_limit"):
            assert f"{name}{{{labels}}}" in text, text
    for rule in rules:
        used = set(re.findall(r"\bkuota_[a-z_]+", rule["expr"]))
        assert used and all(f"# TYPE {name} gauge" in text for name in used), (rule["alert"], used)
        for label in re.findall(r"\$labels\.(\w+)", str(rule["annotations"])):
            assert label in {"team", "resource", "window", "scope"}
