"""`kuota migrate` and `kuota usage`: their output, and exit code 2 with a message (never a traceback) on bad
input."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from accounting import create_engine, migrate
from accounting.events import Finished
from kuota.commands import migrate as migrate_command
from kuota.commands import usage as usage_command
from tests.accounting.builders import GPU, admitted, at, seen
from tests.accounting.conftest import run_in_thread
from tests.accounting.proxy import free_port
from tests.accounting.test_repository import write

app = typer.Typer()
migrate_command.register(app)
usage_command.register(app)
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_migrate_creates_the_schema_from_the_environment_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'kuota.db'}"
    monkeypatch.setenv("KUOTA_DATABASE_URL", url)
    code, out, _ = invoke("migrate")
    assert code == 0 and "is at revision 0003" in out
    assert run_in_thread(migrate.current_revision(url)) == "0003"
    assert invoke("migrate")[0] == 0  # again: nothing to do


def test_migrate_sql_prints_and_touches_nothing(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    code, out, _ = invoke("migrate", "--sql", "--database-url", f"sqlite:///{path}")
    assert code == 0 and "CREATE TABLE usage_intervals" in out and not path.exists()
    code, out, _ = invoke("migrate", "--sql", "--database-url", "postgresql://nobody@nowhere/none")
    assert code == 0 and "BIGSERIAL" in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--database-url", "mysql://x/y"], 2, "unsupported database"),
        (["--database-url", "not a url"], 2, "not a database URL"),
        (["--revision", "nope", "--database-url", "sqlite:///{tmp}/x.db"], 2, "revision 'nope'"),
        (["--database-url", "postgresql://postgres@127.0.0.1:{port}/x"], 1, "cannot migrate"),
    ],
)
def test_migrate_bad_input(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    args = [a.format(tmp=tmp_path, port=free_port()) for a in args]
    exit_code, _, err = invoke("migrate", *args)
    assert (exit_code, message in err) == (code, True), err


@pytest.fixture
def url_with_usage(ledger_url: str) -> str:
    async def fill() -> None:
        engine = create_engine(ledger_url)
        try:
            await write(
                engine,
                [
                    seen("nlp/a"),
                    admitted("nlp/a", at=at(hours=1), usage={("h100", GPU): 2000, ("h100", "cpu"): 8000}),
                    Finished(workload_id="nlp/a", at=at(hours=2, minutes=30), succeeded=True),
                    seen("cv/b", team="vision"),
                    admitted("cv/b", team="vision", at=at(hours=2), flavor="a100"),
                    Finished(workload_id="cv/b", at=at(hours=2, seconds=1), succeeded=True),
                ],
            )
        finally:
            await engine.dispose()

    run_in_thread(fill())
    return ledger_url


def test_usage_json_csv_and_table(url_with_usage: str) -> None:
    period = ["--from", "2026-03-02T10:00:00+01:00", "--to", "2026-03-02T11:00", "--database-url", url_with_usage]
    # --from is 09:00 UTC (an hour after T0), --to 11:00 UTC: nlp/a's 09:00-10:30 and cv/b's second at 10:00.
    code, out, _ = invoke("usage", *period, "-o", "json")
    assert code == 0
    assert json.loads(out) == [
        {"team": "nlp", "resource": "cpu", "hours": "12", "milli_seconds": "43200000"},
        {"team": "nlp", "resource": GPU, "hours": "3", "milli_seconds": "10800000"},
        {"team": "vision", "resource": GPU, "hours": "0.000277777777778", "milli_seconds": "1000"},
    ]
    code, out, _ = invoke("usage", *period, "--by", "flavor", "--resource", GPU, "-o", "csv")
    assert code == 0
    assert list(csv.DictReader(io.StringIO(out))) == [
        {"flavor": "a100", "resource": GPU, "hours": "0.000277777777778", "milli_seconds": "1000"},
        {"flavor": "h100", "resource": GPU, "hours": "3", "milli_seconds": "10800000"},
    ]
    code, out, _ = invoke("usage", *period, "--by", "day", "--resource", GPU)
    assert code == 0 and "GPU-HOURS" in out and "2026-03-02" in out and "3.000" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "yesterday", "--to", "2026-03-02"], "--from: not an ISO 8601"),
        (["--from", "2026-03-02", "--to", "2026-03-01"], "must be before --to"),
        (["--from", "2026-03-01", "--to", "2026-03-02", "--by", "week"], "--by"),
        (["--from", "2026-03-01", "--to", "2026-03-02", "-o", "xml"], "--output"),
        (["--to", "2026-03-02"], "--from"),
    ],
)
def test_usage_bad_input_exits_2(tmp_path: Path, args: list[str], message: str) -> None:
    code, _, err = invoke("usage", *args, "--database-url", f"sqlite:///{tmp_path}/x.db")
    assert code == 2 and message in err, err


def test_usage_without_a_ledger_says_so(tmp_path: Path) -> None:
    code, _, err = invoke(
        "usage", "--from", "2026-03-01", "--to", "2026-03-02", "--database-url", f"sqlite:///{tmp_path}/missing.db"
    )
    assert code == 1 and "kuota migrate" in err and not (tmp_path / "missing.db").exists()
