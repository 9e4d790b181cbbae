"""How wrong are kuota's wait-time estimates? Measured on the Microsoft ITP 2021 trace, against a naive baseline.

The trace is replayed (bench/replay_itp.py's cluster sizing and its `borrowing` policy: one cohort, idle quota
lent, owners reclaim by preemption) on the simulated cluster. At sampled submission moments — a job that is still
pending once the instant of its submission has been decided, sampled with a chance per size class (`--rates`; of
the 3,395 such jobs in this replay, 2,044 ask for 1 GPU, 1,304 for 2-8, 40 for 9-32 and 7 for more) — the replay pauses
and asks for that job's estimate exactly as the admin API does (queues.wait_estimates.live_state of the replay's own
controller, then sim.estimates.simulate_starts), knowing only what was known then: the run times of the jobs that
had finished by that moment (declared run times absent: the trace has none). When the replay is over, every
estimate is compared with the job's actual first admission.

The baseline is what a user can work out from the queue alone: (pending jobs ahead of it in its team's queue) ×
(the median run time of every job finished so far) ÷ (how many jobs of its size the team's own quota runs side by
side), from the moment of submission.

Printed per size class (1 GPU, 2-8, 9-32, >32): sampled jobs, how many the estimator left unknown, the median and
p90 absolute error of the estimator (over the jobs it estimated) and of the baseline (over the same jobs), and their
ratio; with `--runs N` (default 3, each with its own sampling seed) the median and range over the runs, the wall
time of each, and the load average.

    .venv/bin/python bench/estimates_itp.py [--limit N] [--rates 1=0.02,2-8=0.03,9-32=1,>32=1] [--max-samples 40]
        [--runs 3]
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.workload import Workload
from bench.replay_itp import CLUSTERS, ITP, _identity_mapping, config_body, config_for, sized_quotas
from clusters.sim.cluster import Simulation
from queues.journal import NullJournal
from queues.wait_estimates import live_state
from quota.config import QuotaConfig
from sim.estimates import simulate_starts
from sim.replay import sim_jobs
from sim.runtimes import SIZE_CLASSES, RunSample, RuntimeBook, gpu_milli_of, size_class
from sim.traces import TraceJob, read_trace

CLASSES = [c for c in SIZE_CLASSES if c != "cpu"]


class _Finished(NullJournal):
    """Every finished job's run time goes into the book the moment it finishes: what the ledger would hold."""

    def __init__(self, book: RuntimeBook, durations: Mapping[str, int]) -> None:
        self.book = book
        self.durations = durations
        self.all: list[int] = []
        """Every finished run time, sorted: the baseline's median."""

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        ran = self.durations[workload.name]
        self.book.add(RunSample(workload.team, workload.queue, gpu_milli_of(workload.pod_sets), ran))
        bisect.insort(self.all, ran)


@dataclass
class Sample:
    name: str
    size: str
    at: int
    estimate: int | None
    baseline: int
    simulate_ms: int


@dataclass
class RunResult:
    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0
    actual: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    """Jobs still pending after the instant of their submission, per size class: what is sampled from."""


