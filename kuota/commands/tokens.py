"""`kuota tokens add NAME --role ROLE --file FILE`: create an admin API token; prints it once, stores its hash."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

tokens_app = typer.Typer(help="Admin API bearer tokens (the file --admin-tokens reads).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(tokens_app, name="tokens")


@tokens_app.command("add", help="Create a token for NAME with ROLE (admin, viewer, team:<name>); print it once.")
def add(
    name: Annotated[str, typer.Argument(help="Who holds the token; audit entries carry this name.")],
    role: Annotated[str, typer.Option("--role", help="admin, viewer or team:<name>")],
    file: Annotated[Path, typer.Option("--file", help="Token file (YAML), created if missing.")],
    scheme: Annotated[str, typer.Option("--hash", help="sha256 (default) or scrypt")] = "sha256",
) -> None:
    from admin.auth import TokenFileError, add_token

    try:
        token = add_token(file, name, role, scheme)
    except (TokenFileError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2) from None
    except OSError as exc:
        sys.stderr.write(f"error: cannot write {file}: {exc.strerror or exc}\n")
        raise typer.Exit(1) from None
    sys.stderr.write(f"token for {name} ({role}) stored as a hash in {file}; it is shown only now:\n")
    typer.echo(token)
