"""The team-quota file: every rule of quota-config.md gives an error naming its path and line."""

from pathlib import Path

import pytest

from quota.config import BorrowPolicy, FungibilityPolicy, QueueingStrategy, ReclaimPolicy, WithinTeamPolicy
from quota.loader import ConfigError, load_config_file, load_config_text

SAMPLE = """\
apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors:
  - name: h100
    nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  - name: a100
priorityClasses:
  - {name: system-critical, value: 1000000, preemptible: false}
  - {name: production, value: 10000}
  - {name: research, value: 1000, default: true}
  - {name: development, value: 100, checkpointTimeout: 2m}
fairSharing:
  enabled: true
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
  usageHalfLife: 168h
  resourceWeights: {nvidia.com/gpu: 1, cpu: 0.01}
cohorts:
  - name: org
  - name: research
    parent: org
    quotas:
      - flavor: h100
        resources: {nvidia.com/gpu: {nominal: 8}}
    fairSharing: {weight: 1}
teams:
  - name: nlp
    parent: research
    queues: [nlp/default, nlp/urgent]
    queueingStrategy: BestEffortFIFO
    quotas:
      - flavor: h100
        resources:
          nvidia.com/gpu: {nominal: 32, borrowingLimit: 16, lendingLimit: 8}
          cpu:            {nominal: 512}
          memory:         {nominal: 4Ti}
      - flavor: a100
        resources:
          nvidia.com/gpu: {nominal: 16}
          cpu:            {nominal: 256}
          memory:         {nominal: 2Ti}
    preemption:
      withinTeam: LowerPriority
      reclaimWithinCohort: Any
      borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 1000}
    flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: TryNextFlavor,
                        preference: BorrowingOverPreemption}
    fairSharing: {weight: 2}
  - name: vision
    parent: research
    queues: [vision/default]
    resourceGroups:
      - coveredResources: [cpu, memory]
        flavors: [{flavor: a100, resources: {cpu: {nominal: 64}, memory: {nominal: 256Gi}}}]
      - coveredResources: [nvidia.com/gpu]
        flavors: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 8}}},
                  {flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
"""


def test_the_spec_example_loads() -> None:
    config = load_config_text(SAMPLE)
    nlp = config.teams[0]
    gpu = nlp.quotas[0].resources["nvidia.com/gpu"]  # type: ignore[index]
    assert (gpu.nominal, gpu.borrowing_limit, gpu.lending_limit) == (32_000, 16_000, 8_000)
    assert nlp.quotas[0].resources["memory"].nominal == 4 * 2**40 * 1000  # type: ignore[index]
    assert nlp.preemption.within_team is WithinTeamPolicy.LOWER_PRIORITY
    assert nlp.preemption.borrow_within_cohort.policy is BorrowPolicy.LOWER_PRIORITY
    assert config.priority_class("development").checkpoint_timeout == 120_000  # type: ignore[union-attr]
    assert config.default_priority_class().name == "research"  # type: ignore[union-attr]
    assert [g.covered_resources for g in config.teams[1].groups()] == [("cpu", "memory"), ("nvidia.com/gpu",)]


def test_defaults() -> None:
    config = load_config_text(
        "teams: [{name: t, queues: [ns/q], quotas: [{flavor: f, resources: {cpu: {nominal: 1}}}]}]\n"
        "flavors: [{name: f}]\n"
    )
    team = config.teams[0]
    assert team.preemption.within_team is WithinTeamPolicy.NEVER
    assert team.preemption.reclaim_within_cohort is ReclaimPolicy.NEVER
    assert team.preemption.borrow_within_cohort.policy is BorrowPolicy.NEVER
    assert team.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert team.flavor_fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
    assert team.flavor_fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    assert team.fair_sharing.weight == 1
    limits = team.quotas[0].resources["cpu"]  # type: ignore[index]
    assert limits.borrowing_limit is None and limits.lending_limit is None


def _errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, source="bad.yaml")
    return [p.render() for p in info.value.problems]


