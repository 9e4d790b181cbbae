"""`kuota serve --log-level`: one JSON line per event on stderr at or above the level, from kuota's own loggers and
from the standard library's (aiohttp, the admin API), tracebacks as JSON too."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from kuota.cli import app

PROGRAM = """
import logging, structlog
from kuota.commands.serve import _configure_logging
_configure_logging(logging.getLevelNamesMapping()["{level}"])
structlog.get_logger("kuota.test").debug("kuota_debug")
structlog.get_logger("kuota.test").warning("kuota_warning", workload="Job/ns/a")
logging.getLogger("aiohttp.server").info("library_info")
try:
    raise ValueError("broken")
except ValueError:
    logging.getLogger("aiohttp.server").exception("library_error")
"""


def lines(level: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(level=level)], capture_output=True, text=True, timeout=60, check=True
    )
    return [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON


def test_warning_keeps_warnings_and_errors_from_both_kinds_of_logger() -> None:
    found = lines("WARNING")
    assert [line["event"] for line in found] == ["kuota_warning", "library_error"]
    assert found[0]["workload"] == "Job/ns/a" and found[0]["level"] == "warning"
    error = found[1]
    assert error["logger"] == "aiohttp.server" and error["level"] == "error"
    assert error["exception"][0]["exc_type"] == "ValueError"  # type: ignore[index]


def test_debug_shows_everything() -> None:
    assert [line["event"] for line in lines("DEBUG")] == [
        "kuota_debug",
        "kuota_warning",
        "library_info",
        "library_error",
    ]


def test_an_unknown_level_is_refused() -> None:
    result = CliRunner().invoke(app, ["serve", "--log-level", "chatty"])
    assert result.exit_code == 2
    assert "chatty" in result.output
