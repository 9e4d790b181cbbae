"""The scenarios with nodes (tests/scenarios/topology-*.yaml, spec/topology.md): where each workload landed.

tests/test_scenarios.py checks what ../shared/spec/check_scenarios.py checks (state, reason, inadmissible, flavors,
counts); these files also expect a `placement` (per pod set: `domain`, the narrowest `{LEVEL: VALUE}` holding every
pod, `{}` for none; `nodes`, pods per node) and part of a pending workload's `message`, checked here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

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
        "preferred-preemption-falls-back",
        "never-fits",
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


# -- every other scenario, on a topology that never constrains ------------------------------------------------------

OTHER_FILES = sorted(p for p in SCENARIOS.glob("*.yaml") if not p.name.startswith("topology-"))
#: More than any scenario asks of any resource.
PLENTY = "1e12"


def _on_roomy_nodes(doc: dict[str, Any]) -> dict[str, Any]:
    """The scenario with every flavor on a topology, and per flavor one node (its labels) that holds everything."""
    scenario = {k: v for k, v in doc.items() if k not in ("expect", "source", "notes")}
    config = dict(scenario["config"])
    config["topologies"] = [{"name": "fabric", "levels": ["topology.kuota.dev/rack", "kubernetes.io/hostname"]}]
    config["flavors"] = [{**flavor, "topology": "fabric"} for flavor in config.get("flavors", [])]
    scenario["config"] = config
    resources = {r for w in scenario.get("workloads", []) for ps in w["podSets"] for r in ps.get("requests", {})}
    scenario["nodes"] = [
        {
            "name": f"node-{flavor['name']}",
            "labels": {
                **flavor.get("nodeLabels", {}),
                "topology.kuota.dev/rack": "rack-0",
                "kubernetes.io/hostname": f"node-{flavor['name']}",
            },
            "allocatable": {r: PLENTY for r in {*resources, "pods"}},
        }
        for flavor in config["flavors"]
    ]
    return scenario


def _without_placements(outcome: dict[str, Any]) -> dict[str, Any]:
    return {name: {k: v for k, v in entry.items() if k != "placement"} for name, entry in outcome.items()}


@pytest.mark.parametrize("path", OTHER_FILES, ids=[p.stem for p in OTHER_FILES])
def test_a_topology_that_never_constrains_changes_no_decision(path: Path) -> None:
    """Every scenario of semantics.md and kuota's other rules, its flavors placed on nodes with room for
    everything: the same outcome, cycle for cycle (only `placement` is added)."""
    doc, _, plain = suite_run(path)
    placed_text = yaml.safe_dump(_on_roomy_nodes(doc), sort_keys=False)
    expect = doc["expect"]
    placed = run_scenario(
        load_scenario_text(placed_text, str(path)),
        cycles=int(expect.get("cycles", 1)),
        until_idle=bool(expect.get("until-idle")),
    )
    assert placed["cycles"] == plain["cycles"]
    assert _without_placements(json.loads(json.dumps(placed["workloads"]))) == plain["workloads"]
