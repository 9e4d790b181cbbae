"""`kuota certs`: a CA and a serving certificate for the webhook, and the caBundle patch that trusts them."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from webhooks.certs import make_certificates, service_dns_names

#: The webhook configurations in config/deploy/webhooks.yaml: kind → (name, number of webhooks in it).
WEBHOOK_CONFIGURATIONS = {
    "mutatingwebhookconfiguration": ("kuota-mutate", 2),
    "validatingwebhookconfiguration": ("kuota-validate", 2),
}
FILES = ("ca.crt", "tls.crt", "tls.key")


def register(app: typer.Typer) -> None:
    app.command(name="certs")(certs)


def certs(
    service: Annotated[str, typer.Option("--service", help="The webhook's Service name.")] = "kuota-webhook",
    namespace: Annotated[str, typer.Option("--namespace", help="The Service's namespace.")] = "kuota-system",
    out: Annotated[Path, typer.Option("--out", help="Directory for ca.crt, tls.crt and tls.key.")] = Path("certs"),
    days: Annotated[int, typer.Option("--days", min=1, help="Validity in days.")] = 365,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    ip: Annotated[
        list[str] | None,
        typer.Option("--ip", help="Also an IP address, for webhooks called by URL (e.g. 127.0.0.1); repeatable."),
    ] = None,
) -> None:
    """Make a CA and a serving certificate for SERVICE.NAMESPACE.svc, and print the caBundle patch for the webhooks."""
    existing = [name for name in FILES if (out / name).exists()]
    if existing and not force:
        sys.stderr.write(f"error: {out} already holds {', '.join(existing)}; pass --force to replace them\n")
        raise typer.Exit(2)
    addresses = ip or []
    for address in addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            sys.stderr.write(f"error: --ip {address!r} is not an IP address\n")
            raise typer.Exit(2) from None
    made = make_certificates(service, namespace, days, addresses)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ca.crt").write_bytes(made.ca_pem)
    (out / "tls.crt").write_bytes(made.cert_pem)
    key = out / "tls.key"
    key.write_bytes(made.key_pem)
    os.chmod(key, 0o600)

    ca_bundle = base64.b64encode(made.ca_pem).decode("ascii")
    lines = [
        f"Wrote {out / 'ca.crt'}, {out / 'tls.crt'} and {key} for {', '.join(service_dns_names(service, namespace))}.",
        "",
        "Serve them from a Secret mounted by the webhook Deployment:",
        f"  kubectl -n {namespace} create secret tls {service}-tls --cert={out / 'tls.crt'} --key={key}",
        "",
        "Trust the CA in both webhook configurations:",
    ]
    for kind, (name, count) in WEBHOOK_CONFIGURATIONS.items():
        patch = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle} for i in range(count)
        ]
        lines.append(f"  kubectl patch {kind} {name} --type=json -p '{json.dumps(patch, separators=(',', ':'))}'")
    lines += ["", "caBundle:", ca_bundle]
    sys.stdout.write("\n".join(lines) + "\n")
