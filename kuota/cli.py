"""The `kuota` command line: one typer app; each command lives in kuota/commands/<name>.py.

Command modules are discovered, not listed, so that adding a command never means editing this file.
Every module in kuota/commands/ exposes ``register(app: typer.Typer) -> None``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any

import typer

from kuota import commands

_app = typer.Typer(
    name="kuota",
    help="Job queueing and quota admission for Kubernetes GPU clusters.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish and PowerShell
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"kuota {version('kuota')}")
        except PackageNotFoundError:  # running from a checkout that was never installed
            typer.echo("kuota (not installed)")
        raise typer.Exit()


@_app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", help="Print kuota's version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """Job queueing and quota admission for Kubernetes GPU clusters."""


def _register_commands(argv: list[str]) -> None:
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))
    # `kuota scenario FILE` is run thousands of times by conformance suites: when the command's module is known
    # by its name, import only that one instead of every command's dependencies (alembic, aiohttp, ...).
    wanted = argv[1].replace("-", "_") if len(argv) > 1 and not argv[1].startswith("-") else None
    if wanted in names:
        names = [wanted]
    for name in names:
        module = importlib.import_module(f"{commands.__name__}.{name}")
        module.register(_app)


def __getattr__(name: str) -> typer.Typer:
    """`kuota.cli.app` for tests and embedding: the app with every command registered."""
    if name == "app":
        if not _app.registered_commands:
            _register_commands([])
        return _app
    raise AttributeError(name)


def _plain_metavars(command: Any) -> None:
    """typer shows each parameter's Python type where help shows what to type (`--team <str>`, `FILE <path>`, even
    `--help <bool>`): a flag gets nothing there, a value its name in capitals (`--team TEAM`), unless the parameter
    names its own."""
    for param in command.params:
        if param.param_type_name == "argument":
            param.display_type_rich = lambda ctx: None  # its name, in capitals, already says what to type
        elif param.metavar is None:
            param.metavar = "" if param.is_flag else param.name.upper()
    make_help = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)


def main(prog_name: str = "kuota") -> None:
    _register_commands(sys.argv)
    command = typer.main.get_command(_app)
    _plain_metavars(command)
    try:
        command(prog_name=prog_name)
    except KeyboardInterrupt:
        sys.exit(130)


def kubectl_main() -> None:
    """`kubectl kuota ...`: kubectl runs `kubectl-kuota` from PATH as a plugin; help then names the command so."""
    main(prog_name="kubectl kuota")
