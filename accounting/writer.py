"""Apply a batch of events in one transaction, idempotently, on PostgreSQL or SQLite.

Each step of a plan is one statement over many rows. On PostgreSQL the rows travel as one JSON document that
the statement reads back with ``json_to_recordset`` — one round trip and one execution per step however big the
batch, and no per-value encoding in Python; on SQLite (in-process, no round trips) they go through
``executemany``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
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
from sqlalchemy.ext.asyncio import AsyncConnection
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


async def apply_plan(connection: AsyncConnection, plan: WritePlan) -> None:
    statements = _statements(connection.dialect.name)
    for step in statements.steps:
        rows: list[Row] = getattr(plan, step.rows)
        if not rows:
            continue
        if statements.as_json:
            # The whole step in one JSON document, serialised in C; the server reads it back as rows.
            await connection.execute(step.statement, {_BATCH: orjson.Fragment(orjson.dumps(rows))})
        else:
            await connection.execute(step.statement, rows)


_BATCH = "batch"


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
    intervals, admissions, preemptions = UsageInterval.__table__, Admission.__table__, Preemption.__table__
    workloads = Workload.__table__
    text: TypeEngine[Any] = String()
    integer: TypeEngine[Any] = Integer()
    instant: TypeEngine[Any] = UTCDateTime()

    def keyed_update(model: Any, rows: str, columns: dict[str, TypeEngine[Any]], build: Any) -> _Step:
        source = _Source(as_json, columns)
        return _Step(build(update(model), source.c), rows)

    def preemption_step(rows: str, extra: dict[str, TypeEngine[Any]], values: Any) -> _Step:
        # First write wins: a replayed or repeated step never moves a recorded time.
        def build(statement: Any, c: dict[str, ColumnElement[Any]]) -> Any:
            return statement.where(
                preemptions.c.victim == c["b_victim"], preemptions.c.victim_attempt == c["b_attempt"]
            ).values({name: func.coalesce(preemptions.c[name], value(c)) for name, value in values.items()})

        return keyed_update(Preemption, rows, {"b_victim": text, "b_attempt": integer, "b_at": instant, **extra}, build)

    def ended(started: ColumnElement[Any], at: ColumnElement[Any]) -> ColumnElement[Any]:
        # Nothing ends before it starts, whatever the clocks of the writers say.
        return case((started > at, started), else_=at)

    def close_attempt(table: Any, started: str, extra: dict[str, Any]) -> Any:
        def build(statement: Any, c: dict[str, ColumnElement[Any]]) -> Any:
            return statement.where(
                table.c.workload_id == c["b_workload"], table.c.attempt == c["b_attempt"], table.c.ended_at.is_(None)
            ).values(ended_at=ended(table.c[started], c["b_at"]), **{k: v(c) for k, v in extra.items()})

        return build

    def close_workload(table: Any, started: str, extra: dict[str, Any]) -> Any:
        def build(statement: Any, c: dict[str, ColumnElement[Any]]) -> Any:
            return statement.where(table.c.workload_id == c["b_workload"], table.c.ended_at.is_(None)).values(
                ended_at=ended(table.c[started], c["b_at"]), **extra
            )

        return build

    def finish(statement: Any, c: dict[str, ColumnElement[Any]]) -> Any:
        return statement.where(workloads.c.id == c["b_workload"]).values(
            finished_at=func.coalesce(workloads.c.finished_at, c["b_at"]),
            succeeded=func.coalesce(workloads.c.succeeded, c["b_succeeded"]),
        )

    attempt_key: dict[str, TypeEngine[Any]] = {"b_workload": text, "b_attempt": integer, "b_at": instant}
    workload_key: dict[str, TypeEngine[Any]] = {"b_workload": text, "b_at": instant}
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
            tuple(c.name for c in Preemption.__table__.columns if c.name not in _PREEMPTION_AT_ISSUE),
        ),
        _insert_ignoring(as_json, dialect_name, ConfigVersion, ("sha256", "applied_at")),
        _insert_ignoring(as_json, dialect_name, AuditLogEntry, ("entry_key",)),
        preemption_step(
            "checkpoint_requests",
            {"b_deadline": instant, "b_via": text},
            {
                "checkpoint_requested_at": lambda c: c["b_at"],
                "checkpoint_deadline": lambda c: c["b_deadline"],
                "checkpoint_via": lambda c: c["b_via"],
            },
        ),
        preemption_step(
            "checkpoint_acks",
            {"b_checkpoint_id": text},
            {"checkpoint_acked_at": lambda c: c["b_at"], "checkpoint_id": lambda c: c["b_checkpoint_id"]},
        ),
        preemption_step("checkpoint_timeouts", {}, {"checkpoint_timed_out_at": lambda c: c["b_at"]}),
        preemption_step(
            "suspensions",
            {"b_lost": BigInteger()},
            {"suspended_at": lambda c: c["b_at"], "lost_gpu_milliseconds": lambda c: c["b_lost"]},
        ),
        preemption_step("requeues", {}, {"requeued_at": lambda c: c["b_at"]}),
        # Evictions close their own attempt before Finished and recovery close whatever is left open.
        keyed_update(UsageInterval, "evictions", attempt_key, close_attempt(intervals, "started_at", {})),
        keyed_update(
            Admission,
            "evictions",
            {**attempt_key, "b_reason": text},
            close_attempt(admissions, "admitted_at", {"end_reason": lambda c: c["b_reason"]}),
        ),
        keyed_update(UsageInterval, "finishes", workload_key, close_workload(intervals, "started_at", {})),
        keyed_update(
            Admission, "finishes", workload_key, close_workload(admissions, "admitted_at", {"end_reason": "Finished"})
        ),
        keyed_update(Workload, "finishes", {**workload_key, "b_succeeded": Boolean()}, finish),
        keyed_update(UsageInterval, "recoveries", workload_key, close_workload(intervals, "started_at", {})),
        keyed_update(
            Admission,
            "recoveries",
            workload_key,
            close_workload(admissions, "admitted_at", {"end_reason": "Recovered"}),
        ),
    )
    return _Statements(as_json=as_json, steps=steps)
