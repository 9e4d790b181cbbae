"""The command line's own options: its version, and -h beside --help on every command."""

from __future__ import annotations

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
