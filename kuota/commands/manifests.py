"""`kuota manifests`: config/deploy's RBAC and webhook configurations for the job kinds a deployment queues."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from kuota.kind_manifests import POD_WEBHOOKS_NOTE, widen_rbac, widen_webhooks
from workloads.registry import REGISTRY, UnknownKind


def register(app: typer.Typer) -> None:
    app.command(name="manifests")(manifests)


def manifests(
    kinds: Annotated[
        str,
        typer.Option("--kinds", help=f"Comma-separated kinds to queue; known: {', '.join(REGISTRY.names())}."),
    ] = "Job",
    deploy: Annotated[Path, typer.Option("--deploy", help="The config/deploy folder to widen.")] = Path(
        "config/deploy"
    ),
) -> None:
    """Print rbac.yaml and webhooks.yaml of DEPLOY with a rule and webhooks per kind, for `kubectl apply -f -`.

    Apply config/deploy first (it is what Job needs), then this; set the same kinds in the quota file's jobKinds.
    """
    try:
        enabled = REGISTRY.enabled(kinds.split(","))
    except UnknownKind as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    try:
        rbac = list(yaml.safe_load_all((deploy / "rbac.yaml").read_text()))
        webhooks = list(yaml.safe_load_all((deploy / "webhooks.yaml").read_text()))
    except OSError as exc:
        typer.echo(f"error: cannot read {deploy}: {exc.strerror}; run from the repository or pass --deploy", err=True)
        raise typer.Exit(2) from exc
    documents = widen_rbac([d for d in rbac if d], enabled) + widen_webhooks([d for d in webhooks if d], enabled)
    if enabled.gated:
        typer.echo(POD_WEBHOOKS_NOTE, nl=False)
    typer.echo(yaml.safe_dump_all(documents, sort_keys=False), nl=False)
