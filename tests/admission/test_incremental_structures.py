"""The structures the engine keeps between picks and between cycles against a plain recomputation.

* The fair-sharing order keeps its tournament between picks (a heap per cohort, one candidate refreshed per level
  after each pick); the reference here replays the whole tournament after every pick, as the engine once did.
* A node's DRS is kept on the node until its usage moves; the reference recounts a fresh tree from the live work.
  A share with a head's usage counted without charging it (`share_with`) against charging it and asking.
* A cohort's index of children above their quota (`over`, read by every classical preemption search) against
  asking every child, through starts and stops and in copies.
* A snapshot's tree with workloads' usage taken off it summed per team (`usage_without`) against removing the
  workloads one by one (`without`).

Random trees up to four levels deep with lending and borrowing limits, weights (0 included) and fair-share
factors; random running work; random heads; and after every pick a random charge (all of the head's usage, part
of it, or nothing), as the cycle charges admissions, reservations and skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.flavors import Assignment
from admission.ordering import Entry, classical_key, order_heads
from admission.snapshot import Snapshot
from admission.workload import Admission, Workload
from quota.config import QuotaConfig
from quota.loader import load_config_data
from quota.pod_set import PodSet
from quota.tree import FlavorResource, Node, QuotaTree

SETTINGS = settings(
    max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
RESOURCES = ("nvidia.com/gpu", "cpu")
FR: list[FlavorResource] = [("f", r) for r in RESOURCES]


@st.composite
def trees(draw: st.DrawFn) -> QuotaConfig:
    """A forest: cohorts up to three levels (so teams sit up to four deep), teams under any cohort or alone."""
    cohorts: list[dict[str, Any]] = []
    depth: dict[str, int] = {}
    for index in range(draw(st.integers(0, 6))):
        name = f"c{index}"
        cohort: dict[str, Any] = {"name": name, "fairSharing": {"weight": draw(st.sampled_from([0, 1, 1, 2, 3]))}}
        parents = [c["name"] for c in cohorts if depth[c["name"]] < 3]
        if parents and draw(st.booleans()):
            cohort["parent"] = draw(st.sampled_from(parents))
        depth[name] = depth[cohort["parent"]] + 1 if "parent" in cohort else 1
        if draw(st.integers(0, 3)) == 0:
            cohort["quotas"] = [{"flavor": "f", "resources": {RESOURCES[0]: _limits(draw, "parent" in cohort)}}]
        cohorts.append(cohort)
    teams = []
    for index in range(draw(st.integers(1, 12))):
        team: dict[str, Any] = {
            "name": f"t{index}",
            "queues": [f"ns{index}/q"],
            "fairSharing": {"weight": draw(st.sampled_from([0, 1, 1, 2]))},
        }
        if cohorts and draw(st.integers(0, 5)):
            team["parent"] = draw(st.sampled_from([c["name"] for c in cohorts]))
        team["quotas"] = [{"flavor": "f", "resources": {r: _limits(draw, "parent" in team) for r in RESOURCES}}]
        teams.append(team)
    body = {"flavors": [{"name": "f"}], "fairSharing": {"enabled": True}, "cohorts": cohorts, "teams": teams}
    return load_config_data(body)


def _limits(draw: st.DrawFn, has_parent: bool) -> dict[str, int]:
    nominal = draw(st.integers(0, 8))
    limits = {"nominal": nominal}
    if has_parent and draw(st.booleans()):
        limits["borrowingLimit"] = draw(st.integers(0, 8))
    if has_parent and draw(st.booleans()):
        limits["lendingLimit"] = draw(st.integers(0, nominal))
    return limits


# -- the fair order -----------------------------------------------------------------------------------------------


def _tiebreak(entry: Entry) -> tuple[int, int, str]:
    w = entry.workload
    return (-w.priority, w.created_at, w.name)


def replayed_order(snapshot: Snapshot, entries: Sequence[Entry]) -> Iterator[Entry]:
    """The reference: every cohort's tournament played again from scratch for the picked root after each pick."""
    by_root: dict[int, dict[str, Entry]] = {}
    roots: dict[int, Node] = {}
    for entry in entries:
        root = entry.team.root()
        roots[id(root)] = root
        by_root.setdefault(id(root), {})[entry.workload.name] = entry
    winners: dict[int, Entry] = {}
    while by_root:
        for key in by_root:
            if key not in winners:
                winners[key] = _tournament(snapshot, roots[key], by_root[key])
        key = min(winners, key=lambda k: (winners[k].assignment.borrowing, *_tiebreak(winners[k])))
        winner = winners.pop(key)
        del by_root[key][winner.workload.name]
        if not by_root[key]:
            del by_root[key]
        yield winner


