"""The helm of kuota-cluster (`kuota-cluster helm`, built from helm's Go module with the control plane) run on
config/helm/kuota, with its configuration, cache and data in a folder of the test's own."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.kube.controlplane import REPO, cluster_binary

CHART = REPO / "config" / "helm" / "kuota"

Obj = dict[str, Any]


class HelmError(AssertionError):
    """helm exited non-zero where the test expected it to succeed."""


@dataclass(frozen=True)
class Helm:
    home: Path
    kubeconfig: Path | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
        for part in ("CONFIG", "CACHE", "DATA"):
            env[f"HELM_{part}_HOME"] = str(self.home / part.lower())
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def run(self, *args: str, check: bool = True, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        argv = [str(cluster_binary()), "helm", *args]
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env(), check=False, timeout=timeout_s)
        if check and done.returncode != 0:
            raise HelmError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    def template(
        self,
        *args: str,
        release: str = "kuota",
        namespace: str = "kuota-system",
        values: Obj | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """`helm template RELEASE CHART -n NAMESPACE`, with `values` as a values file (JSON is YAML)."""
        extra = list(args)
        if values is not None:
            text = json.dumps(values, sort_keys=True)
            path = self.home / f"values-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            extra += ["-f", str(path)]
        return self.run("template", release, str(CHART), "-n", namespace, *extra, check=check)

    def render(self, *args: str, **kwargs: Any) -> list[Obj]:
        """The documents `helm template` renders."""
        return documents(self.template(*args, **kwargs).stdout)


def documents(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def find(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    """The one object of `kind` (and `name`) among `objects`."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} found among {[o['kind'] for o in objects]}"
    return found[0]


def container(objects: list[Obj]) -> Obj:
    """The kuota container of the Deployment."""
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    (only,) = pod["containers"]
    return only  # type: ignore[no-any-return]
