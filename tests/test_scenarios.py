"""Conformance suite for the scheduling semantics (../shared/spec/semantics.md), run through `kuota scenario`.

Each tests/scenarios/*.yaml is a scenario file (../shared/spec/scenario.md) with an `expect:` block derived by hand
from the spec; the comparison is the one ../shared/spec/check_scenarios.py applies. Files whose expectation
disagrees with the engine say so in `notes: "DISAGREES WITH KUOTA: ..."`: they are meant to fail until the
engine is fixed (or the expectation is argued down), so they are not marked xfail.

Process start-up dominates a `kuota scenario` run, so the valid files run in-process through the same functions
the command calls (sim.scenario.load_scenario_text / run_scenario); the command itself - exit codes, stderr,
JSON on stdout, determinism - is checked through subprocesses on the spec's examples, the invalid files and two
valid ones. Those subprocesses start together, once per module, and the tests read their results.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.scenario import load_scenario_text, run_scenario

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
INVALID = SCENARIOS / "invalid"
EXAMPLES = HERE.parent.parent / "shared" / "spec" / "examples"
HIDDEN = ("expect", "source", "notes")
CLI_TIMEOUT_S = 120
CLI_WORKERS = 8
# Valid files that also go through the command (contract path), the first one twice (determinism): preemptions
# over --cycles 2 with overlapping victims, and an --until-idle run where a victim is readmitted on another flavor.
CLI_SAMPLES = ("overlap-preempts-other-victims", "multicycle-until-idle-victim-readmitted")
CLI_DETERMINISM = CLI_SAMPLES[0]

VALID_FILES = sorted(SCENARIOS.glob("*.yaml"))
INVALID_FILES = sorted(INVALID.glob("*.yaml"))
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


# -- the comparison check_scenarios.py makes -----------------------------------------------------------------------


def compare(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Differences between expected workloads and the `workloads` map of kuota's output."""
    diffs = []
    for name, want in expected.items():
        got = actual.get(name)
        if not isinstance(got, dict):
            diffs.append(f"{name}: missing")
            continue
        for key in ("state", "reason"):
            if key in want and got.get(key) != want[key]:
                diffs.append(f"{name}.{key}={got.get(key)} (want {want[key]})")
        if "inadmissible" in want and bool(got.get("inadmissible", False)) != want["inadmissible"]:
            diffs.append(f"{name}.inadmissible={got.get('inadmissible', False)} (want {want['inadmissible']})")
        for ps, resources in want.get("flavors", {}).items():
            got_ps = (got.get("flavors") or {}).get(ps)
            for res, flavor in resources.items():
                have = got_ps if isinstance(got_ps, str) else (got_ps or {}).get(res)
                if have != flavor:
                    diffs.append(f"{name}.flavors.{ps}.{res}={have} (want {flavor})")
        for ps, count in want.get("counts", {}).items():
            have = (got.get("counts") or {}).get(ps)
            if have != count:
                diffs.append(f"{name}.counts.{ps}={have} (want {count})")
    return diffs


