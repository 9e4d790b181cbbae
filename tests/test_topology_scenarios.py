"""The scenarios with nodes (tests/scenarios/topology-*.yaml, spec/topology.md): where each workload landed.

tests/test_scenarios.py checks what ../shared/spec/check_scenarios.py checks (state, reason, inadmissible, flavors,
counts); these files also expect a `placement` (per pod set: `domain`, the narrowest `{LEVEL: VALUE}` holding every
pod, `{}` for none; `nodes`, pods per node) and part of a pending workload's `message`, checked here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sim.scenario import load_scenario_text, run_scenario
from tests.test_scenarios import SCENARIOS, suite_run

TOPOLOGY_FILES = sorted(SCENARIOS.glob("topology-*.yaml"))


def _differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    diffs = []
    for name, want in expected.items():
        got = actual.get(name, {})
        if "message" in want and want["message"] not in got.get("message", ""):
            diffs.append(f"{name}.message={got.get('message')!r} (want it to say {want['message']!r})")
        for pod_set, where in want.get("placement", {}).items():
            have = got.get("placement", {}).get(pod_set)
            if have is None:
                diffs.append(f"{name}.placement.{pod_set}: missing")
                continue
            if "domain" in where and have.get("domain", {}) != where["domain"]:
                diffs.append(f"{name}.placement.{pod_set}.domain={have.get('domain', {})} (want {where['domain']})")
            if "nodes" in where and have["nodes"] != where["nodes"]:
                diffs.append(f"{name}.placement.{pod_set}.nodes={have['nodes']} (want {where['nodes']})")
        if "by" in want and got.get("by") != want["by"]:
            diffs.append(f"{name}.by={got.get('by')} (want {want['by']})")
    return diffs


def test_every_placement_rule_has_a_scenario() -> None:
    names = {p.stem for p in TOPOLOGY_FILES}
    for rule in (
        "required-rack",
        "required-rack-waits",
        "preferred-falls-back",
        "tightest-domain",
        "whole-nodes",
        "taints",
        "cordoned-node",
        "preemption-frees-rack",
        "partial-admission",
        "cycle-charges-placement",
        "reclaim-one-rack",
        "fair-sharing-reclaims-one-rack",
    ):
        assert f"topology-{rule}" in names


@pytest.mark.parametrize("path", TOPOLOGY_FILES, ids=[p.stem for p in TOPOLOGY_FILES])
def test_where_each_workload_landed(path: Path) -> None:
    doc, _, outcome = suite_run(path)
    diffs = _differences(doc["expect"]["workloads"], outcome["workloads"])
    assert not diffs, f"{path.name}:\n" + "\n".join(diffs)


def test_placements_hold_across_cycles_until_idle() -> None:
    """The rack freed by preemption is where the preemptor runs once its victims are gone; a victim comes back
    on the one node left, and nothing is ever placed beyond a node's GPUs."""
    path = SCENARIOS / "topology-preemption-frees-rack.yaml"
    _, text, _ = suite_run(path)
    outcome = run_scenario(load_scenario_text(text, str(path)), until_idle=True)["workloads"]
    assert outcome["urgent"]["placement"]["main"]["domain"] == {"topology.kuota.dev/rack": "rack-000"}
    assert outcome["low-a"]["placement"]["main"]["nodes"] == {"node-007": 1}
    assert outcome["low-b"]["state"] == "preempted", "no node is left for it: it stays out"
    per_node: dict[str, int] = {}
    for entry in outcome.values():
        for where in entry.get("placement", {}).values():
            for node, pods in where["nodes"].items():
                per_node[node] = per_node.get(node, 0) + pods
    assert per_node and max(per_node.values()) == 1, "one 8-GPU pod per 8-GPU node"


def test_the_table_shows_where_each_workload_landed(tmp_path: Path) -> None:
    _, text, _ = suite_run(SCENARIOS / "topology-cycle-charges-placement.yaml")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", "from kuota.cli import main; main()", "scenario", str(scenario), "--format", "table"],
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    assert "placement" in out
    assert "rack=rack-000; node-000×1" in out and "rack=rack-001; node-004×1" in out
