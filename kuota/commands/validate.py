"""`kuota validate FILE`: check a team-quota file without touching anything."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from quota.loader import ConfigError, load_config_file
from quota.quantity import format_resource
from workloads.registry import UnknownKind, enabled_kinds


def register(app: typer.Typer) -> None:
    app.command(name="validate")(validate)


def validate(
    file: Annotated[Path, typer.Argument(help="A team-quota file (QuotaConfig).")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")] = False,
) -> None:
    """Exit 0 on a good file; exit 2 and list every problem (path and line) on a bad one."""
    try:
        config = load_config_file(file)
    except ConfigError as exc:
        sys.stderr.write(exc.render() + "\n")
        raise typer.Exit(2) from None
    try:
        kinds = enabled_kinds(config.job_kinds)
    except UnknownKind as exc:
        sys.stderr.write(f"{file}: jobKinds: {exc}\n")
        raise typer.Exit(2) from None
    if quiet:
        return
    gpus = sum(
        quota.nominal
        for team in config.teams
        for group in team.groups()
        for entry in group.flavors
        for resource, quota in entry.resources.items()
        if resource.endswith("/gpu")
    )
    sys.stdout.write(
        f"{file}: valid — {len(config.teams)} teams, {len(config.cohorts)} cohorts, "
        f"{len(config.flavors)} flavors, {len(config.priority_classes)} priority classes, "
        f"{format_resource('nvidia.com/gpu', gpus)} GPUs of nominal team quota; queues {', '.join(kinds.names())}\n"
    )
