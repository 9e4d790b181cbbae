"""`kuota whatif` over 30 days of the Microsoft ITP 2021 trace (41,446 jobs, 10 clusters as 10 teams).

The ledger is built once (kept in --workdir, reused by later runs): the first 30 days of the trace, written as
kuota's csv, replayed by `kuota simulate --database-url` under the fair-sharing policy of bench/replay_itp.py (the
quota file the ledger then records as in force). Then `kuota whatif` is timed end to end (process start, reading
the ledger, both replays, output) with the borrowing policy as the proposal, `--runs` times; printed: the median
and the range of the wall times, the load average before each run, and the comparison table of the last run.

    .venv/bin/python bench/whatif_itp.py [--runs 3] [--days 30] [--workdir out/bench-whatif]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replay_itp import CLUSTERS, ITP, _identity_mapping, config_body, config_for, sized_quotas
from sim.traces import format_csv, read_trace

ROOT = Path(__file__).resolve().parents[1]
DAY_MS = 86_400_000
START, END = "2021-03-04", "2021-04-04"
"""`kuota simulate` puts virtual time 0 at 2021-03-04; the window covers every job of the 30 days."""


def kuota(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "from kuota.cli import main; main()", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kuota {args[0]} exited {done.returncode}: {done.stderr}")
    return done


def build_ledger(workdir: Path, days: int) -> tuple[str, Path]:
    """The ledger URL and the proposed quota file; the ledger is simulated only when it is not there yet."""
    base = config_for("borrowing", dict.fromkeys(CLUSTERS, 1))
    jobs = read_trace(ITP, "itp", _identity_mapping(base), base, seed=0)
    window = [job for job in jobs if job.submit_ms < days * DAY_MS]
    quotas = sized_quotas(window, 1600)
    in_force, proposal = workdir / "fair-sharing.yaml", workdir / "borrowing.yaml"
    in_force.write_text(yaml.safe_dump(config_body("fair-sharing", quotas), sort_keys=False))
    proposal.write_text(yaml.safe_dump(config_body("borrowing", quotas), sort_keys=False))
    ledger = workdir / f"ledger-{days}d.db"
    url = f"sqlite+aiosqlite:///{ledger}"
    if not ledger.exists():
        trace = workdir / f"itp-{days}d.csv"
        trace.write_text(format_csv(window, names=True))
        print(f"building the ledger: {len(window)} jobs of {days} days ...", flush=True)
        started = time.perf_counter()
        partial = ledger.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        kuota(
            "simulate", "--config", str(in_force), "--trace", str(trace), "--format", "csv", "--no-progress",
            "--database-url", f"sqlite+aiosqlite:///{partial}",
        )  # fmt: skip
        partial.rename(ledger)
        print(f"ledger built in {time.perf_counter() - started:.0f} s: {ledger}")
    return url, proposal


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--workdir", type=Path, default=ROOT / "out" / "bench-whatif")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    url, proposal = build_ledger(args.workdir, args.days)
    walls, cpus = [], []
    output = ""
    for run in range(args.runs):
        load = os.getloadavg()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = kuota("whatif", "--config", str(proposal), "--from", START, "--to", END, "--database-url", url)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Both processes of the run (the replays run side by side): what it costs on a machine of its own.
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        output = done.stdout
        print(
            f"run {run + 1}: wall {walls[-1]:.1f} s, CPU {cpus[-1]:.1f} s "
            f"(load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})"
        )
    print(output)
    print(
        f"kuota whatif, {args.days} days of ITP, {len(walls)} runs: wall median {statistics.median(walls):.1f} s "
        f"(range {min(walls):.1f}-{max(walls):.1f}), CPU median {statistics.median(cpus):.1f} s "
        f"(range {min(cpus):.1f}-{max(cpus):.1f})"
    )


if __name__ == "__main__":
    main()
