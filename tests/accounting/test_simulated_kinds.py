"""`kuota simulate` on a trace whose rows name kinds and gangs, written to a ledger on both databases: each gang is
admitted whole or not at all (also when only part of it would fit, after a checkpointed preemption), a job of any
kind but Job is named `KIND/NAMESPACE/NAME` in the ledger, and the summary, the report and `kuota usage --by kind`
break the run down by kind."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from sqlalchemy import select
from typer.testing import CliRunner

from accounting import create_engine, repository
from accounting.models import Workload
from accounting.records import PreemptionRecord, UsageIntervalRecord, WorkloadDetail
from kuota.commands import simulate as simulate_command
from kuota.commands import usage as usage_command
from tests.accounting.builders import GPU
from tests.accounting.conftest import run_in_thread

app = typer.Typer()
simulate_command.register(app)
usage_command.register(app)
runner = CliRunner()

#: Virtual time 0 of `kuota simulate` in the ledger.
EPOCH = datetime(2021, 3, 4, tzinfo=UTC)

QUOTA = """\
apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors: [{name: h100}]
priorityClasses:
  - {name: production, value: 10000}
  - {name: research, value: 1000, default: true}
cohorts: [{name: org}]
teams:
  - name: nlp
    parent: org
    queues: [nlp/default]
    quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 8}}}]
    preemption: {withinTeam: LowerPriority}
  - name: vision
    parent: org
    queues: [cv/default]
    quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 2}}}]
