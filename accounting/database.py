"""Engines for the two supported databases: PostgreSQL (asyncpg) in production, SQLite (aiosqlite) embedded."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

DATABASE_URL_ENV = "KUOTA_DATABASE_URL"
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///kuota.db"
"""A file in the working directory: the embedded default."""

_DRIVERS = {"postgresql": "asyncpg", "sqlite": "aiosqlite"}
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",  # readers never block the ledger's writer
    "PRAGMA foreign_keys=ON",  # off by default in SQLite
    "PRAGMA synchronous=NORMAL",
    f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
)
"""Every SQLite connection kuota opens runs these first."""
_BEGIN_OPTION = "kuota_sqlite_begin"


class DatabaseURLError(ValueError):
    """The URL is malformed or names a database kuota does not support."""


def resolve_database_url(explicit: str | None = None) -> str:
    """The explicit URL, else ``KUOTA_DATABASE_URL``, else the SQLite file ``kuota.db`` here; normalised."""
    url = explicit or os.environ.get(DATABASE_URL_ENV) or DEFAULT_DATABASE_URL
    return normalize_database_url(url)


def normalize_database_url(url: str) -> str:
    """Fill in the async driver (``postgresql://`` → ``postgresql+asyncpg://``) and reject anything else."""
    parsed = _parse(url)
    return parsed.render_as_string(hide_password=False)


def _parse(url: str) -> URL:
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseURLError(f"not a database URL: {url!r}") from exc
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "postgres":
        backend = "postgresql"
    if backend not in _DRIVERS:
        raise DatabaseURLError(f"unsupported database {backend!r}: use postgresql+asyncpg://… or sqlite+aiosqlite:///…")
    wanted = _DRIVERS[backend]
    if driver not in ("", wanted):
        raise DatabaseURLError(f"unsupported driver {parsed.drivername!r}: kuota uses {backend}+{wanted}")
    return parsed.set(drivername=f"{backend}+{wanted}")


def dialect_name(url: str) -> str:
    """``"postgresql"`` or ``"sqlite"``."""
    return _parse(url).get_backend_name()


def dialect_insert(dialect_name: str) -> Any:
    """The ``insert`` with ``on_conflict_do_nothing/update`` of the dialect: both spell it the same way."""
    return postgresql.insert if dialect_name == "postgresql" else sqlite.insert


def json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def create_engine(url: str, **options: Any) -> AsyncEngine:
    """An async engine tuned for the ledger. ``options`` go to ``create_async_engine`` (e.g. ``poolclass``)."""
    parsed = _parse(url)
    options.setdefault("json_serializer", json_text)
    options.setdefault("json_deserializer", orjson.loads)
    if parsed.get_backend_name() == "sqlite":
        connect_args = options.setdefault("connect_args", {})
        connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
        engine = create_async_engine(parsed, **options)
        _configure_sqlite(engine)
        return engine
    options.setdefault("pool_pre_ping", True)
    # A dead server must fail fast so that events wait in the outbox, not in a hung connect.
    connect_args = options.setdefault("connect_args", {})
    connect_args.setdefault("timeout", 10)
    connect_args.setdefault("command_timeout", 60)
    connect_args.setdefault("server_settings", {"application_name": "kuota"})
    return create_async_engine(parsed, **options)


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # Take transaction control away from the sqlite3 module (it skips BEGIN for reads and DDL) and emit
        # BEGIN ourselves below, so that writes and migrations are really transactional.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # Writers take the write lock up front: a deferred transaction that reads, then writes, fails at once
        # with SQLITE_BUSY when another process wrote meanwhile, instead of waiting for busy_timeout.
        mode = connection.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")


@asynccontextmanager
async def write_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One read-write transaction: committed when the block ends, rolled back if it raises."""
    async with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            await connection.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        async with connection.begin():
            yield connection
