"""Apply a batch of events in one transaction, idempotently, on PostgreSQL or SQLite.

Each step of a plan is one statement over many rows. On PostgreSQL the rows travel as one JSON document that
the statement reads back with ``json_to_recordset`` — one round trip and one execution per step however big the
batch, and no per-value encoding in Python; on SQLite (in-process, no round trips) they go as tuples to the
driver's ``executemany``, the statement compiled once (``_DriverRows``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

import orjson
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ClauseElement,
    ColumnElement,
    Executable,
    Integer,
    String,
    bindparam,
    case,
    column,
    func,
    select,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.types import TypeEngine

from accounting.database import dialect_insert
from accounting.events import LedgerEvent
from accounting.models import (
    Admission,
    AuditLogEntry,
    ConfigVersion,
    Preemption,
    UsageInterval,
    UTCDateTime,
    Workload,
    WorkloadEventRow,
)
from accounting.rows import Row, WritePlan, plan_writes


async def write_events(connection: AsyncConnection, events: Sequence[LedgerEvent]) -> None:
    """Write ``events`` inside the connection's current transaction. Writing them again changes nothing."""
    await apply_plan(connection, plan_writes(events))


DriverStep = tuple[str, list[tuple[Any, ...]]]
"""A statement's SQL and its rows' parameters, in the driver's positional order."""


def _steps_with_rows(statements: _Statements, plan: WritePlan) -> Iterator[tuple[_Step, list[Row]]]:
    """The steps the plan has rows for, in the order they run."""
    for step in statements.steps:
        rows: list[Row] = getattr(plan, step.rows)
        if rows:
            yield step, rows


async def apply_plan(connection: AsyncConnection, plan: WritePlan) -> None:
    statements = _statements(connection.dialect.name)
    for step, rows in _steps_with_rows(statements, plan):
        if statements.as_json:
            # The whole step in one JSON document, serialised in C; the server reads it back as rows.
            await connection.execute(step.statement, {_BATCH: orjson.Fragment(orjson.dumps(rows))})
        else:
            driver = _driver_rows(connection.dialect, step.statement, rows)
            if driver is None:
                await connection.execute(step.statement, rows)
            else:
                await connection.exec_driver_sql(*driver)


def sqlite_steps(dialect: Dialect, plan: WritePlan) -> list[DriverStep] | None:
    """The plan's statements with their rows as the SQLite driver takes them, in the order `apply_plan` runs
    them; None when a step must go through SQLAlchemy's own path (its rows do not all carry the same keys)."""
    out = []
    for step, rows in _steps_with_rows(_statements(dialect.name), plan):
        driver = _driver_rows(dialect, step.statement, rows)
        if driver is None:
            return None
        out.append(driver)
    return out


_BATCH = "batch"


class _DriverRows:
    """One statement compiled for one set of row keys, and how to turn a row into the driver's parameters.

    SQLAlchemy's executemany builds a parameter dict per row and runs every bind processor through its generic
    machinery: on the real control plane that was a third of the ledger's CPU. Here the statement is compiled once
    (per dialect and set of keys), and a row becomes a tuple in the compiled order, each value passed through the
    same bind processor SQLAlchemy would call (the column type's `dialect_impl(...).bind_processor(...)`), so the
    stored values are the same; a parameter the rows do not carry is the statement's own fixed value.
    """

    def __init__(self, dialect: Dialect, statement: Executable, keys: tuple[str, ...]) -> None:
        compiled = cast(ClauseElement, statement).compile(dialect=dialect, column_keys=list(keys))
        assert isinstance(compiled, SQLCompiler)
        order = compiled.positiontup
        if order is None:
            raise ValueError(f"dialect {dialect.name} does not bind parameters by position")
        self.statement = statement  # held so that the id in the cache key is never reused by another statement
        self.sql = compiled.string
        fixed: dict[str, Any] = {}
        processors: dict[str, Callable[[Any], Any] | None] = {}
        for name in set(order):
            bind = compiled.binds[name]
            processors[name] = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if name not in keys:
                if bind.callable is not None or bind.required:
                    raise ValueError(f"parameter {name!r} has no value in the rows")
                process = processors[name]
                fixed[name] = bind.value if process is None else process(bind.value)  # once, not per row
        # (name, its processor, None) for a value from the row; (name, None, the processed value) for a fixed one.
        self.columns = [
            (name, None, fixed[name]) if name in fixed else (name, processors[name], _FROM_ROW) for name in order
        ]

    def parameters(self, rows: Sequence[Row]) -> list[tuple[Any, ...]]:
        columns = self.columns
        out: list[tuple[Any, ...]] = []
        for row in rows:
            values = []
            for name, process, value in columns:
                if value is _FROM_ROW:
                    value = row[name] if process is None else process(row[name])
                values.append(value)
            out.append(tuple(values))
        return out


