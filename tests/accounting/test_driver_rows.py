"""SQLite batches go to the driver as tuples (accounting/writer.py `_DriverRows`): what they store must be, byte for
byte, what SQLAlchemy's own executemany stores for the same events, in every table."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy.dialects import sqlite

from accounting import create_engine
from accounting import writer as ledger_writer
from accounting.events import IntervalsClosedOnRecovery, LedgerEvent
from accounting.models import Base
from accounting.writer import _driver_rows, _DriverRows, _statements, write_events

from .builders import admitted, at, life, seen, stream


def _events() -> list[list[LedgerEvent]]:
    """Batches covering every step: every table's insert, the preemption steps, finishes, recoveries."""
    return [
        stream(40),
        [seen("r/open"), admitted("r/open", at=at(hours=1)), IntervalsClosedOnRecovery(workload_id="r/open", at=at(2))],
        life("p/x", preempted=True, start=at(hours=3)),
        stream(12, prefix="again"),  # partly the same keys as nothing above: more inserts in a later batch
        stream(40),  # replayed: every insert ignored, every update first-write-wins
    ]


async def _write(path: Path, batches: Sequence[Sequence[LedgerEvent]]) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        for batch in batches:
            async with engine.begin() as connection:
                await write_events(connection, batch)
    finally:
        await engine.dispose()


def _stored(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table as SQLite holds it (its own types: text for instants, JSON as text)."""
    with sqlite3.connect(path) as connection:
        return {
            table.name: connection.execute(f"SELECT * FROM {table.name} ORDER BY rowid").fetchall()
            for table in Base.metadata.sorted_tables
        }


async def test_driver_tuples_store_what_sqlalchemy_stores(
    sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, generic = tmp_path / "fast.db", tmp_path / "generic.db"
    shutil.copy(sqlite_template, fast)
    shutil.copy(sqlite_template, generic)
    calls: list[int] = []
    real = ledger_writer._driver_rows

    def counted(*args: object) -> object:
        result = real(*args)  # type: ignore[arg-type]
        calls.append(result is not None)
        return result

    monkeypatch.setattr(ledger_writer, "_driver_rows", counted)
    await _write(fast, _events())
    assert calls and all(calls)  # every step went to the driver
    monkeypatch.setattr(ledger_writer, "_driver_rows", lambda *args: None)
    await _write(generic, _events())
    stored = _stored(fast)
    assert stored == _stored(generic)
    assert all(stored[name] for name in ("workloads", "admissions", "usage_intervals", "preemptions", "audit_log"))


def test_rows_whose_keys_differ_take_sqlalchemys_path() -> None:
    dialect = sqlite.dialect()
    finishes = next(step for step in _statements("sqlite").steps if step.rows == "finishes").statement
    same = [
        {"b_workload": "a", "b_at": at(1), "b_succeeded": True},
        {"b_workload": "b", "b_at": at(2), "b_succeeded": False},
    ]
    prepared = _driver_rows(dialect, finishes, same)
    assert prepared is not None
    sql, parameters = prepared
    assert sql.count("?") == 3 and len(parameters) == 2
    assert _driver_rows(dialect, finishes, [same[0], {"b_workload": "c", "b_at": at(3)}]) is None


def test_a_statement_parameter_the_rows_do_not_carry_is_its_fixed_value() -> None:
    dialect = sqlite.dialect()
    [recovered] = [
        step.statement
        for step in _statements("sqlite").steps
        if step.rows == "recoveries" and "end_reason" in str(step.statement.compile(dialect=dialect))  # type: ignore[attr-defined]
    ]
    prepared = _DriverRows(dialect, recovered, ("b_workload", "b_at"))
    [row] = prepared.parameters([{"b_workload": "w", "b_at": at(1)}])
    assert "Recovered" in row and "w" in row
    with pytest.raises(ValueError, match="has no value"):
        _DriverRows(dialect, recovered, ("b_workload",))
