"""Every hostile quota file that once crashed, stalled or overflowed something, through every door it can come in by.

The corpus is the list a hostile user's try-out found: values `kuota validate` used to accept and that stopped the
scheduling loop later (a 10^8 h checkpoint timeout, a 10Pi request under a 100Pi quota), quantities whose parsing
was quadratic (100,000 and 400,000 digits), a priority of 3×10^9, a 10^32 h timeout, a 5,000-digit integer,
20,000-deep nesting, an alias bomb, duplicate keys and bytes that are not UTF-8. Each goes to `kuota validate`
(exit 2 with `path (line N): message`), `kuota simulate` (exit 2 with `error:`), and the admin API's validate and
diff (200 with the problems), and none may take a traceback, a 500, or more than a few seconds. The test prints
what it tried: README's reliability section quotes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from typer.testing import CliRunner

from admin.auth import TokenStore, add_token
from kuota.cli import app
from tests.admin.stall import serve

HEAD = "apiVersion: kuota.dev/v1\nkind: QuotaConfig\n"
FLAVOR = "flavors: [{name: a100}]\n"


def team(resources: str = "nvidia.com/gpu: {nominal: 8}", extra: str = "") -> str:
    quotas = f"    quotas: [{{flavor: a100, resources: {{{resources}}}}}]\n"
    return f"teams:\n  - name: ml\n    queues: [ml/default]\n{extra}{quotas}"


BOMB = "\n".join(
    ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)

CORPUS: dict[str, bytes] = {
    "checkpointTimeout 100000000h": (
        HEAD + FLAVOR + "priorityClasses: [{name: p, value: 10, checkpointTimeout: 100000000h}]\n" + team()
    ).encode(),
    "checkpointTimeout 10^32 h": (
        HEAD + FLAVOR + f"priorityClasses: [{{name: p, value: 10, checkpointTimeout: {10**32}h}}]\n" + team()
    ).encode(),
    "memory quota 100Pi": (HEAD + FLAVOR + team("memory: {nominal: 100Pi}")).encode(),
    "priority 3x10^9": (HEAD + FLAVOR + "priorityClasses: [{name: p, value: 3000000000}]\n" + team()).encode(),
    "quantity of 100,000 digits": (HEAD + FLAVOR + team(f"nvidia.com/gpu: {{nominal: {'9' * 100_000}}}")).encode(),
    "quantity of 400,000 digits": (HEAD + FLAVOR + team(f"memory: {{nominal: '{'9' * 400_000}Ki'}}")).encode(),
    "integer of 5,000 digits": (
        HEAD + FLAVOR + f"priorityClasses: [{{name: p, value: {'7' * 5000}}}]\n" + team()
    ).encode(),
    "nesting 20,000 deep": (HEAD + "x: " + "[" * 20_000 + "]" * 20_000 + "\n").encode(),
    "alias bomb": (BOMB + "\n").encode(),
    "duplicate keys": (HEAD + FLAVOR + team() + "teams: []\n").encode(),
    "not UTF-8": HEAD.encode() + b"teams:\n  - name: \xff\xfe\n",
}

#: Bounded work: most take milliseconds; the alias bomb, walked up to the loader's million values, 1-7 s on a
#: machine shared with other work. (The stalls these inputs once caused were on the event loop, which the flood
#: tests of the admin API and the webhook measure; here it is that each one ends, with a message.)
SECONDS = 20.0


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("hostile")
    out = {}
    for i, (what, content) in enumerate(CORPUS.items()):
        path = root / f"q{i}.yaml"
        path.write_bytes(content)
        out[what] = path
    yield out


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "jobs.csv"
    path.write_text("job_id,team,submit_time,duration_s,gpus\nj1,ml,0,60,1\n")
    return path


def run(*args: str) -> tuple[int, str, float]:
    started = time.perf_counter()
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output + (result.stderr or ""), time.perf_counter() - started


@pytest.mark.parametrize("what", list(CORPUS))
def test_kuota_validate_refuses_with_a_located_problem(files: dict[str, Path], what: str) -> None:
    code, output, seconds = run("validate", str(files[what]))
    assert code == 2, (what, output[-2000:])
    assert "Traceback" not in output and "line" in output, (what, output[-2000:])
    assert seconds < SECONDS, (what, seconds)


@pytest.mark.parametrize("what", list(CORPUS))
def test_kuota_simulate_refuses_with_one_error_line(files: dict[str, Path], trace: Path, what: str) -> None:
    code, output, seconds = run("simulate", "--config", str(files[what]), "--trace", str(trace), "--format", "csv")
    assert code == 2, (what, output[-2000:])
    assert "Traceback" not in output and "error" in output.lower(), (what, output[-2000:])
    assert seconds < SECONDS, (what, seconds)


async def test_admin_config_endpoints_answer_every_one_with_problems(tmp_path: Path) -> None:
    token = add_token(tmp_path / "tokens.yaml", "viewer", "viewer")
    runner, url = await serve(TokenStore.from_file(tmp_path / "tokens.yaml"))
    tried, slowest = 0, 0.0
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            for what, content in CORPUS.items():
                text = content.decode("utf-8", errors="surrogateescape")
                for endpoint in ("validate", "diff"):
                    started = time.perf_counter()
                    try:
                        async with http.post(f"{url}/api/v1/config/{endpoint}", json={"text": text}) as response:
                            body = await response.text()
                            status = response.status
                    except UnicodeEncodeError:
                        # Bytes that are not UTF-8 cannot travel in a JSON string: sent raw as YAML instead.
                        headers = {"Content-Type": "application/yaml"}
                        async with http.post(f"{url}/api/v1/config/{endpoint}", data=content, headers=headers) as r:
                            body, status = await r.text(), r.status
                    seconds = time.perf_counter() - started
                    tried += 1
                    slowest = max(slowest, seconds)
                    assert status in (200, 400, 413, 415, 422), (what, endpoint, status, body[:500])
                    if status == 200:
                        assert '"valid":false' in body.replace(" ", ""), (what, endpoint, body[:500])
                    assert "Traceback" not in body and seconds < SECONDS, (what, endpoint, seconds)
    finally:
        await runner.cleanup()
    print(f"\nadmin API: {tried} hostile proposals, 0 tracebacks, 0 server errors, slowest {slowest:.2f} s")
