"""`kuota simulate --start-delay`: the simulated jobs' pods get ready that long after each admission, so a quota
file's waitForPodsReady shows its timeouts in a replay: slower than the timeout, every gang is evicted for
PodsReadyTimeout and (requeuingLimit 0) deactivated; faster, every job runs to its end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
priorityClasses: [{name: research, value: 1000, default: true, checkpointTimeout: 10s}]
waitForPodsReady: {timeout: 1m, requeuingLimit: 0}
teams:
  - name: nlp
    queues: [nlp/default]
    quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 8}}}]
"""

TRACE = """\
submit_s,duration_s,team,priority_class,gpus,kind,pods,name
0,600,nlp,research,8,JobSet,4,gang
10,300,nlp,research,4,,,single
"""


def simulate(tmp_path: Path, *extra: str) -> tuple[int, str]:
    (tmp_path / "quota.yaml").write_text(QUOTA)
    (tmp_path / "trace.csv").write_text(TRACE)
    args = ["--config", str(tmp_path / "quota.yaml"), "--trace", str(tmp_path / "trace.csv"), "--json", *extra]
    result = runner.invoke(app, args)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.stderr


@pytest.mark.parametrize(
    ("delay", "finished", "evictions"),
    [("90s", 0, 2), ("30s", 2, 0)],
    ids=["slower-than-the-timeout", "within-the-timeout"],
)
def test_the_start_delay_against_the_timeout(tmp_path: Path, delay: str, finished: int, evictions: int) -> None:
    # Slower than the 1m timeout: the gang is evicted at 60 s and deactivated (requeuingLimit 0), then the single
    # job admitted after it, likewise. Faster: both run to their end.
    code, out = simulate(tmp_path, "--start-delay", delay)
    assert code == 0, out
    summary = json.loads(out)
    assert summary["finished"] == finished
    assert summary["teams"]["nlp"]["preemptions"] == evictions


def test_a_start_delay_that_is_not_a_duration_is_refused(tmp_path: Path) -> None:
    code, out = simulate(tmp_path, "--start-delay", "soon")
    assert code == 2
    assert "--start-delay: 'soon' is not a duration" in out
