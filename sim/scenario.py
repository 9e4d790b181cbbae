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

from admission.nodes import NodeInventory, NodeState, Taint, TaintEffect
from admission.workload import Admission, Workload
from queues.manager import QueueManager, State
from quota.config import QuotaConfig
from quota.loader import ConfigError, ConfigProblem, LineMap, Path, load_config_data, parse_yaml_with_lines
from quota.pod_set import PodSet, TopologyRequest
from quota.quantity import QuantityError, parse_quantity
from quota.taints import Toleration
from sim.nodes import generated_nodes

RESERVED_KEYS = ("expect", "source", "notes")
IDLE_CYCLE_LIMIT = 1000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _check_quantities(value: dict[str, Any], noun: str) -> dict[str, Any]:
    for resource, quantity in value.items():
        try:
            milli = parse_quantity(quantity)
        except QuantityError as exc:
            raise ValueError(f"{resource}: {exc}") from None
        if milli < 0:
            raise ValueError(f"{resource}: {noun} cannot be negative")
    return value


class TopologySpec(_Strict):
    """kuota's extension (spec/topology.md): a pod set's topology wish, as its template's annotations say it."""

    required: str | None = None
    preferred: str | None = None


class TolerationSpec(_Strict):
    key: str = ""
    operator: str = Field(default="Equal", pattern="^(Equal|Exists)$")
    value: str = ""
    effect: str = Field(default="", pattern="^(|NoSchedule|PreferNoSchedule|NoExecute)$")


class TaintSpec(_Strict):
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


class NodeSpec(_Strict):
    """kuota's extension: one node of the scenario's cluster."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, Any] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False

    @field_validator("allocatable")
    @classmethod
    def _quantities(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_quantities(value, "allocatable")


class NodeGroupSpec(_Strict):
    """kuota's extension: `count` nodes labelled by block, rack and host as the kwok nodes are."""

    count: int = Field(ge=1, le=100_000)
    gpus_per_node: int = Field(default=8, alias="gpusPerNode", ge=0)
    nodes_per_rack: int = Field(default=4, alias="nodesPerRack", ge=1)
    racks_per_block: int = Field(default=8, alias="racksPerBlock", ge=1)
    prefix: str = "node-"
    first: int = Field(default=0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)


class PodSetSpec(_Strict):
    name: str
    count: int = Field(ge=0)
    min_count: int | None = Field(default=None, alias="minCount", ge=0)
    requests: dict[str, Any] = Field(default_factory=dict)
    topology: TopologySpec | None = None
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[TolerationSpec] = Field(default_factory=list)

    @field_validator("requests")
    @classmethod
    def _quantities(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_quantities(value, "requests")


class AdmittedSpec(_Strict):
    at: Decimal = Decimal(0)
    flavors: dict[str, str | dict[str, str]]
    counts: dict[str, int] | None = None
    checkpointed_at: Decimal | None = Field(default=None, alias="checkpointedAt")
    """kuota's extension: when the running workload last checkpointed (seconds; absent: never since `at`)."""
    placement: dict[str, dict[str, int]] = Field(default_factory=dict)
    """kuota's extension: per pod set, node → pods of the running workload on it (spec/topology.md)."""


class WorkloadSpec(_Strict):
    name: str
    queue: str | None = None
    team: str | None = None
    priority: int | None = None
    priority_class: str | None = Field(default=None, alias="priorityClass")
    created_at: Decimal = Field(default=Decimal(0), alias="createdAt")
    pod_sets: list[PodSetSpec] = Field(alias="podSets", min_length=1)
    admitted: AdmittedSpec | None = None


class ScenarioSpec(_Strict):
    name: str = ""
    config: dict[str, Any]
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    now: Decimal | None = None
    """kuota's extension: the time (seconds) of the first cycle, each later one a second after; absent: a second
    after the latest time the file mentions. Only minimum runtimes read it."""
    nodes: list[NodeSpec | NodeGroupSpec] | None = None
    """kuota's extension: the cluster's nodes, for flavors with a topology (spec/topology.md)."""


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
    nodes: tuple[NodeState, ...] | None = None
    """The cluster's nodes (None: the file has none; nothing is placed on nodes)."""


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
    nodes = _nodes(spec, problem)
    node_names = {n.name for n in nodes} if nodes is not None else set()
    levels = {level for t in config.topologies for level in t.levels}
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
            wish = _wish(ps.topology, levels, (*base, "podSets", p_index, "topology"), problem)
            tolerations = tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in ps.tolerations)
            pod_sets.append(
                PodSet(ps.name, ps.count, requests, ps.min_count, dict(ps.node_selector), wish, tolerations)
            )
        created = _seconds_to_ms(ws.created_at)
        latest = max(latest, created)
        admission = None
        if ws.admitted is not None:
            admission = _admission(ws.admitted, pod_sets, flavors, (*base, "admitted"), problem, node_names)
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
    clock = latest + 1000
    if spec.now is not None:
        clock = _seconds_to_ms(spec.now)
        if clock < latest:
            problem(("now",), "`now` comes before a time the file mentions (createdAt, admitted.at, checkpointedAt)")
    if problems:
        raise ScenarioError(ConfigError(problems, source).render().replace("quota configuration", "scenario"))
    return Scenario(spec.name, config, workloads, clock, checkpoints, nodes)


def _taints(specs: list[TaintSpec]) -> tuple[Taint, ...]:
    return tuple(Taint(t.key, t.value, t.effect) for t in specs)


