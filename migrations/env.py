"""Alembic environment for the ledger: async engines (asyncpg, aiosqlite), batch mode on SQLite.

Two ways in: ``accounting.migrate`` hands over an open connection in ``config.attributes["connection"]``;
the ``alembic`` command line gets none, and a short-lived engine is made from the URL.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from accounting.database import create_engine, dialect_name, resolve_database_url
from accounting.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    return resolve_database_url(config.get_main_option("sqlalchemy.url") or None)


def _configure(*, sqlite: bool, **options: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things: batch mode recreates the table instead.
        render_as_batch=sqlite,
        **options,
    )


def run_migrations_offline() -> None:
    url = _url()
    _configure(url=url, literal_binds=True, dialect_opts={"paramstyle": "named"}, sqlite=dialect_name(url) == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_with_connection(connection: Connection) -> None:
    _configure(connection=connection, sqlite=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


async def run_with_new_engine() -> None:
    engine = create_engine(_url(), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run_with_connection)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
elif (connection := config.attributes.get("connection")) is not None:
    run_with_connection(connection)
else:
    asyncio.run(run_with_new_engine())
