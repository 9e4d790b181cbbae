"""`kuota scenario`: a quota file and a set of workloads run through the real queue manager in memory.

The file format and the output are a stable contract (../shared/spec/scenario.md) that conformance suites
outside the project run, so every field here is named as the spec names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from admission.workload import Admission, Workload
from queues.budgets import BudgetKeeper
from queues.manager import QueueManager, State
from quota.config import QuotaConfig
from quota.credits import UsageInterval
from quota.loader import ConfigError, ConfigProblem, LineMap, Path, load_config_data, parse_yaml_with_lines
from quota.pod_set import PodSet
from quota.quantity import QuantityError, parse_quantity

RESERVED_KEYS = ("expect", "source", "notes")
IDLE_CYCLE_LIMIT = 1000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PodSetSpec(_Strict):
    name: str
    count: int = Field(ge=0)
    min_count: int | None = Field(default=None, alias="minCount", ge=0)
    requests: dict[str, Any] = Field(default_factory=dict)

    @field_validator("requests")
    @classmethod
    def _quantities(cls, value: dict[str, Any]) -> dict[str, Any]:
        for resource, quantity in value.items():
            try:
                milli = parse_quantity(quantity)
            except QuantityError as exc:
                raise ValueError(f"{resource}: {exc}") from None
            if milli < 0:
                raise ValueError(f"{resource}: requests cannot be negative")
        return value


class AdmittedSpec(_Strict):
    at: Decimal = Decimal(0)
    flavors: dict[str, str | dict[str, str]]
    counts: dict[str, int] | None = None
    checkpointed_at: Decimal | None = Field(default=None, alias="checkpointedAt")
    """kuota's extension: when the running workload last checkpointed (seconds; absent: never since `at`)."""


class WorkloadSpec(_Strict):
    name: str
    queue: str | None = None
    team: str | None = None
    priority: int | None = None
    priority_class: str | None = Field(default=None, alias="priorityClass")
    created_at: Decimal = Field(default=Decimal(0), alias="createdAt")
    pod_sets: list[PodSetSpec] = Field(alias="podSets", min_length=1)
    admitted: AdmittedSpec | None = None


class UsageSpec(_Strict):
    """kuota's extension (spec/budgets.md): past usage of a team, for budgets to read."""

    team: str
    resources: dict[str, Any] = Field(min_length=1)
    start: Decimal = Field(alias="from")
    end: Decimal = Field(alias="to")

    @field_validator("resources")
    @classmethod
    def _quantities(cls, value: dict[str, Any]) -> dict[str, Any]:
        return PodSetSpec._quantities(value)