def split(path: Path) -> tuple[dict[str, Any], str]:
    """The file's harness keys and the scenario as kuota sees it (reserved keys stripped, like the checker)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    scenario = {k: v for k, v in doc.items() if k not in HIDDEN}
    return doc, yaml.safe_dump(scenario, sort_keys=False)


def run_args(expect: dict[str, Any]) -> list[str]:
    return ["--until-idle"] if expect.get("until-idle") else ["--cycles", str(expect.get("cycles", 1))]


def run_in_process(text: str, source: str, expect: dict[str, Any]) -> dict[str, Any]:
    outcome = run_scenario(
        load_scenario_text(text, source=source),
        cycles=int(expect.get("cycles", 1)),
        until_idle=bool(expect.get("until-idle")),
    )
    printed: dict[str, Any] = json.loads(json.dumps(outcome))  # exactly what the command would print
    return printed


@functools.cache
def suite_run(path: Path) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """A valid file's harness keys, its scenario text and kuota's outcome (one in-process run per file)."""
    doc, text = split(path)
    return doc, text, run_in_process(text, str(path), doc["expect"])


def failure(path: Path, doc: dict[str, Any], diffs: list[str], outcome: dict[str, Any]) -> str:
    lines = [f"{path.name} ({doc.get('source', 'no source')}): {len(diffs)} difference(s)"]
    lines += [f"  - {d}" for d in diffs]
    notes = str(doc.get("notes") or "")
    if "DISAGREES WITH KUOTA" in notes:
        lines.append(f"  known disagreement: {notes}")
    lines.append("  kuota printed: " + json.dumps(outcome.get("workloads", {}), sort_keys=True))
    return "\n".join(lines)


# -- the command ----------------------------------------------------------------------------------------------------

CliKey = tuple[str, str, int]  # (group, file stem, run)
CliRuns = dict[CliKey, "subprocess.CompletedProcess[bytes]"]


def kuota_command() -> list[str]:
    script = Path(sys.executable).with_name("kuota")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from kuota.cli import main; main()"]


def run_cli(path: Path, args: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*kuota_command(), "scenario", str(path), *args], capture_output=True, timeout=CLI_TIMEOUT_S, check=False
    )


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> CliRuns:
    """Every `kuota scenario` subprocess of this module, started together."""
    tmp = tmp_path_factory.mktemp("scenarios")
    jobs: dict[CliKey, tuple[Path, list[str]]] = {}
    samples = [(SCENARIOS / f"{name}.yaml", 2 if name == CLI_DETERMINISM else 1) for name in CLI_SAMPLES]
    for group, paths in (("example", [(p, 1) for p in EXAMPLE_FILES]), ("valid", samples)):
        for path, runs in paths:
            doc, text = split(path)
            stripped = tmp / f"{group}-{path.name}"
            stripped.write_text(text, encoding="utf-8")
            for run in range(runs):
                jobs[(group, path.stem, run)] = (stripped, run_args(doc["expect"]))
    for path in INVALID_FILES:
        jobs[("invalid", path.stem, 0)] = (path, [])
    with ThreadPoolExecutor(max_workers=CLI_WORKERS) as pool:
        futures = {key: pool.submit(run_cli, path, args) for key, (path, args) in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


def cli_json(proc: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, f"exit {proc.returncode}: {stderr}"
    assert "Traceback" not in stderr, stderr
    outcome: dict[str, Any] = json.loads(proc.stdout)
    return outcome


# -- (a) every scenario of the suite --------------------------------------------------------------------------------


def test_suite_is_present() -> None:
    assert len(VALID_FILES) >= 45, "tests/scenarios/ should hold the conformance scenarios"
    assert INVALID_FILES, "tests/scenarios/invalid/ should hold invalid scenarios"


@pytest.mark.parametrize("path", VALID_FILES, ids=[p.stem for p in VALID_FILES])
def test_scenario(path: Path) -> None:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    expect = doc.get("expect")
    assert isinstance(expect, dict), "a scenario of the suite has an expect: block"
    assert "cycles" in expect or expect.get("until-idle"), "expect: gives cycles or until-idle"
    source = str(doc.get("source", ""))
    # The shared spec's rules, or kuota's own additions to it (spec/ in the project).
    assert source.startswith(("semantics.md", "spec/")), "source: names the section of semantics.md or spec/"
    _, _, outcome = suite_run(path)
    diffs = compare(expect.get("workloads", {}), outcome.get("workloads") or {})
    assert not diffs, failure(path, doc, diffs, outcome)


@pytest.mark.parametrize("name", CLI_SAMPLES)
def test_scenario_through_the_command(name: str, cli: CliRuns) -> None:
    """The contract path gives what the expectations say, and the same JSON as the in-process run."""
    path = SCENARIOS / f"{name}.yaml"
    doc, _, in_process = suite_run(path)
    outcome = cli_json(cli[("valid", name, 0)])
    diffs = compare(doc["expect"].get("workloads", {}), outcome.get("workloads") or {})
    assert not diffs, failure(path, doc, diffs, outcome)
    assert outcome == in_process


# -- (b) the spec's own examples ------------------------------------------------------------------------------------


@pytest.mark.skipif(not EXAMPLE_FILES, reason="../shared/spec/examples is not beside the project")
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_spec_example(path: Path, cli: CliRuns) -> None:
    doc, _ = split(path)
    outcome = cli_json(cli[("example", path.stem, 0)])
    diffs = compare(doc["expect"].get("workloads", {}), outcome.get("workloads") or {})
    assert not diffs, failure(path, doc, diffs, outcome)


# -- (c) invalid files ----------------------------------------------------------------------------------------------

ERROR_NAMES = re.compile(r"^# error names: (\S+)\s*$", re.MULTILINE)


@pytest.mark.parametrize("path", INVALID_FILES, ids=[p.stem for p in INVALID_FILES])
def test_invalid_scenario(path: Path, cli: CliRuns) -> None:
    text = path.read_text(encoding="utf-8")
    assert "expect" not in yaml.safe_load(text), "invalid files carry no expect block"
    match = ERROR_NAMES.search(text)
    assert match, "an invalid file says which field the error must name (# error names: FIELD)"
    proc = cli[("invalid", path.stem, 0)]
    stdout, stderr = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    assert proc.returncode == 2, f"exit {proc.returncode}, want 2\nstdout: {stdout}\nstderr: {stderr}"
    assert "Traceback" not in stdout + stderr, stderr
    assert match.group(1) in stderr, f"the error should name {match.group(1)!r}:\n{stderr}"


# -- (d) determinism ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", VALID_FILES, ids=[p.stem for p in VALID_FILES])
def test_deterministic_in_process(path: Path) -> None:
    doc, text, first = suite_run(path)
    second = run_in_process(text, str(path), doc["expect"])
    assert json.dumps(first) == json.dumps(second)


def test_deterministic_command_output(cli: CliRuns) -> None:
    first, second = cli[("valid", CLI_DETERMINISM, 0)], cli[("valid", CLI_DETERMINISM, 1)]
    cli_json(first)
    cli_json(second)
    assert first.stdout == second.stdout, "two runs of the same scenario printed different JSON"