BASE = "flavors: [{name: f}]\ncohorts: [{name: c}]\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("teams: [{name: Bad_Name}]", "teams[0].name (line 3): team name 'Bad_Name' is not a DNS-1123 label"),
        ("teams: [{name: t}, {name: t}]", "teams[1].name (line 3): team 't' is declared twice"),
        ("teams: [{name: t, parent: nope}]", "teams[0].parent (line 3): parent 'nope' is not a declared cohort"),
        ("teams: [{name: t, queues: [noslash]}]", "teams[0].queues[0] (line 3): queue 'noslash' is not NAMESPACE/NAME"),
        (
            "teams: [{name: a, queues: [n/q]}, {name: b, queues: [n/q]}]",
            "teams[1].queues[0] (line 3): queue 'n/q' already belongs to team 'a'",
        ),
        (
            "teams: [{name: t, quotas: [{flavor: nope, resources: {cpu: {nominal: 1}}}]}]",
            "teams[0].quotas[0].flavor (line 3): flavor 'nope' is not declared under flavors",
        ),
        (
            "teams:\n  - name: t\n    quotas: [{flavor: f, resources: {cpu: {nominal: -1}}}]",
            "teams[0].quotas[0].resources.cpu.nominal (line 5): -1 is negative",
        ),
        (
            "teams:\n  - name: t\n    quotas: [{flavor: f, resources: {cpu: {nominal: 1x}}}]",
            "teams[0].quotas[0].resources.cpu.nominal (line 5): '1x' is not a Kubernetes quantity",
        ),
        (
            "teams: [{name: t, quotas: [{flavor: f, resources: {cpu: {nominal: 1, borrowingLimit: 1}}}]}]",
            "teams[0].quotas[0].resources.cpu.borrowingLimit (line 3): borrowingLimit needs a parent cohort",
        ),
        (
            "teams: [{name: t, parent: c, quotas: [{flavor: f, resources: {cpu: {nominal: 1, lendingLimit: 2}}}]}]",
            "teams[0].quotas[0].resources.cpu.lendingLimit (line 3): lendingLimit may not exceed nominal",
        ),
        (
            "teams: [{name: t, quotas: [{flavor: f, resources: {'bad resource': {nominal: 1}}}]}]",
            "is not a resource name",
        ),
        (
            "teams:\n  - name: t\n    resourceGroups:\n      - coveredResources: [cpu, memory]\n"
            "        flavors: [{flavor: f, resources: {cpu: {nominal: 1}}}]",
            "must cover exactly the group's resources (missing memory)",
        ),
        (
            "teams:\n  - name: t\n    resourceGroups:\n      - coveredResources: [cpu]\n"
            "        flavors: [{flavor: f, resources: {cpu: {nominal: 1}}}]\n"
            "      - coveredResources: [cpu]\n        flavors: [{flavor: f, resources: {cpu: {nominal: 1}}}]",
            "resource 'cpu' is covered by two resource groups",
        ),
        ("teams: [{name: t, bogus: 1}]", "teams[0].bogus (line 3): unknown field"),
        (
            "teams: [{name: t, preemption: {withinTeam: Sometimes}}]",
            "teams[0].preemption.withinTeam (line 3): Input should be 'Never', 'LowerPriority'",
        ),
        ("priorityClasses: [{name: a, value: 1, default: true}, {name: b, value: 2, default: true}]", "only one"),
        (
            # Accepted once, it stopped the controller at its first preemption (year 13434 is out of range).
            "priorityClasses:\n  - {name: a, value: 1, checkpointTimeout: 100000000h}",
            "priorityClasses[0].checkpointTimeout (line 4): '100000000h' is longer than 100 years",
        ),
        ("fairSharing: {usageHalfLife: 10000000000s}", "longer than 100 years, the longest duration kuota accepts"),
        # minRuntime: the bounds of checkpointTimeout, both spellings checked field by field.
        (
            "priorityClasses:\n  - {name: a, value: 1, minRuntime: 100000000h}",
            "priorityClasses[0].minRuntime.duration (line 4): '100000000h' is longer than 100 years",
        ),
        (
            "priorityClasses:\n  - name: a\n    value: 1\n    minRuntime: {duration: 1h, exceptReclaim: maybe}",
            "priorityClasses[0].minRuntime.exceptReclaim (line 6): Input should be a valid boolean",
        ),
        (
            "priorityClasses:\n  - {name: a, value: 1, minRuntime: {exceptReclaim: true}}",
            "priorityClasses[0].minRuntime.duration (line 4): Field required",
        ),
        (
            "priorityClasses:\n  - {name: a, value: 1, minRuntime: {duration: 1h, except: true}}",
            "priorityClasses[0].minRuntime.except (line 4): unknown field",
        ),
        (
            "priorityClasses:\n  - {name: a, value: 1, minRuntime: true}",
            "priorityClasses[0].minRuntime (line 4): True is not a duration",
        ),
        (
            "teams:\n  - name: t\n    minRuntime: 2 hours",
            "teams[0].minRuntime.duration (line 5): '2 hours' is not a duration",
        ),
        ("teams:\n  - name: t\n    minRuntime: -5", "teams[0].minRuntime.duration (line 5): -5 is negative"),
    ],
)
def test_rules(body: str, expected: str) -> None:
    rendered = _errors(BASE + body + "\n")
    assert any(expected in line for line in rendered), rendered


def test_cohort_cycle() -> None:
    rendered = _errors("cohorts: [{name: a, parent: b}, {name: b, parent: a}]\n")
    assert any("cycle: a -> b -> a" in line for line in rendered), rendered


def test_every_problem_is_reported_at_once() -> None:
    rendered = _errors(BASE + "teams: [{name: t, parent: x, queues: [bad]}, {name: t}]\n")
    assert len(rendered) == 3


def test_broken_yaml_and_missing_file(tmp_path: Path) -> None:
    assert "not valid YAML" in _errors("teams: [\n")[0]
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config_file(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config_text("- a\n- b\n")