def run_once(
    config: QuotaConfig, config_text: str, jobs: list[TraceJob], rates: Mapping[str, float], seed: int, max_samples: int
) -> RunResult:
    """One replay with estimates at sampled moments: a waiting job of size class C is sampled with chance
    `rates[C]`, at most `max_samples` per class."""
    started = time.perf_counter()
    simulated = sim_jobs(config, jobs)
    durations = {job.workload.name: job.duration_ms for job in simulated}
    book = RuntimeBook(())
    finished = _Finished(book, durations)
    simulation = Simulation(config, simulated, finished)
    manager = simulation.controller.manager
    submits: dict[int, list[str]] = {}
    for job in simulated:
        submits.setdefault(job.submit_ms, []).append(job.workload.name)
    chooser = random.Random(seed)
    nominal = {
        t.name: sum(
            q.nominal for g in t.groups() for f in g.flavors for r, q in f.resources.items() if r.endswith("gpu")
        )
        for t in config.teams
    }
    result = RunResult()
    taken = dict.fromkeys(CLASSES, 0)
    while simulation.step(1):
        now = simulation.now
        for name in submits.get(now, ()):
            if manager.state.get(name) != "pending":
                continue
            workload = manager.workloads[name]
            size = size_class(gpu_milli_of(workload.pod_sets))
            result.waiting[size] = result.waiting.get(size, 0) + 1
            if taken[size] >= max_samples or chooser.random() >= rates[size]:
                continue
            taken[size] += 1
            t0 = time.perf_counter()
            state = live_state(simulation.controller, config_text, now)
            starts = simulate_starts(state, config, book, max_wall_s=5.0)
            took = int((time.perf_counter() - t0) * 1000)
            ahead = 0
            for other in manager.queues[workload.team].ordered():
                if other.name == name:
                    break
                ahead += 1
            done = finished.all
            median = done[(len(done) - 1) // 2] if done else 0
            # Side by side in the team's own quota, jobs of this size run `slots` at a time.
            slots = max(1, nominal[workload.team] // max(1000, gpu_milli_of(workload.pod_sets)))
            result.samples.append(
                Sample(
                    name,
                    size_class(gpu_milli_of(workload.pod_sets)),
                    now,
                    starts.starts.get(name),
                    now + ahead * median // slots,
                    took,
                )
            )
    result.actual = dict(simulation.stats.admit_times)
    result.wall_s = time.perf_counter() - started
    return result


def _p(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def figures(result: RunResult) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for size in [*CLASSES, "all"]:
        chosen = [s for s in result.samples if (size == "all" or s.size == size) and s.name in result.actual]
        known = [s for s in chosen if s.estimate is not None]
        ours = [abs(s.estimate - result.actual[s.name]) for s in known if s.estimate is not None]
        naive = [abs(s.baseline - result.actual[s.name]) for s in known]
        if not chosen:
            continue
        row: dict[str, float] = {"sampled": len(chosen), "unknown": len(chosen) - len(known)}
        if ours:
            row |= {
                "median_s": statistics.median(ours) / 1000,
                "p90_s": _p(ours, 0.9) / 1000,
                "base_median_s": statistics.median(naive) / 1000,
                "base_p90_s": _p(naive, 0.9) / 1000,
            }
            row["ratio"] = row["median_s"] / row["base_median_s"] if row["base_median_s"] else float("nan")
        out[size] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs of the trace")
    parser.add_argument("--gpus", type=int, default=1600)
    parser.add_argument(
        "--rates",
        default="1=0.02,2-8=0.03,9-32=1,>32=1",
        help="chance that a waiting job of each size class is sampled (large jobs are rare)",
    )
    parser.add_argument("--max-samples", type=int, default=40, help="per size class and run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import yaml

    base = config_for("borrowing", dict.fromkeys(CLUSTERS, 1))
    jobs = read_trace(ITP, "itp", _identity_mapping(base), base, seed=0, limit=args.limit)
    body = config_body("borrowing", sized_quotas(jobs, args.gpus))
    config_text = yaml.safe_dump(body)
    config = config_for("borrowing", sized_quotas(jobs, args.gpus))
    print(f"{len(jobs)} jobs, {args.gpus} GPUs, borrowing; load average before: {_load()}", flush=True)
    runs: list[dict[str, dict[str, float]]] = []
    walls: list[float] = []
    loads: list[str] = []
    for seed in range(args.runs):
        rates = {k: float(v) for k, _, v in (part.partition("=") for part in args.rates.split(","))}
        result = run_once(config, config_text, jobs, rates, seed, args.max_samples)
        walls.append(result.wall_s)
        loads.append(_load())
        runs.append(figures(result))
        took = [s.simulate_ms for s in result.samples]
        print(
            f"run {seed}: {len(result.samples)} estimates, wall {result.wall_s:.0f} s, estimate median "
            f"{statistics.median(took) if took else 0:.0f} ms (max {max(took, default=0)} ms), load {loads[-1]}; "
            f"waiting at submission: {result.waiting}",
            flush=True,
        )
        _print_run(runs[-1])
    print()
    print(f"median (range) over {len(runs)} runs; wall {_mr(walls, '{:.0f}')} s; load averages {'; '.join(loads)}")
    print(
        f"{'size':<6}{'sampled':>14}{'unknown':>10}{'median err':>20}{'p90 err':>20}{'base median':>20}"
        f"{'base p90':>20}{'ratio':>18}"
    )
    for size in [*CLASSES, "all"]:
        rows = [r[size] for r in runs if size in r and "median_s" in r[size]]
        if not rows:
            continue
        cells = [_mr([r[k] for r in rows], "{:.0f}") for k in ("median_s", "p90_s", "base_median_s", "base_p90_s")]
        print(
            f"{size:<6}{_mr([r['sampled'] for r in rows], '{:.0f}'):>14}"
            + f"{_mr([r['unknown'] for r in rows], '{:.0f}'):>10}"
            + "".join(f"{c:>20}" for c in cells)
            + f"{_mr([r['ratio'] for r in rows], '{:.2f}'):>18}"
        )


def _print_run(run: dict[str, dict[str, float]]) -> None:
    for size, row in run.items():
        if "median_s" in row:
            print(
                f"  {size:<5} n={row['sampled']:.0f} unknown={row['unknown']:.0f} median {row['median_s']:.0f} s "
                f"p90 {row['p90_s']:.0f} s | baseline median {row['base_median_s']:.0f} s "
                f"p90 {row['base_p90_s']:.0f} s | ratio {row['ratio']:.2f}"
            )
        else:
            print(f"  {size:<5} n={row['sampled']:.0f} unknown={row['unknown']:.0f}")


def _mr(values: list[float], fmt: str) -> str:
    """Median (min-max)."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


if __name__ == "__main__":
    main()
