"""Which job kinds a process queues: `kuota serve --kinds`, else the quota file's jobKinds; `kuota validate` checks
the names against the job framework's registry, and an unknown name stops `serve` before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme
from typer.testing import CliRunner

from kuota.cli import app
from kuota.commands.serve import ServeOptions, WebhookComponent
from kuota.components import StartError, job_kinds
from quota.loader import load_config_text

QUOTA = """
apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors: [{name: pool}]
teams:
  - name: ml
    queues: [ml/ml]
    quotas: [{flavor: pool, resources: {cpu: {nominal: 4}}}]
"""


def quota_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "quota.yaml"
    path.write_text(QUOTA + extra)
    return path


def test_the_flag_wins_over_the_file_and_the_file_over_the_default() -> None:
    config = load_config_text(QUOTA + "jobKinds: [JobSet, RayJob]\n")
    assert job_kinds(None, config).names() == ("JobSet", "RayJob")
    assert job_kinds(("PyTorchJob",), config).names() == ("PyTorchJob",)
    assert job_kinds(None, load_config_text(QUOTA)).names() == ("Job",)


def test_an_unknown_kind_names_where_it_came_from_and_what_is_known() -> None:
    config = load_config_text(QUOTA + "jobKinds: [Job, Fancy]\n")
    with pytest.raises(StartError, match=r"jobKinds in the quota file: unknown job kind 'Fancy'; kuota queues: Job, "):
        job_kinds(None, config)
    with pytest.raises(StartError, match=r"--kinds: unknown job kind 'Nope'"):
        job_kinds(("Job", "Nope"), config)


def test_validate_checks_job_kinds_against_the_registry(tmp_path: Path) -> None:
    runner = CliRunner()
    good = runner.invoke(app, ["validate", str(quota_file(tmp_path, "jobKinds: [Job, MPIJob]\n"))])
    assert good.exit_code == 0, good.output
    assert "queues Job, MPIJob" in good.output
    bad = runner.invoke(app, ["validate", str(quota_file(tmp_path, "jobKinds: [Job, LeaderWorkerSets]\n"))])
    assert bad.exit_code == 2
    assert "jobKinds: unknown job kind 'LeaderWorkerSets'" in bad.output


def test_serve_refuses_an_unknown_kind_before_starting(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--components", "controller", "--config", str(quota_file(tmp_path)), "--kinds", "Job,Nope"]
    )
    assert result.exit_code == 2
    assert "--kinds: unknown job kind 'Nope'" in result.output


def test_the_webhook_component_serves_the_kinds_of_the_flag(tmp_path: Path) -> None:
    leaf = trustme.CA().issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    path = quota_file(tmp_path, "jobKinds: [Job]\n")
    options = ServeOptions(path, cert, key, "127.0.0.1", 0, "system:serviceaccount:kuota-system:kuota")
    assert WebhookComponent(options).server.state.kinds.names() == ("Job",)
    flagged = ServeOptions(path, cert, key, "127.0.0.1", 0, "x", kinds=("JobSet", "PyTorchJob"))
    assert WebhookComponent(flagged).server.state.kinds.names() == ("JobSet", "PyTorchJob")