def _tournament(snapshot: Snapshot, root: Node, entries: dict[str, Entry]) -> Entry:
    if root.is_team:
        return next(iter(entries.values()))
    keys: dict[tuple[str, str], tuple[bool, tuple[int, Fraction]]] = {}
    by_team: dict[str, Entry] = {}
    for entry in entries.values():
        by_team[entry.team.name] = entry
        with snapshot.with_usage(entry.team, entry.assignment.usage):
            node = entry.team
            for ancestor in entry.team.ancestors():
                factor = snapshot.factor(node.name) if node.is_team else None
                share = snapshot.tree.dominant_resource_share(node, factor=factor)
                keys[(ancestor.name, entry.workload.name)] = (share.borrowing, share.sort_key)
                node = ancestor
    winner = _play(root, by_team, keys)
    assert winner is not None
    return winner


def _play(
    cohort: Node, by_team: dict[str, Entry], keys: dict[tuple[str, str], tuple[bool, tuple[int, Fraction]]]
) -> Entry | None:
    candidates = [e for child in cohort.child_cohorts if (e := _play(child, by_team, keys)) is not None]
    candidates += [by_team[t.name] for t in cohort.child_teams if t.name in by_team]
    if not candidates:
        return None
    return min(candidates, key=lambda e: (keys[(cohort.name, e.workload.name)], *_tiebreak(e)))


def _snapshot(
    config: QuotaConfig, running: dict[str, dict[FlavorResource, int]], factors: dict[str, Fraction]
) -> Snapshot:
    snapshot = Snapshot.build(config, (), factors)
    for team, usage in running.items():
        snapshot.tree.add_all(snapshot.tree.teams[team], usage)
    return snapshot


