"""The command line's own options: its version, and -h beside --help on every command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

KUOTA = str(Path(sys.executable).with_name("kuota"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUOTA, *args], capture_output=True, text=True, timeout=60, check=False)


def test_version() -> None:
    from importlib.metadata import version

    done = run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"kuota {version('kuota')}"


def test_short_help_on_the_app_and_a_command() -> None:
    for args in (("-h",), ("validate", "-h")):
        done = run(*args)
        assert done.returncode == 0, done.stderr
        assert "Usage: kuota" in done.stdout


def test_help_shows_what_to_type_not_python_types() -> None:
    from typer.main import get_command

    from kuota.cli import app

    for name in [None, *get_command(app).commands]:  # type: ignore[attr-defined]
        done = run(*([name] if name else []), "-h")
        assert done.returncode == 0, (name, done.stderr)
        for internal in ("<str>", "<bool>", "<int", "<float", "<path>"):
            assert internal not in done.stdout, (name, done.stdout)
    assert "--team" in run("workloads", "-h").stdout and "TEAM" in run("workloads", "-h").stdout


def test_kubectl_plugin_and_shell_completion() -> None:
    plugin = subprocess.run(
        [str(Path(KUOTA).with_name("kubectl-kuota")), "-h"], capture_output=True, text=True, timeout=60, check=False
    )
    assert plugin.returncode == 0 and "Usage: kubectl kuota" in plugin.stdout
    # What the installed bash completion asks the program (the script itself depends on the shell detected).
    env = {**os.environ, "_KUOTA_COMPLETE": "complete_bash", "COMP_WORDS": "kuota wor", "COMP_CWORD": "1"}
    completion = subprocess.run([KUOTA], capture_output=True, text=True, timeout=60, check=False, env=env)
    assert completion.returncode == 0 and completion.stdout.split() == ["workloads"], completion