class ScenarioSpec(_Strict):
    name: str = ""
    config: dict[str, Any]
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    now: Decimal | None = None
    """kuota's extension: the time (seconds) of the first cycle, each later one a second after; absent: a second
    after the latest time the file mentions. Minimum runtimes and budgets read it."""
    usage: list[UsageSpec] = Field(default_factory=list)
    """kuota's extension: usage intervals that ended before the scenario, seconds on the file's clock (epoch)."""


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the bad field."""


@dataclass(frozen=True)
class Scenario:
    name: str
    config: QuotaConfig
    workloads: list[Workload]
    clock_ms: int
    """A time after everything the file mentions: new admissions count as the most recent."""
    checkpoints: Mapping[str, int] = field(default_factory=dict)
    """Running workload → when it last checkpointed (ms)."""
    usage: list[UsageInterval] = field(default_factory=list)
    """Past usage for budgets (ms)."""


def load_scenario_text(text: str, source: str = "") -> Scenario:
    try:
        data, lines = parse_yaml_with_lines(text, source)
    except ConfigError as exc:
        raise ScenarioError(exc.render()) from None
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{source}: a scenario is a mapping with `config` and `workloads`")
    body = {k: v for k, v in data.items() if k not in RESERVED_KEYS}
    try:
        spec = ScenarioSpec.model_validate(body)
    except ValidationError as exc:
        problems = [ConfigProblem(tuple(e["loc"]), _message(e), _line(lines, tuple(e["loc"]))) for e in exc.errors()]
        raise ScenarioError(ConfigError(problems, source).render().replace("quota configuration", "scenario")) from None
    try:
        config = load_config_data(spec.config, lines, prefix=("config",), source=source)
    except ConfigError as exc:
        raise ScenarioError(exc.render()) from None
    return _build(spec, config, lines, source)


def _message(err: Mapping[str, Any]) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field"
    return str(err["msg"]).removeprefix("Value error, ")


def _line(lines: LineMap, path: Path) -> int | None:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return None


def _seconds_to_ms(value: Decimal) -> int:
    try:
        return int(value * 1000)
    except (InvalidOperation, ValueError):  # pragma: no cover - pydantic has validated the decimal
        return 0


def _build(spec: ScenarioSpec, config: QuotaConfig, lines: LineMap, source: str) -> Scenario:
    problems: list[ConfigProblem] = []

    def problem(path: Path, message: str) -> None:
        problems.append(ConfigProblem(path, message, _line(lines, path)))

    teams = {t.name: t for t in config.teams}
    flavors = {f.name for f in config.flavors}
    classes = {p.name: p for p in config.priority_classes}
    default_class = config.default_priority_class()
    seen: set[str] = set()
    workloads: list[Workload] = []
    checkpoints: dict[str, int] = {}
    latest = 0
    for index, ws in enumerate(spec.workloads):
        base: Path = ("workloads", index)
        if ws.name in seen:
            problem((*base, "name"), f"workload {ws.name!r} is declared twice")
        seen.add(ws.name)
        team_name = ws.team
        if ws.queue is not None:
            owner = config.team_for_queue(ws.queue)
            if owner is None:
                problem((*base, "queue"), f"queue {ws.queue!r} belongs to no team")
                continue
            if team_name is not None and team_name != owner.name:
                problem((*base, "team"), f"queue {ws.queue!r} belongs to team {owner.name!r}, not {team_name!r}")
            team_name = owner.name
        if team_name is None:
            problem(base, "give `queue` or `team`")
            continue
        if team_name not in teams:
            problem((*base, "team"), f"team {team_name!r} is not in the config")
            continue
        priority_class = classes.get(ws.priority_class) if ws.priority_class else default_class
        if ws.priority_class is not None and ws.priority_class not in classes:
            problem((*base, "priorityClass"), f"priority class {ws.priority_class!r} is not in the config")
            continue
        priority = ws.priority if ws.priority is not None else (priority_class.value if priority_class else 0)
        pod_sets = []
        names: set[str] = set()
        for p_index, ps in enumerate(ws.pod_sets):
            if ps.name in names:
                problem((*base, "podSets", p_index, "name"), f"pod set {ps.name!r} is declared twice")
            names.add(ps.name)
            if ps.min_count is not None and ps.min_count > ps.count:
                problem((*base, "podSets", p_index, "minCount"), "minCount may not exceed count")
            requests = {r: parse_quantity(q) for r, q in ps.requests.items()}
            pod_sets.append(PodSet(ps.name, ps.count, requests, ps.min_count))
        created = _seconds_to_ms(ws.created_at)
        latest = max(latest, created)
        admission = None
        if ws.admitted is not None:
            admission = _admission(ws.admitted, pod_sets, flavors, (*base, "admitted"), problem)
            latest = max(latest, _seconds_to_ms(ws.admitted.at))
            if ws.admitted.checkpointed_at is not None:
                checkpointed = _seconds_to_ms(ws.admitted.checkpointed_at)
                if checkpointed < _seconds_to_ms(ws.admitted.at):
                    problem((*base, "admitted", "checkpointedAt"), "a checkpoint cannot come before the admission")
                checkpoints[ws.name] = checkpointed
                latest = max(latest, checkpointed)
        workloads.append(
            Workload(
                name=ws.name,
                team=team_name,
                priority=priority,
                pod_sets=tuple(pod_sets),
                created_at=created,
                queue=ws.queue,
                priority_class=priority_class.name if priority_class else None,
                preemptible=priority_class.preemptible if priority_class else True,
                admission=admission,
            )
        )
    usage = []
    for index, past in enumerate(spec.usage):
        base = ("usage", index)
        start, end = _seconds_to_ms(past.start), _seconds_to_ms(past.end)
        if past.team not in teams:
            problem((*base, "team"), f"team {past.team!r} is not in the config")
        if end < start:
            problem((*base, "to"), "`to` comes before `from`")
        latest = max(latest, end)
        for resource, quantity in past.resources.items():
            usage.append(UsageInterval(past.team, resource, parse_quantity(quantity), start, end))
    clock = latest + 1000
    if spec.now is not None:
        clock = _seconds_to_ms(spec.now)
        if clock < latest:
            problem(
                ("now",), "`now` comes before a time the file mentions (createdAt, admitted.at, checkpointedAt, usage)"
            )
    if problems:
        raise ScenarioError(ConfigError(problems, source).render().replace("quota configuration", "scenario"))
    return Scenario(spec.name, config, workloads, clock, checkpoints, usage)


def _admission(
    spec: AdmittedSpec, pod_sets: list[PodSet], flavors: set[str], base: Path, problem: Any
) -> Admission | None:
    by_name = {ps.name: ps for ps in pod_sets}
    assigned: dict[str, dict[str, str]] = {}
    ok = True
    for ps_name, value in spec.flavors.items():
        pod_set = by_name.get(ps_name)
        if pod_set is None:
            problem((*base, "flavors", ps_name), f"pod set {ps_name!r} is not one of the workload's pod sets")
            ok = False
            continue
        mapping = {r: value for r in pod_set.requests} if isinstance(value, str) else dict(value)
        for flavor in mapping.values():
            if flavor not in flavors:
                problem((*base, "flavors", ps_name), f"flavor {flavor!r} is not in the config")
                ok = False
        assigned[ps_name] = mapping
    for ps_name in by_name:
        if ps_name not in assigned:
            problem((*base, "flavors"), f"pod set {ps_name!r} has no flavor")
            ok = False
    counts = {ps.name: ps.count for ps in pod_sets}
    for ps_name, count in (spec.counts or {}).items():
        if ps_name not in by_name:
            problem((*base, "counts", ps_name), f"pod set {ps_name!r} is not one of the workload's pod sets")
            ok = False
        else:
            counts[ps_name] = count
    if not ok:
        return None
    return Admission(assigned, counts, _seconds_to_ms(spec.at))


# -- running ----------------------------------------------------------------------------------------------------


def run_scenario(scenario: Scenario, cycles: int = 1, until_idle: bool = False) -> dict[str, Any]:
    manager = QueueManager(scenario.config)
    manager.checkpoints = lambda workload: scenario.checkpoints.get(workload.name)
    manager.time_text = _scenario_time
    initially_admitted = set()
    for workload in scenario.workloads:
        manager.add(workload)
        if workload.admission is not None:
            initially_admitted.add(workload.name)
    budgets = BudgetKeeper(scenario.config)
    budgets.load(scenario.usage)
    for workload in scenario.workloads:
        if workload.admission is not None:
            budgets.open(workload.name, workload.team, _by_resource(workload), workload.admission.admitted_at)
    preempted: set[str] = set()
    newly_admitted: set[str] = set()
    now = scenario.clock_ms
    ran = 0
    changed = True
    limit = IDLE_CYCLE_LIMIT if until_idle else cycles
    while ran < limit:
        if ran > 0:
            for name in _evicting(manager):
                budgets.close(name, now)
            completed = _complete_evictions(manager)
            if until_idle and not completed and not changed:
                break
        budgets.review(now)
        manager.set_budgets(budgets.restrictions, budgets.lowest)
        result = manager.schedule(now)
        admitted = {d.workload.name for d in result.decisions if manager.state[d.workload.name] is State.ADMITTED}
        for name in admitted:
            budgets.open(name, manager.workloads[name].team, _by_resource(manager.workloads[name]), now)
        ran += 1
        now += 1000
        newly_admitted |= admitted
        preempted |= {e.victim.name for e in result.evictions}
        changed = bool(admitted or result.evictions)
        if until_idle and not changed and not _evicting(manager):
            break
    return {"cycles": ran, "workloads": _report(manager, preempted, newly_admitted)}


def _by_resource(workload: Workload) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_, resource), value in workload.usage().items():
        out[resource] = out.get(resource, 0) + value
    return out


def _scenario_time(ms: int) -> str:
    """A time on the scenario's clock, in seconds as the file writes them."""
    seconds, rest = divmod(ms, 1000)
    return f"{seconds}s" if not rest else f"{seconds}.{rest:03d}s"