@SETTINGS
@given(data=st.data())
def test_the_kept_tournament_picks_as_the_replayed_one(data: st.DataObject) -> None:
    config = data.draw(trees())
    names = [t.name for t in config.teams]
    running = {name: _usage_of(data, 6) for name in names}
    factors = {name: Fraction(data.draw(st.integers(1, 8)), 4) for name in names if data.draw(st.booleans())}
    heads = data.draw(st.lists(st.sampled_from(names), unique=True, min_size=1))
    specs = [
        (
            team,
            data.draw(st.integers(0, 2)),
            data.draw(st.integers(0, 3)),
            _usage_of(data, 4),
            data.draw(st.integers(0, 2)),
        )
        for team in heads
    ]
    charges = data.draw(st.lists(st.sampled_from(["all", "half", "none"]), min_size=len(heads), max_size=len(heads)))

    def picks(order: str) -> list[str]:
        snapshot = _snapshot(config, running, factors)
        entries = [_entry(snapshot, index, *spec) for index, spec in enumerate(specs)]
        iterator = order_heads(snapshot, entries) if order == "kept" else replayed_order(snapshot, entries)
        picked = []
        for entry, charge in zip(iterator, charges, strict=True):
            picked.append(entry.workload.name)
            if charge == "all":
                snapshot.charge(entry.team, entry.assignment.usage)
            elif charge == "half":
                snapshot.charge(entry.team, {fr: v // 2 for fr, v in entry.assignment.usage.items()})
        return picked

    assert picks("kept") == picks("replayed")


@SETTINGS
@given(data=st.data())
def test_the_classical_order_reads_factors_only_for_ties_and_sorts_by_the_whole_key(data: st.DataObject) -> None:
    config = data.draw(trees())
    names = [t.name for t in config.teams]
    factors = {name: Fraction(data.draw(st.integers(0, 8)), 4) for name in names if data.draw(st.booleans())}
    heads = data.draw(st.lists(st.sampled_from(names), min_size=0, max_size=8))
    snapshot = Snapshot.build(config, (), factors)
    snapshot.fair_sharing = False
    entries = [
        _entry(
            snapshot,
            i,
            team,
            data.draw(st.integers(0, 2)),
            data.draw(st.integers(0, 3)),
            {},
            data.draw(st.integers(0, 2)),
        )
        for i, team in enumerate(heads)
    ]
    read: list[str] = []

    class Watched(dict[str, Fraction]):
        def get(self, key: str, default: object = None) -> Any:
            read.append(key)
            return super().get(key, default)

    snapshot.factors = Watched(factors)
    ordered = [e.workload.name for e in order_heads(snapshot, entries)]
    read_by_order = set(read)
    assert ordered == [e.workload.name for e in sorted(entries, key=lambda e: classical_key(snapshot, e))]
    tied = {
        e.workload.team
        for e in entries
        if sum(
            (o.assignment.borrowing, o.workload.priority) == (e.assignment.borrowing, e.workload.priority)
            for o in entries
        )
        > 1
    }
    assert read_by_order <= tied


def _usage_of(data: st.DataObject, most: int) -> dict[FlavorResource, int]:
    return {fr: data.draw(st.integers(0, most)) * 1000 for fr in FR if data.draw(st.booleans())}


def _start_or_stop(
    data: st.DataObject, tree: QuotaTree, live: dict[int, tuple[str, dict[FlavorResource, int]]], step: int, most: int
) -> None:
    """Stop one of the `live` workloads, or start a new one (as `step`) with up to `most` of each resource."""
    if live and data.draw(st.booleans()):
        team, usage = live.pop(data.draw(st.sampled_from(sorted(live))))
        tree.remove_all(tree.teams[team], usage)
    else:
        team = data.draw(st.sampled_from(sorted(tree.teams)))
        usage = _usage_of(data, most)
        live[step] = (team, usage)
        tree.add_all(tree.teams[team], usage)


def _entry(
    snapshot: Snapshot,
    index: int,
    team: str,
    priority: int,
    created: int,
    usage: dict[FlavorResource, int],
    borrow: int,
) -> Entry:
    workload = Workload(f"w{index}", team, priority, (PodSet("main", 1, {}),), created_at=created)
    return Entry(workload, snapshot.team(team), Assignment(usage=dict(usage), borrowing=borrow))


# -- DRS kept on the nodes ----------------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_kept_shares_equal_a_recount_through_starts_and_stops(data: st.DataObject) -> None:
    config = data.draw(trees())
    tree = QuotaTree.from_config(config)
    live: dict[int, tuple[str, dict[FlavorResource, int]]] = {}
    nodes = [*tree.cohorts, *tree.teams]
    for step in range(data.draw(st.integers(1, 30))):
        _start_or_stop(data, tree, live, step, most=5)
        recount = QuotaTree.from_config(config)
        for team, usage in live.values():
            recount.add_all(recount.teams[team], usage)
        for name in data.draw(st.lists(st.sampled_from(nodes), max_size=4)):
            factor = data.draw(st.one_of(st.none(), st.builds(Fraction, st.integers(1, 8), st.just(4))))
            node = tree.cohorts.get(name) or tree.teams[name]
            fresh = recount.cohorts.get(name) or recount.teams[name]
            assert tree.dominant_resource_share(node, factor=factor) == recount.dominant_resource_share(
                fresh, factor=factor
            )
        # A share with a head's usage counted as charged, without charging it, against charging it.
        team = tree.teams[data.draw(st.sampled_from(sorted(tree.teams)))]
        extra = _usage_of(data, 5)
        for node in [team, *team.ancestors()]:
            tree.add_all(team, extra)
            expected = tree.dominant_resource_share(node)
            tree.remove_all(team, extra)
            assert tree.share_with(node, team, extra) == expected
        # A copy (a cycle's snapshot) starts from the same kept shares and keeps its own from then on.
        copy = tree.copy()
        for name, node in copy.teams.items():
            assert copy.dominant_resource_share(node) == recount.dominant_resource_share(recount.teams[name])
        charged = data.draw(st.sampled_from(sorted(copy.teams)))
        copy.add_all(copy.teams[charged], {FR[0]: 1000})
        for name, node in tree.teams.items():
            assert tree.dominant_resource_share(node) == recount.dominant_resource_share(recount.teams[name])


# -- children above their quota, kept on the cohorts --------------------------------------------------------------


def _children_over_by_asking(cohort: Node, frs: Sequence[FlavorResource]) -> list[Node]:
    return [c for c in (*cohort.child_cohorts, *cohort.child_teams) if not c.within_nominal(frs)]


def _assert_index_true(tree: QuotaTree) -> None:
    for cohort in tree.cohorts.values():
        for fr in FR:
            asked = {c for c in (*cohort.child_cohorts, *cohort.child_teams) if not c.within_nominal([fr])}
            assert set(cohort.over.get(fr, {})) == asked, (cohort, fr)
        for frs in ([FR[0]], [FR[1]], FR, []):
            assert cohort.children_over(frs) == _children_over_by_asking(cohort, frs)
    for team in tree.teams.values():
        assert not team.over


@SETTINGS
@given(data=st.data())
def test_the_index_of_children_above_quota_equals_asking_every_child(data: st.DataObject) -> None:
    config = data.draw(trees())
    tree = QuotaTree.from_config(config)
    live: dict[int, tuple[str, dict[FlavorResource, int]]] = {}
    for step in range(data.draw(st.integers(1, 30))):
        _start_or_stop(data, tree, live, step, most=9)
        _assert_index_true(tree)
        if data.draw(st.booleans()):
            # A cycle's snapshot: its own index over its own nodes, which its charges move and the original's don't.
            copy = tree.copy()
            _assert_index_true(copy)
            for node in copy.nodes():
                for kids in node.over.values():
                    assert all(copy.teams.get(k.name, copy.cohorts.get(k.name)) is k for k in kids)
            copy.add_all(copy.teams[data.draw(st.sampled_from(sorted(copy.teams)))], {FR[0]: 9000})
            _assert_index_true(copy)
            _assert_index_true(tree)


# -- usage taken off summed per team ------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_usage_taken_off_per_team_leaves_the_tree_as_removing_each_workload(data: st.DataObject) -> None:
    config = data.draw(trees())
    running = []
    for index in range(data.draw(st.integers(1, 12))):
        gpus, cpus = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))
        pod_set = PodSet("main", 1, {RESOURCES[0]: gpus * 1000, RESOURCES[1]: cpus * 1000})
        admission = Admission({"main": {r: "f" for r in RESOURCES}}, {"main": 1})
        team = data.draw(st.sampled_from([t.name for t in config.teams]))
        running.append(Workload(f"r{index}", team, 0, (pod_set,), admission=admission))
    snapshot = Snapshot.build(config, running)
    before = {node.name: dict(node.usage) for node in snapshot.tree.nodes()}
    # Repeats included: the same victim may be named twice.
    gone = data.draw(st.lists(st.sampled_from(running), max_size=15))
    with snapshot.without(gone):
        removed_one_by_one = {node.name: dict(node.usage) for node in snapshot.tree.nodes()}
        assert not any(snapshot.contains(w) for w in gone)
    assert {node.name: dict(node.usage) for node in snapshot.tree.nodes()} == before
    assert all(snapshot.contains(w) for w in running)
    with snapshot.usage_without(gone):
        assert {node.name: dict(node.usage) for node in snapshot.tree.nodes()} == removed_one_by_one
        assert all(snapshot.contains(w) for w in running)
    assert {node.name: dict(node.usage) for node in snapshot.tree.nodes()} == before
