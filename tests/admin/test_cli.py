"""The client commands against the live server: tables, -o json, exit codes, no tracebacks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from kuota.cli import _register_commands, app
from tests.admin.conftest import Server

_register_commands(["kuota"])
runner = CliRunner()


def kuota(server: Server, *args: str, who: str = "root") -> tuple[int, str]:
    result = runner.invoke(
        app, list(args), env={"KUOTA_SERVER": server.url, "KUOTA_TOKEN": server.tokens[who], "COLUMNS": "300"}
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_queues_and_workloads(server: Server) -> None:
    code, out = kuota(server, "queues")
    assert code == 0 and "vision/huge" in out
    code, out = kuota(server, "workloads", "--team", "vision", "-o", "json")
    assert code == 0 and json.loads(out)["total"] >= 2
    code, out = kuota(server, "why", "vision/huge")
    assert code == 0 and "pending" in out and "position 1" in out


def test_credits_and_report(server: Server) -> None:
    code, out = kuota(server, "credits", "-o", "json")
    assert code == 0 and {c["team"] for c in json.loads(out)["teams"]} == {"nlp", "vision"}
    code, out = kuota(server, "report", "--from", "2000-01-01T00:00:00Z", "--to", "2100-01-01T00:00:00Z", "-o", "csv")
    assert code == 0 and out.startswith("team,resource")


def test_actions_and_errors(server: Server) -> None:
    code, out = kuota(server, "hold", "vision/next", "--reason", "cli", who="vision-lead")
    assert code == 0 and "held" in out
    assert kuota(server, "release", "vision/next", who="vision-lead")[0] == 0
    code, out = kuota(server, "hold", "vision/ghost")
    assert code == 2 and "404" in out and "Traceback" not in out
    code, out = kuota(server, "hold", "vision/next", who="nlp-lead")
    assert code == 1 and "403" in out
    code, out = kuota(server, "queues", "-o", "yaml")
    assert code == 2
    result = runner.invoke(app, ["queues"], env={"KUOTA_SERVER": "http://127.0.0.1:9", "KUOTA_TOKEN": "x"})
    assert result.exit_code == 1 and "cannot reach" in result.output


def test_tokens_add(tmp_path: Path) -> None:
    file = tmp_path / "t.yaml"
    result = runner.invoke(app, ["tokens", "add", "carol", "--role", "team:nlp", "--file", str(file)])
    assert result.exit_code == 0
    token = result.stdout.strip().splitlines()[-1]
    assert token.startswith("kuota_") and token not in file.read_text()
    bad = runner.invoke(app, ["tokens", "add", "dave", "--role", "god", "--file", str(file)])
    assert bad.exit_code == 2 and "role" in bad.output


def test_tables_fit_80_columns_and_wide_shows_every_column(server: Server) -> None:
    def at(width: int, *args: str) -> str:
        env = {"KUOTA_SERVER": server.url, "KUOTA_TOKEN": server.tokens["root"], "COLUMNS": str(width)}
        result = runner.invoke(app, list(args), env=env)
        assert result.exit_code == 0, result.output
        return result.output

    for command in (("workloads",), ("queues",)):
        narrow = at(80, *command)
        assert max(len(line) for line in narrow.splitlines()) <= 80, narrow
        assert "priority" not in narrow  # a column only -o wide shows
        wide = at(300, *command, "-o", "wide")
        assert "priority" in wide and "queue" in wide


def test_report_through_the_api_and_usage_from_the_ledger_print_the_same(server: Server) -> None:
    server.flush()
    ledger = server.runtime.ledger
    assert ledger is not None
    # A period that ended: running work is counted up to the period's end, not up to each command's own now.
    end = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    period = ["--from", "2000-01-01T00:00:00Z", "--to", end, "--by", "team"]
    for output in ("json", "csv"):
        code, through_api = kuota(server, "report", *period, "-o", output)
        assert code == 0, through_api
        direct = runner.invoke(app, ["usage", *period, "-o", output, "--database-url", ledger.url])
        assert direct.exit_code == 0, direct.output
        assert through_api == direct.output
        assert "nlp" in through_api and "vision" in through_api
