"""What-if on real history: the ledger's workloads of a window replayed under the quota file that was in force and
under a proposed one, side by side.

`kuota whatif` and the admin API's config diff call `whatif_from_ledger`; `compare` is the part without a database.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from accounting.database import create_engine
from accounting.history import config_in_force, window_history
from accounting.spending import usage_since
from clusters.sim.cluster import DEFAULT_HOOK_DELAY_MS
from quota.budgets import epoch_ms_of, history_start
from quota.config import QuotaConfig
from quota.credits import UsageInterval
from quota.loader import ConfigError, load_config_text
from sim.history import Extraction, HistoryJob, extract, sim_jobs_of
from sim.replay import replay_jobs
from sim.report import ReportData

#: Per-team figures compared, as `kuota simulate` names them in its summary.
FIGURES = ("jobs", "mean_wait_s", "p95_wait_s", "gpu_hours", "borrowed_gpu_hours", "preemptions", "lost_gpu_seconds")


class WhatIfError(ValueError):
    """Bad input (a quota file that does not load, no baseline to compare with, an empty window): exit 2, 422."""


@dataclass
class Run:
    """One side of the comparison: the replay's summary and what the report draws of it (plain values, so a run
    made in another process comes back whole)."""

    label: str
    source: str
    """Where its quota file came from."""
    summary: dict[str, object]
    report: ReportData
    left_out: dict[str, int]
    wall_seconds: float
    budgets: list[dict[str, object]] = field(default_factory=list)
    """Every budget of its quota file in every window the replay overlapped (quota.budgets.WindowSpending)."""

    def team_figures(self) -> dict[str, dict[str, object]]:
        teams = self.summary["teams"]
        assert isinstance(teams, dict)
        return {team: {key: figures[key] for key in FIGURES} for team, figures in teams.items()}


@dataclass(frozen=True)
class Clock:
    """Where the replay sits on the calendar: the epoch instant of its time 0 (the window's start) and the ledger's
    usage before it, which budgets count in their windows (epoch milliseconds, none ending after the start)."""

    epoch_ms: int = 0
    spent_before: tuple[UsageInterval, ...] = ()


def run_side(
    label: str,
    source: str,
    config: QuotaConfig,
    jobs: Sequence[HistoryJob],
    aware: bool = True,
    clock: Clock = Clock(),
) -> Run:
    """Replay the jobs under one quota file (module-level: it may run in a worker process); `aware`: victims the
    spec leaves equal go most recent checkpoint first, as `kuota simulate --victims` chooses."""
    sim_jobs, left_out = sim_jobs_of(config, jobs)
    result = replay_jobs(
        config, sim_jobs, checkpoint_aware_victims=aware, epoch_ms=clock.epoch_ms, spent_before=clock.spent_before
    )
    summary = result.summary()
    budgets = summary.pop("budgets", [])
    assert isinstance(budgets, list)
    report = result.report_data(f"{label}: {source}")
    return Run(label, source, summary, report, left_out, result.wall_seconds, budgets)


@dataclass
class Comparison:
    start: datetime
    end: datetime
    extraction: Extraction
    baseline: Run
    proposal: Run

    def as_dict(self) -> dict[str, object]:
        """The whole comparison as JSON-ready values (what `--json` prints and the admin API answers)."""
        base, new = self.baseline.team_figures(), self.proposal.team_figures()
        teams = {
            team: {"baseline": base.get(team), "proposal": new.get(team)}
            for team in [*base, *(t for t in new if t not in base)]
        }
        return {
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "workloads": len(self.extraction.jobs) + sum(self.extraction.excluded.values()),
            "replayed": len(self.extraction.jobs),
            "estimated_run_time": self.extraction.estimated,
            "left_out": dict(self.extraction.excluded),
            "baseline": _side(self.baseline),
            "proposal": _side(self.proposal),
            "teams": teams,
            "budgets": budget_sides(self.baseline.budgets, self.proposal.budgets),
        }


def budget_sides(
    baseline: Sequence[Mapping[str, object]], proposal: Sequence[Mapping[str, object]]
) -> dict[str, dict[str, list[Mapping[str, object]]]]:
    """Per owner (team or cohort, in the order the files name them, the baseline's first), each side's budget
    windows; an owner with budgets under one file only has an empty list under the other."""
    out: dict[str, dict[str, list[Mapping[str, object]]]] = {}
    for key, rows in (("baseline", baseline), ("proposal", proposal)):
        for row in rows:
            sides = out.setdefault(str(row["owner"]), {"baseline": [], "proposal": []})
            sides[key].append(row)
    return out


def _side(run: Run) -> dict[str, object]:
    summary = run.summary
    return {
        "source": run.source,
        "jain_fairness": summary["jain_fairness"],
        "utilization": summary["utilization"],
        "finished": summary["finished"],
        "left_out": dict(run.left_out),
        "wall_seconds": round(run.wall_seconds, 2),
    }


def compare(
    extraction: Extraction,
    baseline: tuple[QuotaConfig, str],
    proposal: tuple[QuotaConfig, str],
    *,
    start: datetime,
    end: datetime,
    parallel_from: int | None = None,
    aware: bool = True,
    clock: Clock = Clock(),
) -> Comparison:
    """Replay the extracted jobs under both quota files ((config, where it came from) each), on `clock`. From
    `parallel_from` jobs on (None: never), the proposal replays in a second process while this one replays the
    baseline; the replays are deterministic, so where they run changes no figure."""
    jobs = extraction.jobs
    if parallel_from is None or len(jobs) < parallel_from:
        base = run_side("baseline", baseline[1], baseline[0], jobs, aware, clock)
        new = run_side("proposal", proposal[1], proposal[0], jobs, aware, clock)
        return Comparison(start, end, extraction, base, new)
    # spawn, not fork: the caller may run an event loop or threads that a forked child must not inherit.
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pending = pool.submit(run_side, "proposal", proposal[1], proposal[0], jobs, aware, clock)
        base = run_side("baseline", baseline[1], baseline[0], jobs, aware, clock)
        new = pending.result()
    return Comparison(start, end, extraction, base, new)


def load_proposal(text: str, source: str) -> QuotaConfig:
    try:
        return load_config_text(text, source=source)
    except ConfigError as exc:
        raise WhatIfError(exc.render()) from None


async def read_ledger(
    url: str, start: datetime, end: datetime, *, hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS
) -> tuple[Extraction, tuple[str, str] | None]:
    """The window's jobs, and the quota file in force at its start ((text, where it came from)) if recorded."""
    engine = create_engine(url)
    try:
        history = await window_history(engine, start, end)
        version = await config_in_force(engine, start)
    finally:
        await engine.dispose()
    extraction = extract(
        history.workloads, history.admissions, history.preemptions, origin=start, default_hook_delay_ms=hook_delay_ms
    )
    recorded = None
    if version is not None:
        recorded = (version.text, f"ledger: applied {version.applied_at.isoformat()} ({version.source})")
    return extraction, recorded


def whatif_from_ledger(
    url: str,
    proposal_text: str,
    start: datetime,
    end: datetime,
    *,
    baseline: tuple[str, str] | None = None,
    fallback: tuple[str, str] | None = None,
    hook_delay_ms: int | None = DEFAULT_HOOK_DELAY_MS,
    proposal_source: str = "proposal",
    parallel_from: int | None = None,
    aware: bool = True,
) -> Comparison:
    """Read the window from the ledger at `url` and compare; `baseline` ((text, source)) overrides the recorded
    file, `fallback` stands in when the ledger records none; `aware` as in `run_side`. Raises WhatIfError on bad
    input; database errors propagate."""
    if start >= end:
        raise WhatIfError(f"the window is empty: {start.isoformat()} is not before {end.isoformat()}")
    proposal = load_proposal(proposal_text, proposal_source)
    extraction, recorded = asyncio.run(read_ledger(url, start, end, hook_delay_ms=hook_delay_ms))
    chosen = baseline or recorded or fallback
    if chosen is None:
        raise WhatIfError(
            f"the ledger records no quota file in force at {start.isoformat()}: give the baseline file explicitly"
        )
    if not extraction.jobs:
        raise WhatIfError(f"no workload created in [{start.isoformat()}, {end.isoformat()}) can be replayed")
    base = load_proposal(chosen[0], chosen[1])
    return compare(
        extraction,
        (base, chosen[1]),
        (proposal, proposal_source),
        start=start,
        end=end,
        parallel_from=parallel_from,
        aware=aware,
        clock=asyncio.run(read_clock(url, start, (base, proposal))),
    )


async def read_clock(url: str, start: datetime, configs: Sequence[QuotaConfig]) -> Clock:
    """The replay's clock at the window's start, with the ledger's spending before it as far back as any budget of
    `configs` reads (the reader a new leader uses), each interval cut at the start: what ran on past it belongs to
    workloads the replay runs again, or to ones created before the window, which it leaves out. Without budgets
    nothing is read."""
    epoch_ms = epoch_ms_of(start)
    budgeted = [c for c in configs if any(h.budgets for h in (*c.cohorts, *c.teams))]
    if not budgeted:
        return Clock(epoch_ms)
    since = min(history_start(c, epoch_ms) for c in budgeted)
    engine = create_engine(url)
    try:
        found = await usage_since(engine, since, epoch_ms)
    finally:
        await engine.dispose()
    cut = tuple(
        replace(interval, end_ms=min(interval.end_ms, epoch_ms))
        for interval in found
        if interval.start_ms < epoch_ms and interval.end_ms is not None
    )
    return Clock(epoch_ms, cut)


def whatif_json(url: str, proposal_text: str, start: str, end: str, current_text: str) -> dict[str, Any]:
    """`whatif_from_ledger` for the admin API's worker process: plain values in and out (ISO 8601 times); the quota
    file in force now stands in when the ledger records none at the window's start. Bad input and database errors
    come back as {"error": message, "status": 422 or 503}, never as exceptions to unpickle."""
    try:
        comparison = whatif_from_ledger(
            url,
            proposal_text,
            _utc(start),
            _utc(end),
            fallback=(current_text, "the quota file in force now (the ledger records none at the window's start)"),
        )
    except WhatIfError as exc:
        return {"error": str(exc), "status": 422}
    except (SQLAlchemyError, OSError) as exc:
        return {"error": f"cannot read the ledger: {getattr(exc, 'orig', None) or exc}", "status": 503}
    return comparison.as_dict()


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.utcoffset() is None else moment.astimezone(UTC)


def team_rows(comparison: Mapping[str, object]) -> list[dict[str, object]]:
    """One row per team and side, for tables: team, run (now/new) and the figures."""
    teams = comparison["teams"]
    assert isinstance(teams, dict)
    rows: list[dict[str, object]] = []
    for team, sides in teams.items():
        for label, key in (("now", "baseline"), ("new", "proposal")):
            figures = sides[key]
            if figures is not None:
                rows.append({"team": team, "run": label, **figures})
    return rows
