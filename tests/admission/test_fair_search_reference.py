"""The engine's fair-sharing victim search against the plain one in fair_reference.py, on random cohort trees.

The engine's search skips what it can prove changes nothing (a team none of whose usages the strategy accepts
is passed over unread, only the first victim each team refuses is kept for the second strategy, answers are
shared between look-alike victims); the reference reads and judges every victim. Both must return the same
victims, in the same order, for the same reasons, and leave the snapshot as they found it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission import preemption
from admission.preemption import PreemptionRequest, find_targets, search_covers
from admission.snapshot import Snapshot
from admission.workload import Workload
from quota.config import PreemptionStrategy, QuotaConfig
from quota.loader import load_config_data
from tests.admission.fair_reference import reference_fair_targets
from tests.admission.strategies import FLAVORS, RESOURCES, WITHIN, _limits, quota_configs, workloads
from tests.admission.test_properties import drive, plausible_usage

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

STRATEGY_LISTS = [
    (PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, PreemptionStrategy.LESS_THAN_INITIAL_SHARE),
    (PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (PreemptionStrategy.LESS_THAN_INITIAL_SHARE,),
    (PreemptionStrategy.LESS_THAN_INITIAL_SHARE, PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE),
]


def _with_strategies(config: QuotaConfig, strategies: tuple[PreemptionStrategy, ...]) -> QuotaConfig:
    fair = config.fair_sharing.model_copy(update={"preemption_strategies": strategies})
    return config.model_copy(update={"fair_sharing": fair})


def _snapshot(
    config: QuotaConfig, running: list[Workload], factors: dict[str, Fraction], saved: dict[str, int] | None
) -> Snapshot:
    snapshot = Snapshot.build(config, running, factors)
    if saved is not None:
        snapshot.checkpoints = lambda w: saved.get(w.name)
    return snapshot


@st.composite
def fair_trees(draw: st.DrawFn) -> QuotaConfig:
    """A cohort tree (a root, up to three cohorts below it) whose teams all share it, with fair sharing on."""
    cohorts: list[dict[str, Any]] = [{"name": "root"}]
    for index in range(draw(st.integers(0, 3))):
        cohort: dict[str, Any] = {"name": f"c{index}", "parent": draw(st.sampled_from([c["name"] for c in cohorts]))}
        cohort["fairSharing"] = {"weight": draw(st.sampled_from([1, 1, 2]))}
        if draw(st.integers(0, 2)) == 0:
            cohort["quotas"] = [
                {"flavor": FLAVORS[0], "resources": {RESOURCES[0]: {"nominal": draw(st.integers(0, 4))}}}
            ]
        cohorts.append(cohort)
    resources = list(RESOURCES[: draw(st.integers(1, 2))])
    teams = []
    for index in range(draw(st.integers(2, 5))):
        team: dict[str, Any] = {
            "name": f"t{index}",
            "parent": draw(st.sampled_from([c["name"] for c in cohorts])),
            "queues": [f"ns{index}/q"],
            "quotas": [{"flavor": FLAVORS[0], "resources": {r: _limits(draw, True, 6) for r in resources}}],
            "preemption": {
                "withinTeam": draw(st.sampled_from(WITHIN)),
                "reclaimWithinCohort": draw(st.sampled_from(["LowerPriority", "Any", "Any"])),
            },
            "fairSharing": {"weight": draw(st.sampled_from([0, 1, 1, 2]))},
        }
        teams.append(team)
    body = {
        "flavors": [{"name": FLAVORS[0]}],
        "priorityClasses": [
            {"name": "low", "value": 0},
            {"name": "high", "value": 10},
            {"name": "pinned", "value": 5, "preemptible": False},
        ],
        "fairSharing": {
            "enabled": True,
            "preemptionStrategies": [str(s) for s in draw(st.sampled_from(STRATEGY_LISTS))],
        },
        "cohorts": cohorts,
        "teams": teams,
    }
    return load_config_data(body)


@pytest.mark.parametrize("scan_at_most", [preemption._SCAN_AT_MOST, 0], ids=["picks-by-scan", "picks-by-heap"])
@SETTINGS
@given(data=st.data())
def test_the_fair_search_chooses_what_the_plain_search_chooses(data: st.DataObject, scan_at_most: int) -> None:
    """Both ways a pick is made (a scan of a few teams, the kept heap of many) against the plain search."""
    default = preemption._SCAN_AT_MOST
    preemption._SCAN_AT_MOST = scan_at_most
    try:
        _the_fair_search_chooses_what_the_plain_search_chooses(data)
    finally:
        preemption._SCAN_AT_MOST = default


def _the_fair_search_chooses_what_the_plain_search_chooses(data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        config = _with_strategies(
            data.draw(quota_configs(fair_sharing=True)), data.draw(st.sampled_from(STRATEGY_LISTS))
        )
    else:
        config = data.draw(fair_trees())
    # Many small jobs: teams with several look-alike victims, which is where the engine's search skips reading.
    seed = data.draw(workloads(config, data.draw(st.integers(0, 8))))
    seed += data.draw(workloads(config, data.draw(st.integers(2, 40)), small=True, prefix="s"))
    manager = drive(config, seed, cycles=4)
    running = manager.running()
    if not running:
        return
    evicting = data.draw(st.sets(st.sampled_from([w.name for w in running]), max_size=3))
    running = [replace(w, evicting=True) if w.name in evicting else w for w in running]
    factors = {
        team.name: data.draw(st.sampled_from([Fraction(1, 2), Fraction(1), Fraction(3, 2)]))
        for team in config.teams
        if data.draw(st.booleans())
    }
    saved = None
    if data.draw(st.booleans()):
        saved = {w.name: data.draw(st.integers(0, 1500)) for w in running if data.draw(st.booleans())}
    shapes = data.draw(workloads(config, data.draw(st.integers(1, 2))))
    # Every team asks, at both priorities: many searches per tree, from both sides of every cohort.
    for shape in shapes:
        for team in config.teams:
            for priority in (0, 10):
                preemptor = replace(shape, name=f"preemptor-{shape.name}", team=team.name, priority=priority)
                contested = data.draw(st.sampled_from(["all", "first", "last"]))
                _compare(config, running, factors, saved, preemptor, contested)


def _compare(
    config: QuotaConfig,
    running: list[Workload],
    factors: dict[str, Fraction],
    saved: dict[str, int] | None,
    preemptor: Workload,
    which: str,
) -> None:
    engine = _snapshot(config, running, factors, saved)
    plain = _snapshot(config, running, factors, saved)
    usage = plausible_usage(engine, preemptor)
    if not usage:
        return
    ordered = sorted(usage)
    contested = frozenset(ordered if which == "all" else ordered[:1] if which == "first" else ordered[-1:])
    before = {n: {fr: v for fr, v in node.usage.items() if v} for n, node in engine.tree.teams.items()}
    found = find_targets(engine, PreemptionRequest(preemptor, engine.team(preemptor.team), usage, contested))
    expected = reference_fair_targets(plain, PreemptionRequest(preemptor, plain.team(preemptor.team), usage, contested))
    assert [(t.workload.name, t.reason) for t in found] == [(t.workload.name, t.reason) for t in expected]
    after = {n: {fr: v for fr, v in node.usage.items() if v} for n, node in engine.tree.teams.items()}
    assert after == before, "the search must leave the snapshot as it found it"
    assert sorted(w for team in engine.workloads.values() for w in team) == sorted(w.name for w in running)


@SETTINGS
@given(data=st.data())
def test_a_search_for_the_contested_resource_alone_answers_for_all_when_the_rest_has_room(
    data: st.DataObject,
) -> None:
    """The nomination reuses the flavor assigner's one-resource search when `search_covers` says so."""
    config = data.draw(st.one_of(quota_configs(), fair_trees()))
    seed = data.draw(workloads(config, data.draw(st.integers(0, 8))))
    seed += data.draw(workloads(config, data.draw(st.integers(2, 30)), small=True, prefix="s"))
    running = drive(config, seed, cycles=3).running()
    for shape in data.draw(workloads(config, 2)):
        for team in config.teams:
            preemptor = replace(shape, name="preemptor", team=team.name, priority=data.draw(st.sampled_from([0, 10])))
            snapshot = Snapshot.build(config, running)
            usage = plausible_usage(snapshot, preemptor)
            if len(usage) < 2:
                continue
            node = snapshot.team(team.name)
            fr = data.draw(st.sampled_from(sorted(usage)))
            if not search_covers(snapshot.tree, node, usage, fr):
                continue
            alone = find_targets(snapshot, PreemptionRequest(preemptor, node, {fr: usage[fr]}, frozenset({fr})))
            whole = find_targets(snapshot, PreemptionRequest(preemptor, node, usage, frozenset({fr})))
            assert [(t.workload.name, t.reason) for t in whole] == [(t.workload.name, t.reason) for t in alone]
