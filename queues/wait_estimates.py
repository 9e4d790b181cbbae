"""When will a pending workload start: the live state an estimate is made from, what the simulation answers, and
the estimate with its basis for one workload.

Pure. The simulation itself (the real engine on the simulated cluster, from now on) is sim.estimates's and runs
away from the scheduling loop; here are the two ends of it that read the controller: `live_state` takes what the
simulation needs (a copy, bounded: at most `max_pending` pending workloads, taken from every team's queue front in
turn, so a queue of 100,000 costs no more than one of 2,000), and `explain` turns the simulation's answer and the
live queues into one workload's estimate: its position, the work ahead of it, the heads of the teams it competes
with in its cohort, and the expected ends of the running work there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from admission.workload import Workload
from queues.manager import State
from queues.read_model import ControllerReader, QueueManagerReader

MAX_PENDING = 2_000
"""Pending workloads a simulation takes; further back in a queue an estimate says unknown and why."""

SHOWN = 3
"""Cohort heads and running ends an estimate lists (the totals are always given)."""


@dataclass(frozen=True, slots=True)
class LiveState:
    """A copy of what the estimate simulates, on the controller's clock (milliseconds)."""

    now_ms: int
    config_text: str
    running: tuple[Workload, ...]
    """Admitted and not leaving, each with its admission (and its time)."""
    pending: tuple[tuple[Workload, int], ...]
    """(workload, when it may be admitted: now, or the end of its requeue backoff), every team's in queue order."""
    leaving: tuple[tuple[Workload, int], ...] = ()
    """(workload being evicted, with its admission; when it is expected to be gone: now once it acked its
    checkpoint, else its checkpoint deadline). Its quota is not free until then, and it queues again after."""
    left_out: int = 0
    """Pending workloads beyond `max_pending`, not simulated."""
    version: tuple[int, ...] = ()
    """What changes when the state does: an estimate is cached per version."""


@dataclass(frozen=True, slots=True)
class SimulatedStarts:
    """What the simulation found, for every workload it took (names as the controller's)."""

    now_ms: int
    horizon_ms: int
    """How far ahead it simulated at most."""
    simulated_to_ms: int
    """Where it stopped: the horizon, the last event, or where a bound on its work stopped it."""
    events: int
    stopped: str | None
    """Why it stopped before running out of events (a bound), or None."""
    starts: Mapping[str, int] = field(default_factory=dict)
    """Pending workload → its simulated start (the controller's clock)."""
    runtimes: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    """Pending workload → (expected run time, what it rests on)."""
    ends: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    """Running workload → (expected end on the state's clock, what it rests on)."""
    unknown_runtime: frozenset[str] = frozenset()
    """Workloads with no expected run time (nothing declared, no history): running, they never end in it."""
    history_runs: int = 0
    wall_ms: int = 0


Estimator = Callable[[str | None, LiveState], "SimulatedStarts | dict[str, Any]"]
"""(ledger URL or None, the live state) → the simulation's answer, or {"error": message} (sim.estimates.estimate_json).
A module-level function, so that it can run in a worker process."""


def state_version(reader: ControllerReader, config_text: str) -> tuple[int, ...]:
    """Changes whenever a cycle ran or work came, started or left (cheap: no walk over the workloads)."""
    manager = reader.manager
    running = sum(1 for _ in manager.usage)
    return (manager.cycles, len(manager.workloads), running, len(manager.held), hash(config_text))


def live_state(reader: ControllerReader, config_text: str, now_ms: int, *, max_pending: int = MAX_PENDING) -> LiveState:
    manager = reader.manager
    running: list[Workload] = []
    leaving: list[tuple[Workload, int]] = []
    for name in manager.usage:  # running work only, not every workload
        workload = manager.workloads[name]
        if workload.admission is None:
            continue
        if manager.state[name] is State.ADMITTED:
            running.append(workload)
        elif manager.state[name] is State.EVICTING:
            track = reader.tracking.get(name)
            eviction = track.eviction if track is not None else None
            gone = now_ms if eviction is None or eviction.acked_at is not None else max(now_ms, eviction.deadline)
            leaving.append((replace(workload, evicting=True), gone))
    skip = manager.held | manager.deactivated
    fronts = [(w for w in queue.ordered() if w.name not in skip) for queue in manager.queues.values()]
    total = sum(len(queue) for queue in manager.queues.values())
    pending: list[tuple[Workload, int]] = []
    # Round-robin over the teams' fronts: every team's first workloads are in, whatever one team's backlog; only
    # what is taken is read (a queue's order is kept, not sorted per read).
    while fronts and len(pending) < max_pending:
        for front in list(fronts):
            taken = next(front, None)
            if taken is None:
                fronts.remove(front)
                continue
            track = reader.tracking.get(taken.name)
            pending.append((taken, max(now_ms, track.eligible_at) if track is not None else now_ms))
            if len(pending) >= max_pending:
                break
    return LiveState(
        now_ms=now_ms,
        config_text=config_text,
        running=tuple(running),
        pending=tuple(pending),
        leaving=tuple(leaving),
        left_out=max(0, total - len(pending)),
        version=state_version(reader, config_text),
    )


# -- one workload's estimate --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ahead:
    """Pending work ahead of a workload in its team's queue."""

    workloads: int
    gpu_ms: int
    """Their GPUs × expected run time (milli-GPU-milliseconds), over those with an expected run time."""
    without_runtime: int