_FROM_ROW: Any = object()
# None: the statement cannot take this path (remembered, so it is not compiled again for every batch).
_DRIVER_ROWS: dict[tuple[str, int, tuple[str, ...]], _DriverRows | None] = {}


def _driver_rows(dialect: Dialect, statement: Executable, rows: Sequence[Row]) -> DriverStep | None:
    """The SQL and the driver's parameters for `rows`; None where SQLAlchemy's own path must run (rows whose keys
    differ, a dialect that binds by name)."""
    keys = tuple(rows[0])
    first = rows[0].keys()
    if any(row.keys() != first for row in rows):
        return None
    cache_key = (dialect.name, id(statement), keys)
    if cache_key in _DRIVER_ROWS:
        prepared = _DRIVER_ROWS[cache_key]
    else:
        try:
            prepared = _DriverRows(dialect, statement, keys)
        except ValueError:
            prepared = None
        _DRIVER_ROWS[cache_key] = prepared
    return None if prepared is None else (prepared.sql, prepared.parameters(rows))


@dataclass(frozen=True)
class _Step:
    statement: Executable
    rows: str  # the WritePlan attribute holding its rows


@dataclass(frozen=True)
class _Statements:
    as_json: bool  # one JSON parameter per step (PostgreSQL) instead of one execution per row
    steps: tuple[_Step, ...]


class _Source:
    """The rows of a step as columns a statement can refer to: ``json_to_recordset`` of one JSON parameter on
    PostgreSQL, plain bound parameters (executed once per row) on SQLite."""

    def __init__(self, as_json: bool, columns: dict[str, TypeEngine[Any]]) -> None:
        self.c: dict[str, ColumnElement[Any]]
        if as_json:
            records = func.json_to_recordset(bindparam(_BATCH, type_=JSON()))
            typed = records.table_valued(*(column(name, type_) for name, type_ in columns.items()))
            table = typed.render_derived(name=_BATCH, with_types=True)
            self.c = {name: table.c[name] for name in columns}
        else:
            self.c = {name: bindparam(name, type_=type_) for name, type_ in columns.items()}


def _insert_ignoring(
    as_json: bool, dialect_name: str, model: Any, natural_key: tuple[str, ...], filled_later: tuple[str, ...] = ()
) -> _Step:
    """Insert new rows, skip those whose natural key exists. ``filled_later``: columns that later events set,
    left out of the insert."""
    table = model.__table__
    columns = {
        c.name: c.type
        for c in table.columns
        if not (c.primary_key and c.autoincrement is True) and c.name not in filled_later
    }
    insert = dialect_insert(dialect_name)(table)
    if as_json:
        source = _Source(True, columns)
        insert = insert.from_select(list(columns), select(*(source.c[name] for name in columns)))
    statement = insert.on_conflict_do_nothing(index_elements=list(natural_key))
    return _Step(statement, _PLAN_ROWS[table.name])


_PREEMPTION_AT_ISSUE = ("victim", "victim_attempt", "preemptor", "reason", "issued_at")

_PLAN_ROWS = {
    "workloads": "workloads",
    "workload_events": "workload_events",
    "admissions": "admissions",
    "usage_intervals": "intervals",
    "preemptions": "preemptions",
    "config_versions": "config_versions",
    "audit_log": "audit_entries",
}