def _nodes(spec: ScenarioSpec, problem: Any) -> tuple[NodeState, ...] | None:
    if spec.nodes is None:
        return None
    out: list[NodeState] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(spec.nodes):
        if isinstance(entry, NodeSpec):
            allocatable = {r: parse_quantity(q) for r, q in entry.allocatable.items()}
            made = [
                NodeState(
                    entry.name, dict(entry.labels), allocatable, _taints(entry.taints), entry.ready, entry.unschedulable
                )
            ]
        else:
            made = generated_nodes(
                entry.count,
                entry.gpus_per_node,
                entry.nodes_per_rack,
                entry.racks_per_block,
                prefix=entry.prefix,
                first=entry.first,
                labels=entry.labels,
                taints=_taints(entry.taints),
            )
        for node in made:
            if node.name in seen:
                problem(("nodes", index), f"node {node.name!r} is declared twice (first at nodes[{seen[node.name]}])")
            seen.setdefault(node.name, index)
            out.append(node)
    return tuple(out)


def _wish(spec: TopologySpec | None, levels: set[str], path: Path, problem: Any) -> TopologyRequest | None:
    if spec is None:
        return None
    if (spec.required is None) == (spec.preferred is None):
        problem(path, "give exactly one of `required` and `preferred`")
        return None
    level = spec.required if spec.required is not None else spec.preferred
    assert level is not None
    if level not in levels:
        problem(path, f"level {level!r} is not a level of any topology in the config")
        return None
    return TopologyRequest(level, spec.required is not None)


def _admission(
    spec: AdmittedSpec, pod_sets: list[PodSet], flavors: set[str], base: Path, problem: Any, nodes: set[str]
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
    for ps_name, on_nodes in spec.placement.items():
        if ps_name not in by_name:
            problem((*base, "placement", ps_name), f"pod set {ps_name!r} is not one of the workload's pod sets")
            ok = False
            continue
        for node, pods in on_nodes.items():
            if node not in nodes:
                problem((*base, "placement", ps_name, node), f"node {node!r} is not under nodes")
                ok = False
            elif pods < 0:
                problem((*base, "placement", ps_name, node), "a pod count cannot be negative")
                ok = False
        if sum(on_nodes.values()) != counts.get(ps_name):
            problem((*base, "placement", ps_name), f"places {sum(on_nodes.values())} pods, not the pod set's count")
            ok = False
    if not ok:
        return None
    return Admission(assigned, counts, _seconds_to_ms(spec.at), {k: dict(v) for k, v in spec.placement.items()})


# -- running ----------------------------------------------------------------------------------------------------


def run_scenario(scenario: Scenario, cycles: int = 1, until_idle: bool = False) -> dict[str, Any]:
    manager = QueueManager(scenario.config)
    if scenario.nodes is not None:
        manager.nodes = NodeInventory(scenario.nodes)
    manager.checkpoints = lambda workload: scenario.checkpoints.get(workload.name)
    manager.time_text = _scenario_time
    initially_admitted = set()
    for workload in scenario.workloads:
        manager.add(workload)
        if workload.admission is not None:
            initially_admitted.add(workload.name)
    preempted: set[str] = set()
    newly_admitted: set[str] = set()
    now = scenario.clock_ms
    ran = 0
    changed = True
    limit = IDLE_CYCLE_LIMIT if until_idle else cycles
    while ran < limit:
        if ran > 0:
            completed = _complete_evictions(manager)
            if until_idle and not completed and not changed:
                break
        result = manager.schedule(now)
        ran += 1
        now += 1000
        admitted = {d.workload.name for d in result.decisions if manager.state[d.workload.name] is State.ADMITTED}
        newly_admitted |= admitted
        preempted |= {e.victim.name for e in result.evictions}
        changed = bool(admitted or result.evictions)
        if until_idle and not changed and not _evicting(manager):
            break
    return {"cycles": ran, "workloads": _report(manager, preempted, newly_admitted)}


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
            if workload.admission.placement:
                entry["placement"] = _placement_report(manager, workload)
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


def _placement_report(manager: QueueManager, workload: Workload) -> dict[str, Any]:
    """kuota's extension of the output: per placed pod set, its pods per node and, when one domain of a level holds
    them all, the narrowest such (`{LEVEL: VALUE}`)."""
    assert workload.admission is not None
    out: dict[str, Any] = {}
    for ps_name, on_nodes in workload.admission.placement.items():
        entry: dict[str, Any] = {"nodes": dict(sorted(on_nodes.items()))}
        domain = _shared_domain(manager, workload, ps_name, on_nodes)
        if domain:
            entry["domain"] = domain
        out[ps_name] = entry
    return out


def _shared_domain(
    manager: QueueManager, workload: Workload, ps_name: str, on_nodes: Mapping[str, int]
) -> dict[str, str]:
    if manager.nodes is None or workload.admission is None:
        return {}
    flavors = workload.admission.flavors.get(ps_name, {}).values()
    topology = next((t for f in flavors if (t := manager.config.topology_of(f)) is not None), None)
    if topology is None:
        return {}
    states = [s for name, pods in on_nodes.items() if pods > 0 and (s := manager.nodes.node(name)) is not None]
    for depth in range(len(topology.levels), 0, -1):
        paths = {tuple(s.labels.get(level) for level in topology.levels[:depth]) for s in states}
        if len(paths) == 1:
            value = next(iter(paths))[-1]
            if value is not None:
                return {topology.levels[depth - 1]: value}
    return {}
