"""The quota file: the version in force, validation and a dry-run diff of a proposed one, and applying it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime

from admin.api import Context, Router, runtime_of
from admin.auth import Access
from admin.models import (
    AffectedWorkload,
    ConfigApplyResult,
    ConfigCurrent,
    ConfigDiff,
    ConfigProblemView,
    ConfigProposal,
    ConfigValidation,
    Quantity,
    QuotaChange,
    WhatIfComparison,
    WhatIfWindow,
)
from admin.parsing import PARSER_KEY, WHATIF_KEY
from admin.ports import RuntimePort
from admin.problems import ApiProblem
from admin.routes_workloads import audit
from admission.workload import Workload
from queues.read_model import ControllerReader
from quota.config import QuotaConfig
from quota.loader import ConfigError
from quota.quantity import format_resource
from quota.tree import Node, QuotaTree

router = Router()


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@router.add("GET", "/api/v1/config", summary="The quota file in force", response=ConfigCurrent, tag="config")
async def current(ctx: Context) -> ConfigCurrent:
    runtime = runtime_of(ctx)
    path = runtime.config_path
    return ConfigCurrent(
        sha256=sha256(runtime.config_text),
        source=str(path) if path is not None else None,
        text=runtime.config_text,
        teams=[t.name for t in runtime.config.teams],
        cohorts=[c.name for c in runtime.config.cohorts],
    )


async def _parse_off_loop(ctx: Context, text: str) -> tuple[QuotaConfig | None, list[ConfigProblemView]]:
    """Parse a proposal in the parser's worker process (admin/parsing.py): never on this event loop."""
    config, problems = await ctx.app[PARSER_KEY].parse(text)
    return config, [ConfigProblemView(path=path, line=line, message=message) for path, line, message in problems]


@router.add(
    "POST",
    "/api/v1/config/validate",
    summary="Validate a proposed quota file",
    response=ConfigValidation,
    body=ConfigProposal,
    tag="config",
)
async def validate(ctx: Context) -> ConfigValidation:
    config, problems = await _parse_off_loop(ctx, ctx.body.text)
    return ConfigValidation(valid=config is not None, problems=problems)


@router.add(
    "POST",
    "/api/v1/config/diff",
    summary="Dry run: what a proposed quota file would change and affect",
    response=ConfigDiff,
    body=ConfigProposal,
    tag="config",
    statuses=(409, 503),
)
async def diff(ctx: Context) -> ConfigDiff:
    runtime = runtime_of(ctx)
    result = _diff(runtime, await _parse_off_loop(ctx, ctx.body.text))
    window = ctx.body.whatif
    if window is not None and result.valid:
        result.whatif = await _whatif(ctx, runtime, window)
    return result


async def _whatif(ctx: Context, runtime: RuntimePort, window: WhatIfWindow) -> WhatIfComparison:
    """The proposal replayed against the ledger's history of the window, in the what-if worker process."""
    start, end = (_utc(moment) for moment in (window.start, window.end))
    if start >= end:
        raise ApiProblem(422, f"whatif: from ({start.isoformat()}) must be before to ({end.isoformat()})")
    function = runtime.whatif
    if runtime.ledger is None or function is None:
        raise ApiProblem(409, "whatif needs the ledger: this process runs without --database-url")
    answer = await ctx.app[WHATIF_KEY].compare(
        function, runtime.ledger.url, ctx.body.text, start.isoformat(), end.isoformat(), runtime.config_text
    )
    teams = [{"team": team, **sides} for team, sides in answer.pop("teams").items()]
    budgets = [{"owner": owner, **sides} for owner, sides in answer.pop("budgets", {}).items()]
    answer["start"], answer["end"] = answer.pop("from"), answer.pop("to")
    return WhatIfComparison.model_validate({**answer, "teams": teams, "budgets": budgets})


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.utcoffset() is None else moment.astimezone(UTC)


@router.add(
    "POST",
    "/api/v1/config/apply",
    summary="Apply a new quota file",
    access=Access.ADMIN,
    response=ConfigApplyResult,
    body=ConfigProposal,
    tag="config",
    statuses=(409, 503),
)
async def apply(ctx: Context) -> ConfigApplyResult:
    runtime = runtime_of(ctx)
    if runtime.controller is not None and not runtime.leader:
        raise ApiProblem(503, "this replica is not the leader; apply the quota file on the leader")
    text = ctx.body.text
    parsed = await _parse_off_loop(ctx, text)
    result = _diff(runtime, parsed)
    if not result.valid:
        raise ApiProblem(
            422,
            "the quota file is invalid: "
            + "; ".join(f"{p.path or '(top level)'}: {p.message}" for p in result.problems[:5]),
            [p.model_dump() for p in result.problems],
        )
    before = sha256(runtime.config_text)
    try:
        runtime.apply_config(text, f"admin API ({ctx.principal.name})", parsed[0])
    except ConfigError as exc:
        raise ApiProblem(422, exc.render()) from None
    except ValueError as exc:
        raise ApiProblem(409, f"refused, the old quota file stays in force: {exc}") from None
    after = sha256(text)
    audit(runtime, ctx.principal.name, "apply-config", "quota-config", {"sha256": before}, {"sha256": after})
    return ConfigApplyResult(applied=True, sha256=after, diff=result)