@cache
def _statements(dialect_name: str) -> _Statements:
    as_json = dialect_name == "postgresql"
    preemptions, workloads = Preemption.__table__, Workload.__table__
    text: TypeEngine[Any] = String()
    integer: TypeEngine[Any] = Integer()
    instant: TypeEngine[Any] = UTCDateTime()

    def fill_preemption(rows: str, **columns: tuple[str, TypeEngine[Any]]) -> _Step:
        """Set preemption columns (column=(parameter, type)) from the step's rows. First write wins: a replayed
        or repeated step never moves a recorded time."""
        c = _Source(as_json, {"b_victim": text, "b_attempt": integer, **dict(columns.values())}).c
        statement = (
            update(Preemption)
            .where(preemptions.c.victim == c["b_victim"], preemptions.c.victim_attempt == c["b_attempt"])
            .values({name: func.coalesce(preemptions.c[name], c[param]) for name, (param, _) in columns.items()})
        )
        return _Step(statement, rows)

    def close(model: Any, rows: str, *, of_attempt: bool, end_reason: str | None = None) -> _Step:
        """End the open usage (intervals or admissions) of the rows' workloads — of one admission attempt, or
        all of it — at the rows' time; nothing ends before it starts, whatever the writers' clocks say.
        ``end_reason`` (admissions): a fixed text, or "b_reason" to take the rows' own."""
        table = model.__table__
        params = {"b_workload": text, "b_at": instant}
        if of_attempt:
            params["b_attempt"] = integer
        if end_reason == "b_reason":
            params["b_reason"] = text
        c = _Source(as_json, params).c
        started = table.c.started_at if model is UsageInterval else table.c.admitted_at
        match = [table.c.workload_id == c["b_workload"], table.c.ended_at.is_(None)]
        if of_attempt:
            match.append(table.c.attempt == c["b_attempt"])
        values: dict[str, Any] = {"ended_at": case((started > c["b_at"], started), else_=c["b_at"])}
        if end_reason is not None:
            values["end_reason"] = c["b_reason"] if end_reason == "b_reason" else end_reason
        return _Step(update(model).where(*match).values(values), rows)

    finished = _Source(as_json, {"b_workload": text, "b_at": instant, "b_succeeded": Boolean()}).c
    finish_workload = _Step(
        update(Workload)
        .where(workloads.c.id == finished["b_workload"])
        .values(
            finished_at=func.coalesce(workloads.c.finished_at, finished["b_at"]),
            succeeded=func.coalesce(workloads.c.succeeded, finished["b_succeeded"]),
        ),
        "finishes",
    )

    steps = (
        # Inserts first: every update below may target a row inserted by the same batch.
        _insert_ignoring(as_json, dialect_name, Workload, ("id",), ("finished_at", "succeeded")),
        _insert_ignoring(as_json, dialect_name, WorkloadEventRow, ("workload_id", "event_key")),
        _insert_ignoring(as_json, dialect_name, Admission, ("workload_id", "attempt"), ("ended_at", "end_reason")),
        _insert_ignoring(
            as_json, dialect_name, UsageInterval, ("workload_id", "attempt", "flavor", "resource"), ("ended_at",)
        ),
        _insert_ignoring(
            as_json,
            dialect_name,
            Preemption,
            ("victim", "victim_attempt"),
            tuple(c.name for c in preemptions.columns if c.name not in _PREEMPTION_AT_ISSUE),
        ),
        _insert_ignoring(as_json, dialect_name, ConfigVersion, ("sha256", "applied_at")),
        _insert_ignoring(as_json, dialect_name, AuditLogEntry, ("entry_key",)),
        fill_preemption(
            "checkpoint_requests",
            checkpoint_requested_at=("b_at", instant),
            checkpoint_deadline=("b_deadline", instant),
            checkpoint_via=("b_via", text),
        ),
        fill_preemption(
            "checkpoint_acks", checkpoint_acked_at=("b_at", instant), checkpoint_id=("b_checkpoint_id", text)
        ),
        fill_preemption("checkpoint_timeouts", checkpoint_timed_out_at=("b_at", instant)),
        fill_preemption("suspensions", suspended_at=("b_at", instant), lost_gpu_milliseconds=("b_lost", BigInteger())),
        fill_preemption("node_failures", node=("b_node", text)),
        fill_preemption("requeues", requeued_at=("b_at", instant)),
        # Evictions close their own attempt before Finished and recovery close whatever is left open.
        close(UsageInterval, "evictions", of_attempt=True),
        close(Admission, "evictions", of_attempt=True, end_reason="b_reason"),
        close(UsageInterval, "finishes", of_attempt=False),
        close(Admission, "finishes", of_attempt=False, end_reason="Finished"),
        finish_workload,
        close(UsageInterval, "recoveries", of_attempt=False),
        close(Admission, "recoveries", of_attempt=False, end_reason="Recovered"),
    )
    return _Statements(as_json=as_json, steps=steps)