"""

# 0 s: a 6-GPU Job runs until 600 s; the 8-GPU JobSet gang (4 pods of 2) could start 1 pod at 10 s but waits for all
# 8 GPUs. At 700 s a production PyTorchJob (2 pods of 2 GPUs) preempts the gang, which checkpoints (the hook answers
# after 10 s): from 710 s 4 GPUs are free, half of what the gang needs, so it waits until the PyTorchJob ends at 1010 s
# and runs its remaining 1090 s. The RayJob of vision (whose queue is in namespace cv) runs 0-100 s.
TRACE = """\
submit_s,duration_s,team,priority_class,gpus,kind,pods,name,checkpoint_s
0,600,nlp,research,6,,,warmup,
10,1200,nlp,research,8,JobSet,4,gang,60
700,300,nlp,production,4,PyTorchJob,2,urgent,
0,100,vision,,2,RayJob,2,ray,
"""


def at(seconds: int) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


@pytest.fixture
def simulated(ledger_url: str, tmp_path: Path) -> tuple[str, dict[str, Any], str]:
    """The run written to the ledger: its URL, the JSON summary and the HTML report."""
    (tmp_path / "quota.yaml").write_text(QUOTA, encoding="utf-8")
    (tmp_path / "trace.csv").write_text(TRACE, encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "simulate", "--config", str(tmp_path / "quota.yaml"), "--trace", str(tmp_path / "trace.csv"),
            "--json", "--report", str(tmp_path / "report"), "--database-url", ledger_url,
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return ledger_url, json.loads(result.stdout), (tmp_path / "report" / "report.html").read_text(encoding="utf-8")


Ledger = tuple[list[tuple[str, ...]], WorkloadDetail | None, list[PreemptionRecord], list[UsageIntervalRecord]]


def read(url: str) -> Ledger:
    """The workloads' names and kinds, the gang's detail, the preemptions and every usage interval."""

    async def go() -> Ledger:
        engine = create_engine(url)
        try:
            async with engine.connect() as connection:
                columns = (Workload.id, Workload.kind, Workload.namespace, Workload.name)
                workloads = [tuple(row) for row in await connection.execute(select(*columns).order_by(Workload.id))]
            return (
                workloads,
                await repository.workload_detail(engine, "JobSet/nlp/gang"),
                await repository.list_preemptions(engine),
                await repository.team_usage_intervals(engine, EPOCH),
            )
        finally:
            await engine.dispose()

    return run_in_thread(go())


def test_gangs_of_every_kind_are_admitted_whole_and_named_by_kind(simulated: tuple[str, dict[str, Any], str]) -> None:
    url, summary, _ = simulated
    assert summary["finished"] == 4
    workloads, gang, preemptions, intervals = read(url)
    assert gang is not None and gang.workload is not None
    # A Job keeps its trace name; the others are KIND/NAMESPACE/NAME with their team's first queue's namespace.
    assert workloads == [
        ("JobSet/nlp/gang", "JobSet", "nlp", "gang"),
        ("PyTorchJob/nlp/urgent", "PyTorchJob", "nlp", "urgent"),
        ("RayJob/cv/ray", "RayJob", "cv", "ray"),
        ("warmup", "Job", "nlp", "warmup"),
    ]
    # Whole: all 4 pods at once, at 600 s (not with the 2 GPUs free at 10 s), and again at 1010 s (not with the 4
    # free from 710 s).
    assert [(a.attempt, a.admitted_at, a.pod_sets[0]["count"], a.usage) for a in gang.admissions] == [
        (1, at(600), 4, {("h100", GPU): 8000}),
        (2, at(1010), 4, {("h100", GPU): 8000}),
    ]
    assert [a.end_reason for a in gang.admissions][1] == "Finished" and gang.workload.finished_at == at(2100)
    [preemption] = preemptions
    assert (preemption.victim, preemption.preemptor, preemption.victim_team) == (
        "JobSet/nlp/gang",
        "PyTorchJob/nlp/urgent",
        "nlp",
    )
    assert preemption.checkpoint_acked_at == at(710) and preemption.checkpoint_id == "JobSet/nlp/gang@1"
    assert preemption.lost_gpu_milliseconds == 0  # the acked checkpoint kept everything
    # At no instant does nlp hold more than its 8 GPUs.
    for moment in {interval.started_at for interval in intervals}:
        held = sum(
            i.quantity_milli
            for i in intervals
            if i.team == "nlp" and i.started_at <= moment and (i.ended_at is None or moment < i.ended_at)
        )
        assert held <= 8000, moment


def test_summary_and_report_break_the_run_down_by_kind(simulated: tuple[str, dict[str, Any], str]) -> None:
    _, summary, html = simulated
    assert summary["kinds"] == {
        "Job": {**_figures(1, 1, 1.0, 0.0), "preemptions": 0},
        "JobSet": {**_figures(1, 4, 2.67, 590.0), "preemptions": 1},
        "PyTorchJob": {**_figures(1, 2, 0.33, 10.0), "preemptions": 0},
        "RayJob": {**_figures(1, 2, 0.06, 0.0), "preemptions": 0},
    }
    # The same GPU time as the per-team figures, split another way.
    teams = sum(team["gpu_hours"] for team in summary["teams"].values())
    assert teams == pytest.approx(sum(kind["gpu_hours"] for kind in summary["kinds"].values()), abs=0.02)
    section = html.split('<section id="kinds">', 1)[1].split("</section>", 1)[0]
    assert "Per-kind summary" in section
    assert [row.split("</td>", 1)[0] for row in section.split("<tr><td")[1:]] == [
        ">Job",
        ">JobSet",
        ">PyTorchJob",
        ">RayJob",
    ]


def _figures(jobs: int, pods: int, gpu_hours: float, mean_wait_s: float) -> dict[str, object]:
    return {
        "jobs": jobs,
        "pods": pods,
        "finished": jobs,
        "gpu_hours": gpu_hours,
        "mean_wait_s": mean_wait_s,
        "lost_gpu_seconds": 0.0,
    }


def test_usage_by_kind_over_the_simulated_ledger(simulated: tuple[str, dict[str, Any], str]) -> None:
    url, _, _ = simulated
    result = runner.invoke(
        app,
        ["usage", "--from", "2021-03-04", "--to", "2021-03-05", "--by", "kind", "--resource", GPU, "-o", "json",
         "--database-url", url],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    # GPU milli-units × seconds: 6 GPUs × 600 s; 8 × (110 s before the preemption + 1090 s after); 4 × 300; 2 × 100.
    assert [(row["kind"], row["milli_seconds"]) for row in json.loads(result.stdout)] == [
        ("Job", "3600000"),
        ("JobSet", "9600000"),
        ("PyTorchJob", "1200000"),
        ("RayJob", "200000"),
    ]
    table = runner.invoke(app, ["usage", "--from", "2021-03-04", "--to", "2021-03-05", "--by", "kind",
                                "--database-url", url])  # fmt: skip
    assert table.exit_code == 0 and "KIND" in table.stdout and "PyTorchJob" in table.stdout
