"""The `kuota` command line: one typer app; each command lives in kuota/commands/<name>.py.

Command modules are discovered, not listed, so that adding a command never means editing this file.
Every module in kuota/commands/ exposes ``register(app: typer.Typer) -> None``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from kuota import commands

app = typer.Typer(
    name="kuota",
    help="Job queueing and quota admission for Kubernetes GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Job queueing and quota admission for Kubernetes GPU clusters."""


def _register_commands() -> None:
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(app)


_register_commands()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