def _diff(runtime: RuntimePort, parsed: tuple[QuotaConfig | None, list[ConfigProblemView]]) -> ConfigDiff:
    """What the parsed proposal would change: computed on the event loop, which owns the controller's state."""
    new, problems = parsed
    old = runtime.config
    if new is None:
        return ConfigDiff(
            valid=False,
            problems=problems,
            added_teams=[],
            removed_teams=[],
            added_cohorts=[],
            removed_cohorts=[],
            changes=[],
            affected=[],
            would_apply=False,
        )
    old_tree, new_tree = QuotaTree.from_config(old), QuotaTree.from_config(new)
    old_teams, new_teams = {t.name for t in old.teams}, {t.name for t in new.teams}
    old_cohorts, new_cohorts = {c.name for c in old.cohorts}, {c.name for c in new.cohorts}
    changes = [
        *_changes(old_tree.cohorts, new_tree.cohorts),
        *_changes(old_tree.teams, new_tree.teams),
    ]
    affected = _affected(runtime.controller, new_tree, new_teams)
    return ConfigDiff(
        valid=True,
        problems=[],
        added_teams=sorted(new_teams - old_teams),
        removed_teams=sorted(old_teams - new_teams),
        added_cohorts=sorted(new_cohorts - old_cohorts),
        removed_cohorts=sorted(old_cohorts - new_cohorts),
        changes=changes,
        affected=affected,
        would_apply=not any(a.effect.startswith("team removed") for a in affected),
    )


def _changes(old: dict[str, Node], new: dict[str, Node]) -> Iterable[QuotaChange]:
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        keys = set(a.quotas if a else {}) | set(b.quotas if b else {})
        for fr in sorted(keys):
            la, lb = (a.quotas.get(fr) if a else None), (b.quotas.get(fr) if b else None)
            for field, attr in (
                ("nominal", "nominal"),
                ("borrowingLimit", "borrowing_limit"),
                ("lendingLimit", "lending_limit"),
            ):
                va = getattr(la, attr) if la is not None else None
                vb = getattr(lb, attr) if lb is not None else None
                if va != vb:
                    yield QuotaChange(
                        node=name,
                        flavor=fr[0],
                        resource=fr[1],
                        field=field,
                        old=None if va is None else Quantity.of(fr[1], va),
                        new=None if vb is None else Quantity.of(fr[1], vb),
                    )


def _affected(controller: ControllerReader | None, tree: QuotaTree, teams: set[str]) -> list[AffectedWorkload]:
    if controller is None:
        return []
    manager = controller.manager
    out: list[AffectedWorkload] = []
    usage_by_team: dict[str, dict[tuple[str, str], int]] = {}
    for name, usage in manager.usage.items():
        team = manager.workloads[name].team
        bucket = usage_by_team.setdefault(team, {})
        for fr, v in usage.items():
            bucket[fr] = bucket.get(fr, 0) + v
    for name, workload in sorted(manager.workloads.items()):
        state = str(manager.state[name])
        if state == "finished":
            continue
        if workload.team not in teams:
            out.append(
                AffectedWorkload(
                    workload=name,
                    team=workload.team,
                    state=state,
                    effect="team removed while it has work: the new file would be refused",
                )
            )
            continue
        node = tree.teams[workload.team]
        if state in ("admitted", "evicting"):
            for fr in sorted(manager.usage.get(name, {})):
                team_used = usage_by_team[workload.team].get(fr, 0)
                maximum = tree.potential_available(node, fr)
                if team_used > maximum:
                    out.append(
                        AffectedWorkload(
                            workload=name,
                            team=workload.team,
                            state=state,
                            effect=f"runs above the team's new maximum: {workload.team} uses "
                            f"{format_resource(fr[1], team_used)} of {fr[0]}/{fr[1]}, the new maximum is "
                            f"{format_resource(fr[1], maximum)}",
                        )
                    )
                    break
        elif state == "pending":
            effect = _never_fits(tree, node, workload)
            if effect:
                out.append(AffectedWorkload(workload=name, team=workload.team, state="pending", effect=effect))
    return out


def _never_fits(tree: QuotaTree, node: Node, workload: Workload) -> str | None:
    """A pending workload whose smallest acceptable request exceeds what any flavor could ever give its team."""
    needed: dict[str, int] = {}
    for ps in workload.pod_sets:
        count = ps.min_count or ps.count
        for resource, quantity in ps.requests.items():
            needed[resource] = needed.get(resource, 0) + quantity * count
    for resource, amount in sorted(needed.items()):
        if amount == 0:
            continue
        flavors = {f for (f, r) in node.quotas if r == resource}
        best = max((tree.potential_available(node, (f, resource)) for f in flavors), default=0)
        if amount > best:
            return (
                f"could never fit: needs {format_resource(resource, amount)} of {resource}, "
                f"the most any flavor could give {node.name} is {format_resource(resource, best)}"
            )
    return None
