"""`kuota simulate --nodes ... --topology ... --node-mtbf ... --repair ...`: the same trace on nodes with topology
on and off, and with seeded node failures; the figures in --json, the printed summary and the report; bad options
refused with exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from kuota.commands import simulate as simulate_command

app = typer.Typer()
simulate_command.register(app)
runner = CliRunner()

QUOTA = """\
apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors: [{name: h100}]
priorityClasses: [{name: research, value: 1000, default: true, checkpointTimeout: 1m}]
nodeFailure: {gracePeriod: 2m}
teams:
  - name: nlp
    queues: [nlp/default]
    quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 128}}}]
"""

# Eight 1-GPU jobs, then gangs of 32 and 16 GPUs (4 and 2 nodes) arriving over the day, half checkpointing.
TRACE = "submit_s,duration_s,team,priority_class,gpus,checkpoint_s,name\n" + "".join(
    [f"{i},7200,nlp,research,1,,single-{i}\n" for i in range(8)]
    + [
        f"{60 + 1800 * i},{3600 * (1 + i % 3)},nlp,research,{32 if i % 2 else 16},{1800 if i % 2 else ''},gang-{i}\n"
        for i in range(24)
    ]
)


def simulate(tmp_path: Path, *extra: str) -> tuple[int, str]:
    (tmp_path / "quota.yaml").write_text(QUOTA)
    (tmp_path / "trace.csv").write_text(TRACE)
    args = ["--config", str(tmp_path / "quota.yaml"), "--trace", str(tmp_path / "trace.csv"), *extra]
    result = runner.invoke(app, args)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.stderr


def figures(tmp_path: Path, *extra: str) -> dict[str, Any]:
    code, out = simulate(tmp_path, "--json", "--nodes", "auto", *extra)
    assert code == 0, out
    summary: dict[str, Any] = json.loads(out)
    assert summary["finished"] == 32
    return summary


def test_topology_on_keeps_gangs_in_one_rack_and_off_does_not(tmp_path: Path) -> None:
    on = figures(tmp_path)["nodes"]
    off = figures(tmp_path, "--topology", "off")["nodes"]
    assert on["nodes"] == off["nodes"] == 16 and on["racks"] == 4
    assert on["multi_node_admissions"] == off["multi_node_admissions"] == 24
    assert on["single_rack_admissions"] == 24, "every gang fits a rack and asked for one"
    assert off["single_rack_admissions"] < on["single_rack_admissions"]
    assert 0 <= on["mean_stranded_free_gpu_share"] <= 1 and 0 <= on["mean_free_racks"] <= 4
    assert "node_failures" not in on, "no failure figures without --node-mtbf"


def test_node_failures_are_seeded_and_counted(tmp_path: Path) -> None:
    failing = ("--node-mtbf", "12h", "--repair", "1h", "--seed", "5")
    first, again = figures(tmp_path, *failing), figures(tmp_path, *failing)
    first.pop("wall_seconds"), again.pop("wall_seconds")
    assert first == again, "the same seed gives the same run"
    nodes = first["nodes"]
    assert nodes["node_failures"] > 0 and nodes["node_repairs"] <= nodes["node_failures"]
    assert nodes["down_gpu_hours"] > 0
    assert nodes["node_failure_evictions"] > 0 and nodes["failure_lost_gpu_hours"] > 0
    # The failure losses are part of the run's lost GPU-hours (preemptions and failures alike).
    assert first["lost_gpu_hours"] >= nodes["failure_lost_gpu_hours"]
    other = figures(tmp_path, "--node-mtbf", "12h", "--repair", "1h", "--seed", "6")
    assert other["nodes"]["node_failures"] != nodes["node_failures"] or other["nodes"] != nodes


def test_the_summary_and_the_report_show_the_nodes(tmp_path: Path) -> None:
    code, out = simulate(
        tmp_path, "--nodes", "16", "--node-mtbf", "12h", "--repair", "1h", "--report", str(tmp_path / "r"), "--wide"
    )
    assert code == 0, out
    text = " ".join(out.split())
    # Gangs evicted by failures are admitted again, in one rack again: more than 24 admissions, all in one rack.
    assert re.search(r"nodes 16 in 4 racks: (\d+) of \1 multi-node admissions in one rack \(100.0%\)", text), text
    assert "NodeFailure evictions" in text and "GPU-h of work lost to failures" in text
    html = (tmp_path / "r" / "report.html").read_text()
    assert 'id="nodes"' in html and 'id="chart-nodes"' in html and "stranded free GPUs" in html


def test_bad_node_options_are_refused(tmp_path: Path) -> None:
    code, out = simulate(tmp_path, "--node-mtbf", "12h")
    assert code == 2 and "node failures need nodes" in out
    code, out = simulate(tmp_path, "--nodes", "many")
    assert code == 2 and "--nodes: 'many' is not a count nor auto" in out
    code, out = simulate(tmp_path, "--nodes", "0")
    assert code == 2 and "--nodes: nodes must be 1 or more" in out
    code, out = simulate(tmp_path, "--nodes", "4", "--node-mtbf", "soon")
    assert code == 2 and "'soon' is not a duration" in out
    (tmp_path / "cpu.yaml").write_text(
        "flavors: [{name: cpu}]\npriorityClasses: [{name: research, value: 1}]\n"
        "teams: [{name: nlp, queues: [nlp/default], "
        "quotas: [{flavor: cpu, resources: {cpu: {nominal: 8}}}]}]\n"
    )
    result = runner.invoke(
        app, ["--config", str(tmp_path / "cpu.yaml"), "--trace", str(tmp_path / "trace.csv"), "--nodes", "4"]
    )
    assert result.exit_code == 2 and "no flavor holds GPU quota" in result.stderr
