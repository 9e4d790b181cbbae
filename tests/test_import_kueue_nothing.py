"""`kuota import-kueue` on an input with nothing of Kueue's in it fails (exit 2) instead of writing an empty quota
file that would look like a successful import."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kuota.cli import app


def test_an_input_without_kueue_objects_exits_2_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "not-kueue.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n")
    out = tmp_path / "quota.yaml"
    result = CliRunner().invoke(app, ["import-kueue", str(path), "-o", str(out)])
    assert result.exit_code == 2
    assert "error: nothing to import: no Kueue objects" in result.output
    assert "skipped 1 ConfigMap (v1) object" in result.output  # what was skipped is still said
    assert not out.exists()


def test_a_kueue_configuration_alone_is_something_to_import(tmp_path: Path) -> None:
    path = tmp_path / "configuration.yaml"
    path.write_text("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nfairSharing: {enable: true}\n")
    result = CliRunner().invoke(app, ["import-kueue", str(path)])
    assert result.exit_code == 0, result.output
    assert "fairSharing:" in result.output
