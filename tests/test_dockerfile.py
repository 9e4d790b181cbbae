"""The Dockerfile agrees with what runs it: config/deploy/deployment.yaml and the chart's Deployment.

No container engine builds it here, so this reads it: its entrypoint and command are `kuota serve` (the package's
console script; both Deployments start from `serve` and set no command of their own), every flag either
Deployment passes is one `kuota serve` takes, the user is numeric and not root (what `runAsNonRoot` can check),
the working directory and exposed ports are the Deployments', the base image is pinned by digest, and the build
context keeps every package of the wheel.
"""

from __future__ import annotations

import json
import re
import tomllib
from fnmatch import fnmatch

import pytest
import typer.main
import yaml

from kuota import cli
from tests.kube.controlplane import DEPLOY, REPO
from tests.kube.helm import Helm, Obj, container

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines() if not line.startswith("#"))
    )
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def last(name: str) -> str:
    values = [rest for word, rest in instructions() if word == name]
    assert values, f"the Dockerfile has no {name}"
    return values[-1]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    start = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[start:]


@pytest.fixture(scope="module")
def deployments(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Obj]:
    """The kuota container of config/deploy's Deployment and of the chart's, at its defaults and with the flags
    that only some values add (a component list, another namespace, extra arguments)."""
    deploy = yaml.safe_load((DEPLOY / "deployment.yaml").read_text())
    helm = Helm(tmp_path_factory.mktemp("helm"))
    values = {"components": ["webhook", "controller"], "extraArgs": ["--log-level=debug"]}
    return {
        "config/deploy": deploy["spec"]["template"]["spec"]["containers"][0],
        "chart": container(helm.render()),
        "chart, other values": container(helm.render(release="ml", namespace="ml-system", values=values)),
    }


def test_the_entrypoint_is_kuota_serve_and_the_deployments_pass_its_flags(deployments: dict[str, Obj]) -> None:
    entrypoint, command = json.loads(last("ENTRYPOINT")), json.loads(last("CMD"))
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["kuota"] and scripts["kuota"] == "kuota.cli:main"
    assert command == ["serve"]
    serve = typer.main.get_command(cli.app).commands["serve"]  # type: ignore[attr-defined]
    options = {opt for param in serve.params for opt in param.opts}
    assert "--kinds" in options and "--config" in options
    for name, kuota in deployments.items():
        assert "command" not in kuota, f"{name}: a command would replace the image's entrypoint"
        args = kuota["args"]
        assert args[0] == command[0], name  # the args replace CMD: they must start with it
        flags = [arg.partition("=")[0] for arg in args[1:]]
        assert all(flag.startswith("--") for flag in flags), f"{name}: {args}"
        unknown = sorted(set(flags) - options)
        assert not unknown, f"{name}: kuota serve takes no {unknown}"
    config_deploy = deployments["config/deploy"]["args"]
    assert deployments["chart"]["args"][: len(config_deploy)] == config_deploy  # the same command, same flags


def test_the_image_runs_as_the_deployments_expect(deployments: dict[str, Obj]) -> None:
    stage = final_stage()
    user = last("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or gid.isdigit()), user  # runAsNonRoot checks a number
    assert [word for word, _ in stage].count("USER") == 1
    workdir = last("WORKDIR")
    exposed = {int(port.split("/")[0]) for rest in (r for w, r in stage if w == "EXPOSE") for port in rest.split()}
    for name, kuota in deployments.items():
        assert kuota["workingDir"] == workdir, name
        assert kuota["securityContext"]["readOnlyRootFilesystem"] is True
        ports = {p["containerPort"] for p in kuota["ports"]}
        assert ports <= exposed, name
        assert any(m["mountPath"] == workdir for m in kuota["volumeMounts"]), f"{name}: {workdir} is not writable"
    # The image named by both Deployments is the one the Dockerfile says it builds.
    repository = deployments["config/deploy"]["image"].rpartition(":")[0]
    assert repository == deployments["chart"]["image"].rpartition(":")[0] == "ghcr.io/kuota/kuota"
    assert repository in DOCKERFILE.read_text()


def test_the_base_image_is_pinned_by_digest() -> None:
    base = next(rest for word, rest in instructions() if word == "ARG" and rest.startswith("PYTHON_IMAGE="))
    image = base.partition("=")[2]
    assert re.fullmatch(r"python:(\d+)\.(\d+)-slim-\w+@sha256:[0-9a-f]{64}", image), image
    froms = [rest.split()[0] for word, rest in instructions() if word == "FROM"]
    assert froms and all(ref == "${PYTHON_IMAGE}" for ref in froms), froms
    assert len(froms) >= 2  # built in one stage, run from another
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    minor = int(image.split(":")[1].split("-")[0].split(".")[1])
    assert requires == ">=3.11" and minor >= 11


def test_the_build_context_keeps_what_the_package_needs() -> None:
    patterns = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip() and line[0] != "#"
    ]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    needed = ["pyproject.toml", project["project"]["readme"], *packages]
    for path in needed:
        assert (REPO / path).exists(), path
        assert not any(fnmatch(path, pattern) for pattern in patterns), f"{path} is left out of the build context"
    for path in ("tests", ".git", ".venv", "testing"):
        assert any(fnmatch(path, pattern) for pattern in patterns), f"{path} is sent to the builder"
