"""`kuota migrate [--database-url URL] [--sql] [--revision head]`: bring the ledger's schema up to date."""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer
from alembic.util import CommandError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from accounting import migrate
from accounting.database import DATABASE_URL_ENV, DEFAULT_DATABASE_URL, DatabaseURLError, resolve_database_url

HELP = (
    "Create or upgrade the ledger's tables (alembic migrations). With --sql, print the SQL instead and touch "
    f"nothing. The database is --database-url, else ${DATABASE_URL_ENV}, else {DEFAULT_DATABASE_URL} "
    "(a file in the working directory)."
)

DatabaseURLOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        metavar="URL",
        help=f"postgresql+asyncpg://… or sqlite+aiosqlite:///FILE (default: ${DATABASE_URL_ENV}, else "
        f"{DEFAULT_DATABASE_URL})",
        show_default=False,
    ),
]


def register(app: typer.Typer) -> None:
    app.command("migrate", help=HELP)(migrate_command)


def migrate_command(
    database_url: DatabaseURLOption = None,
    sql: Annotated[bool, typer.Option("--sql", help="Print the SQL of the upgrade; run nothing.")] = False,
    revision: Annotated[str, typer.Option("--revision", metavar="REV", help="Target revision.")] = "head",
) -> None:
    url = database_url_or_exit(database_url)
    try:
        if sql:
            typer.echo(migrate.sql(url, revision), nl=False)
            return
        migrate.upgrade(url, revision)
    except CommandError as exc:
        fail(f"revision {revision!r}: {exc}")
    except (SQLAlchemyError, OSError) as exc:
        fail(f"cannot migrate {shown(url)}: {getattr(exc, 'orig', None) or exc}", code=1)
    typer.echo(f"{shown(url)} is at revision {revision if revision != 'head' else migrate.head_revision()}")


def database_url_or_exit(database_url: str | None) -> str:
    try:
        return resolve_database_url(database_url)
    except DatabaseURLError as exc:
        fail(str(exc))


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    return make_url(url).render_as_string(hide_password=True)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
