"""Schema migrations, from code: ``upgrade``, ``downgrade``, ``sql`` (offline DDL) and what revision a database is at.

The alembic scripts live in the ``migrations`` package, found through ``migrations.__file__`` so this works from an
installed kuota too. ``migrations`` is imported only when a function runs: its env.py imports accounting.
The synchronous functions run their own event loop; from async code use the ``*_async`` ones.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from accounting.database import create_engine, resolve_database_url


def _script_location() -> str:
    import migrations

    return str(Path(migrations.__file__).parent)


def _config(url: str, output: io.StringIO | None = None) -> Config:
    config = Config(output_buffer=output)
    config.set_main_option("script_location", _script_location())
    # ConfigParser interpolation would read a '%' in a password as a reference.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def head_revision() -> str:
    """The newest revision in the scripts."""
    head = ScriptDirectory.from_config(_config("sqlite+aiosqlite://")).get_current_head()
    assert head is not None, "the migrations package has no revisions"
    return head


async def _run(url: str | None, operation: str, revision: str) -> None:
    resolved = resolve_database_url(url)
    config = _config(resolved)
    engine = create_engine(resolved, poolclass=NullPool)

    def run(connection: Connection) -> None:
        config.attributes["connection"] = connection
        getattr(command, operation)(config, revision)

    try:
        async with engine.connect() as connection:
            await connection.run_sync(run)
            await connection.commit()
    finally:
        await engine.dispose()


async def upgrade_async(url: str | None = None, revision: str = "head") -> None:
    await _run(url, "upgrade", revision)


async def downgrade_async(url: str | None = None, revision: str = "base") -> None:
    await _run(url, "downgrade", revision)


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Bring the database at ``url`` (default: ``KUOTA_DATABASE_URL``, else ``kuota.db``) up to ``revision``."""
    asyncio.run(upgrade_async(url, revision))


def downgrade(url: str | None = None, revision: str = "base") -> None:
    asyncio.run(downgrade_async(url, revision))


def sql(url: str | None = None, revision: str = "head") -> str:
    """The DDL that upgrading an empty database to ``revision`` would run, in the URL's dialect; touches nothing."""
    output = io.StringIO()
    command.upgrade(_config(resolve_database_url(url), output), revision, sql=True)
    return output.getvalue()


async def current_revision(url: str | None = None) -> str | None:
    """The revision the database is at (None when it was never migrated)."""
    engine = create_engine(resolve_database_url(url), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())
    finally:
        await engine.dispose()
