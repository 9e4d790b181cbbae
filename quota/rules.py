"""Rules of the team-quota file that span several objects.

Each rule yields (path, message) pairs instead of raising, so `kuota validate` can show every problem at once.
Paths are tuples of keys and indexes in the YAML's own spelling, turned into text by quota.errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from quota.config import BorrowPolicy, QuotaConfig, ResourceGroup, Team, _QuotaHolder

Path = tuple[str | int, ...]
Problem = tuple[Path, str]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


def is_resource_name(name: str) -> bool:
    """A Kubernetes resource name: `cpu`, `memory`, `nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`…"""
    prefix, _, local = name.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(local) <= 63 and bool(_QUALIFIED_NAME.match(local))


def split_queue(queue: str) -> tuple[str, str] | None:
    """`NAMESPACE/NAME` into its parts, or None when it is not of that form."""
    namespace, sep, name = queue.partition("/")
    if not sep or not is_dns_label(namespace) or not (len(name) <= 253 and _DNS_SUBDOMAIN.match(name)):
        return None
    return namespace, name


def check(config: QuotaConfig) -> list[Problem]:
    return [
        *_names(config),
        *_priority_classes(config),
        *_tree(config),
        *_queues(config),
        *_namespaces(config),
        *_quotas(config),
        *_fair_sharing(config),
        *_budgets(config),
        *_topologies(config),
    ]


def _unique(kind: str, section: str, names: list[str]) -> Iterator[Problem]:
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if not is_dns_label(name):
            yield (section, index, "name"), f"{kind} name {name!r} is not a DNS-1123 label (lowercase a-z, 0-9, '-')"
        if name in seen:
            yield (section, index, "name"), f"{kind} {name!r} is declared twice (first at {section}[{seen[name]}])"
        else:
            seen[name] = index


def _names(config: QuotaConfig) -> Iterator[Problem]:
    yield from _unique("flavor", "flavors", [f.name for f in config.flavors])
    yield from _unique("priority class", "priorityClasses", [p.name for p in config.priority_classes])
    yield from _unique("cohort", "cohorts", [c.name for c in config.cohorts])
    yield from _unique("team", "teams", [t.name for t in config.teams])


def _priority_classes(config: QuotaConfig) -> Iterator[Problem]:
    defaults = [i for i, pc in enumerate(config.priority_classes) if pc.default]
    for index in defaults[1:]:
        yield (
            ("priorityClasses", index, "default"),
            f"only one priority class may be the default (priorityClasses[{defaults[0]}] already is)",
        )


def _tree(config: QuotaConfig) -> Iterator[Problem]:
    cohorts = {c.name: c for c in config.cohorts}
    for section, holders in (("cohorts", config.cohorts), ("teams", config.teams)):
        for index, holder in enumerate(holders):
            if holder.parent is not None and holder.parent not in cohorts:
                yield (section, index, "parent"), f"parent {holder.parent!r} is not a declared cohort"
    # A cycle can only run through cohorts; report it once, at its first cohort in file order.
    reported: set[str] = set()
    for index, cohort in enumerate(config.cohorts):
        path: list[str] = []
        node: str | None = cohort.name
        while node is not None and node in cohorts and node not in path:
            path.append(node)
            node = cohorts[node].parent
        if node is not None and node in path and node == cohort.name and not reported & set(path):
            reported.update(path)
            cycle = " -> ".join([*path, node])
            yield ("cohorts", index, "parent"), f"cohort parents form a cycle: {cycle}"


def _queues(config: QuotaConfig) -> Iterator[Problem]:
    owner: dict[str, str] = {}
    for t_index, team in enumerate(config.teams):
        for q_index, queue in enumerate(team.queues):
            path: Path = ("teams", t_index, "queues", q_index)
            if split_queue(queue) is None:
                yield path, f"queue {queue!r} is not NAMESPACE/NAME (DNS-1123 names, e.g. nlp/default)"
            if queue in owner:
                yield path, f"queue {queue!r} already belongs to team {owner[queue]!r}; a queue has one team"
            else:
                owner[queue] = team.name


def _namespaces(config: QuotaConfig) -> Iterator[Problem]:
    queues = {q for team in config.teams for q in team.queues}
    seen: set[str] = set()
    for index, ns in enumerate(config.namespaces):
        if not is_dns_label(ns.name):
            yield ("namespaces", index, "name"), f"namespace {ns.name!r} is not a DNS-1123 label"
        if ns.name in seen:
            yield ("namespaces", index, "name"), f"namespace {ns.name!r} is declared twice"
        seen.add(ns.name)
        if ns.default_queue is not None:
            full = ns.default_queue if "/" in ns.default_queue else f"{ns.name}/{ns.default_queue}"
            if not full.startswith(f"{ns.name}/"):
                yield (
                    ("namespaces", index, "defaultQueue"),
                    f"default queue {ns.default_queue!r} is not in namespace {ns.name!r}",
                )
            elif full not in queues:
                yield (
                    ("namespaces", index, "defaultQueue"),
                    f"default queue {full!r} is not a queue of any team",
                )


def _quotas(config: QuotaConfig) -> Iterator[Problem]:
    flavors = {f.name for f in config.flavors}
    for section, holders in (("cohorts", config.cohorts), ("teams", config.teams)):
        for index, holder in enumerate(holders):
            yield from _holder_quotas(holder, (section, index), flavors)
            if isinstance(holder, Team):
                yield from _team_policies(holder, (section, index))


def _holder_quotas(holder: _QuotaHolder, base: Path, flavors: set[str]) -> Iterator[Problem]:
    if holder.resource_groups is not None:
        groups: list[tuple[Path, ResourceGroup]] = [
            ((*base, "resourceGroups", g), group) for g, group in enumerate(holder.resource_groups)
        ]
        flavor_key = "flavors"
    else:
        groups = [(base, group) for group in holder.groups()]
        flavor_key = "quotas"
    covered_by: dict[str, int] = {}
    flavor_group: dict[str, int] = {}
    for g_index, (g_path, group) in enumerate(groups):
        for r_index, resource in enumerate(group.covered_resources):
            if not is_resource_name(resource):
                yield (*g_path, "coveredResources", r_index), f"{resource!r} is not a resource name"
            if resource in covered_by and covered_by[resource] != g_index:
                yield (
                    (*g_path, "coveredResources", r_index),
                    f"resource {resource!r} is covered by two resource groups; each resource belongs to one",
                )
            covered_by.setdefault(resource, g_index)
        for f_index, entry in enumerate(group.flavors):
            f_path: Path = (*g_path, flavor_key, f_index)
            if entry.flavor not in flavors:
                yield (*f_path, "flavor"), f"flavor {entry.flavor!r} is not declared under flavors"
            if flavor_group.get(entry.flavor) == g_index:
                yield (*f_path, "flavor"), f"flavor {entry.flavor!r} is listed twice in this resource group"
            flavor_group.setdefault(entry.flavor, g_index)
            if set(entry.resources) != set(group.covered_resources):
                missing = sorted(set(group.covered_resources) - set(entry.resources))
                extra = sorted(set(entry.resources) - set(group.covered_resources))
                detail = "; ".join(
                    part
                    for part in (
                        f"missing {', '.join(missing)}" if missing else "",
                        f"not covered by the group: {', '.join(extra)}" if extra else "",
                    )
                    if part
                )
                yield (*f_path, "resources"), f"a flavor entry must cover exactly the group's resources ({detail})"
            for resource, quota in entry.resources.items():
                r_path: Path = (*f_path, "resources", resource)
                if not is_resource_name(resource):
                    yield r_path, f"{resource!r} is not a resource name"
                if holder.parent is None:
                    if quota.borrowing_limit is not None:
                        yield (*r_path, "borrowingLimit"), "borrowingLimit needs a parent cohort to borrow from"
                    if quota.lending_limit is not None:
                        yield (*r_path, "lendingLimit"), "lendingLimit needs a parent cohort to lend to"
                if quota.lending_limit is not None and quota.lending_limit > quota.nominal:
                    yield (*r_path, "lendingLimit"), "lendingLimit may not exceed nominal"


def _team_policies(team: Team, base: Path) -> Iterator[Problem]:
    borrow = team.preemption.borrow_within_cohort
    if borrow.policy == BorrowPolicy.NEVER and borrow.max_priority_threshold is not None:
        yield (
            (*base, "preemption", "borrowWithinCohort", "maxPriorityThreshold"),
            "maxPriorityThreshold only applies with policy LowerPriority",
        )


def _fair_sharing(config: QuotaConfig) -> Iterator[Problem]:
    for resource in config.fair_sharing.resource_weights:
        if not is_resource_name(resource):
            yield ("fairSharing", "resourceWeights", resource), f"{resource!r} is not a resource name"


def _budgets(config: QuotaConfig) -> Iterator[Problem]:
    """Budget resources are resource names, and one holder has one budget per resource and window."""
    for section, holders in (("cohorts", config.cohorts), ("teams", config.teams)):
        for index, holder in enumerate(holders):
            seen: dict[tuple[str, str], int] = {}
            for b_index, budget in enumerate(holder.budgets):
                for resource in budget.resources:
                    path: Path = (section, index, "budgets", b_index, "resources", resource)
                    if not is_resource_name(resource):
                        yield path, f"{resource!r} is not a resource name"
                    key = (resource, budget.window_name)
                    if key in seen:
                        yield (
                            path,
                            (
                                f"{resource} already has a {budget.window_name} budget here (budgets[{seen[key]}]); "
                                "one budget per resource and window"
                            ),
                        )
                    else:
                        seen[key] = b_index


def is_label_key(key: str) -> bool:
    """A Kubernetes label key: an optional DNS-subdomain prefix and a name (`topology.kuota.dev/rack`)."""
    return is_resource_name(key)


def _topologies(config: QuotaConfig) -> Iterator[Problem]:
    yield from _unique("topology", "topologies", [t.name for t in config.topologies])
    for index, topology in enumerate(config.topologies):
        base: Path = ("topologies", index, "levels")
        if not topology.levels:
            yield base, "a topology needs at least one level (a node label such as kubernetes.io/hostname)"
        seen: dict[str, int] = {}
        for l_index, level in enumerate(topology.levels):
            if not is_label_key(level):
                yield (*base, l_index), f"level {level!r} is not a node label key"
            if level in seen:
                yield (*base, l_index), f"level {level!r} is listed twice (first at levels[{seen[level]}])"
            seen.setdefault(level, l_index)
    names = {t.name for t in config.topologies}
    for index, flavor in enumerate(config.flavors):
        if flavor.topology is not None and flavor.topology not in names:
            yield ("flavors", index, "topology"), f"topology {flavor.topology!r} is not declared under topologies"
