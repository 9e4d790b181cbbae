"""pyproject.toml gives every dependency a range with an upper bound, and requirements/ci.txt (what CI installs,
written by `make lock` from a tested environment) pins each of them to a version inside its range."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]]


def locked() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements" / "ci.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"requirements/ci.txt: {line!r} is not NAME==VERSION"
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_dependency_has_an_upper_bound() -> None:
    unbounded = [
        str(r)
        for r in requirements()
        if not r.name.startswith("types-") and not any(s.operator in ("<", "<=", "==", "~=") for s in r.specifier)
    ]
    assert not unbounded, f"give these an upper bound: {unbounded}"


def test_the_ci_lock_pins_every_dependency_inside_its_range() -> None:
    pins = locked()
    for requirement in requirements():
        version = pins.get(canonicalize_name(requirement.name))
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        assert version is not None, f"{requirement.name} is not in requirements/ci.txt (run make lock)"
        assert requirement.specifier.contains(version), f"{requirement.name}=={version} is outside {requirement}"