def _evicting(manager: QueueManager) -> list[str]:
    return [n for n, s in manager.state.items() if s is State.EVICTING]


def _complete_evictions(manager: QueueManager) -> int:
    names = _evicting(manager)
    for name in names:
        manager.complete_eviction(name)
    return len(names)


def _report(manager: QueueManager, preempted: set[str], newly_admitted: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(manager.workloads):
        workload = manager.workloads[name]
        state = manager.state[name]
        if state is State.ADMITTED and workload.admission is not None:
            entry: dict[str, Any] = {"state": "admitted", "new": name in newly_admitted}
            entry["flavors"] = {
                ps.name: {r: f for r, f in workload.admission.flavors.get(ps.name, {}).items() if r in ps.requests}
                for ps in workload.pod_sets
            }
            entry["counts"] = {ps.name: workload.admission.counts.get(ps.name, ps.count) for ps in workload.pod_sets}
        elif name in preempted and name in manager.preemptions:
            info = manager.preemptions[name]
            entry = {"state": "preempted", "reason": str(info.reason), "by": info.preemptor}
        else:
            entry = {
                "state": "pending",
                "inadmissible": manager.inadmissible(name),
                "message": manager.messages.get(name) or "waiting for its turn in the queue",
            }
        out[name] = entry
    return out