@dataclass(frozen=True, slots=True)
class Head:
    name: str
    team: str
    gpu_milli: int


@dataclass(frozen=True, slots=True)
class RunningEnd:
    name: str
    team: str
    gpu_milli: int
    ends_at: int | None
    basis: str


@dataclass(frozen=True, slots=True)
class WaitEstimate:
    workload: str
    start_at: int | None
    """The simulated start on the controller's clock; None: unknown, and `unknown` says why."""
    unknown: str | None
    position_in_team: int | None
    position_in_queue: int | None
    ahead: Ahead
    own_runtime: str | None
    """Its own expected run time and basis, as text."""
    cohort: str
    cohort_heads: tuple[Head, ...]
    running: int
    running_unknown_end: int
    next_ends: tuple[RunningEnd, ...]
    simulation: SimulatedStarts | None


def root_of(manager: QueueManagerReader, team: str) -> str:
    """The top cohort a team belongs to (the team itself when it has none): whom it competes with for quota."""
    node = manager.live.teams[team]
    top = node.name
    parent = node.parent
    while parent is not None:
        top = parent.name
        parent = parent.parent
    return top


def explain(
    reader: ControllerReader, state: LiveState, name: str, starts: SimulatedStarts | None, unavailable: str | None
) -> WaitEstimate:
    """`name`'s estimate, its basis read from `state` (what was simulated) so that the two agree however the queue
    moved since; a workload beyond what `state` took is placed in the live queue. `starts` None: no simulation
    answer, for the reason `unavailable`."""
    manager = reader.manager
    workload = manager.workloads[name]
    runtimes = starts.runtimes if starts is not None else {}
    ends_of = starts.ends if starts is not None else {}
    cohort = root_of(manager, workload.team)
    competing = {t for t in manager.queues if root_of(manager, t) == cohort}
    ahead: list[Workload] = []
    heads: dict[str, Workload] = {}
    found = False
    for other, _ in state.pending:
        if other.team == workload.team and not found:
            if other.name == name:
                found = True
            else:
                ahead.append(other)
        elif other.team != workload.team and other.team in competing:
            heads.setdefault(other.team, other)
    if not found:  # not taken into the simulation: its place in the live queue
        ahead = []
        for other in manager.queues[workload.team].ordered():
            if other.name == name:
                break
            ahead.append(other)
    ahead_gpu_ms = sum(gpu_milli(w) * runtimes[w.name][0] for w in ahead if w.name in runtimes)
    ends = [
        RunningEnd(
            w.name,
            w.team,
            gpu_milli(w),
            ends_of[w.name][0] if w.name in ends_of else None,
            ends_of[w.name][1] if w.name in ends_of else "no basis",
        )
        for w in (*state.running, *(w for w, _ in state.leaving))
        if w.team in competing
    ]
    known = sorted((e for e in ends if e.ends_at is not None), key=lambda e: (e.ends_at or 0, e.name))
    own = runtimes.get(name)
    start = starts.starts.get(name) if starts is not None else None
    return WaitEstimate(
        workload=name,
        start_at=start,
        unknown=None if start is not None else _why_unknown(reader, name, starts, unavailable),
        position_in_team=len(ahead) + 1,
        position_in_queue=sum(w.queue == workload.queue for w in ahead) + 1,
        ahead=Ahead(len(ahead), ahead_gpu_ms, sum(w.name not in runtimes for w in ahead)),
        own_runtime=own[1] if own else None,
        cohort=cohort,
        cohort_heads=tuple(Head(w.name, w.team, gpu_milli(w)) for _, w in sorted(heads.items())[:SHOWN]),
        running=len(ends),
        running_unknown_end=len(ends) - len(known),
        next_ends=tuple(known[:SHOWN]),
        simulation=starts,
    )


def _why_unknown(reader: ControllerReader, name: str, starts: SimulatedStarts | None, unavailable: str | None) -> str:
    manager = reader.manager
    if name in manager.held:
        return "held by an operator: it starts only after `kuota release`"
    if name in manager.deactivated:
        return "deactivated (its pods were not ready in time too often): it starts only after `kuota release`"
    if starts is None:
        return unavailable or "no simulation of the queue is available"
    if name not in starts.runtimes and name not in starts.unknown_runtime:
        return (
            f"too far back in its queue: the estimate simulates the first {MAX_PENDING} pending workloads, taken "
            "from every team's front in turn"
        )
    reasons = []
    if starts.stopped is not None:
        reasons.append(f"the simulation stopped early ({starts.stopped})")
    else:
        hours = (starts.horizon_ms - starts.now_ms) / 3_600_000
        reasons.append(f"it does not start within the {hours:g} h the simulation looks ahead")
    blocked = len(starts.unknown_runtime)
    if blocked:
        reasons.append(
            f"{blocked} workload(s) have no expected run time (no declared kuota.dev/expected-runtime and too few "
            "finished workloads of their team and size in the ledger), so the simulation never ends them"
        )
    message = manager.messages.get(name)
    if message:
        reasons.append(f"the scheduler says: {message}")
    return "; ".join(reasons)


def gpu_milli(workload: Workload) -> int:
    return sum(ps.count * q for ps in workload.pod_sets for r, q in ps.requests.items() if r.endswith("gpu"))
