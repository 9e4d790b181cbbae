"""`kuota import-kueue`: real Kueue and knavigator manifests in, a valid team-quota file out."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from importers.kueue import (
    KUEUE_KINDS,
    KueueImportError,
    TemplateError,
    convert,
    flatten_documents,
    render_template,
    to_yaml,
)
from kuota.commands import import_kueue as command
from quota.config import QuotaConfig
from quota.loader import load_config_data
from quota.pod_set import TopologyRequest
from workloads.reading import convert as convert_job
from workloads.registry import REGISTRY

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"
MANIFESTS = SHARED / "data" / "manifests"
KUEUE = MANIFESTS / "kueue"
KNAVIGATOR = MANIFESTS / "nvidia-knavigator"
PREEMPTION_WORKFLOW = KNAVIGATOR / "resources__workflows__kueue__test-preemption.yaml"

#: Values for every placeholder of the knavigator templates, for converting them one file at a time.
KNAVIGATOR_SET = {
    "name": "team-a",
    "namespace": "team-a",
    "clusterQueue": "team-a",
    "cohort": "team-ab",
    "flavor": "gpu-node",
    "cpu": "8",
    "memory": "36Gi",
    "pods": "4",
    "gpu": "16",
    "nodeLabels.nvidia.com/gpu.count": "8",
}


def _kueue_objects(path: Path) -> list[Mapping[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except yaml.YAMLError:
        return []
    return [
        d
        for d in flatten_documents(docs)
        if isinstance(d, Mapping)
        and str(d.get("apiVersion", "")).startswith("kueue.x-k8s.io/")
        and d.get("kind") in KUEUE_KINDS
    ]


def _relevant_kueue_files() -> list[Path]:
    return sorted(p for p in KUEUE.glob("*.yaml") if _kueue_objects(p)) if KUEUE.is_dir() else []


RELEVANT = _relevant_kueue_files()


def _app() -> typer.Typer:
    # A group with a callback, so `import-kueue` stays a subcommand even when it is the only one registered.
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        pass

    command.register(app)
    return app


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(_app(), ["import-kueue", *map(str, args)])


def set_args(values: Mapping[str, str]) -> list[str]:
    return [part for key, value in values.items() for part in ("--set", f"{key}={value}")]


def converted(result: Any) -> dict[str, Any]:
    """The CLI's YAML, asserted to be a valid kuota file."""
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    load_config_data(data)
    assert isinstance(data, dict)
    return data


def warnings_of(result: Any) -> list[str]:
    lines = result.stderr.splitlines()
    assert all(line.startswith("warning: ") for line in lines), result.stderr
    return lines


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def convert_text(text: str) -> tuple[dict[str, Any], list[str]]:
    result = convert(list(yaml.safe_load_all(text)))
    load_config_data(result.config)
    return result.config, result.warnings


# ------------------------------------------------------------------------------------------------------------
# Every real Kueue manifest


def test_the_kueue_examples_are_found() -> None:
    assert RELEVANT, f"no Kueue objects found under {KUEUE}"
    names = {p.name for p in RELEVANT}
    assert "tas__sample-gpu-queues.yaml" in names
    assert not any(name.startswith("config-crd") for name in names)  # CRDs describe the kinds, they are not them


@pytest.mark.parametrize("path", RELEVANT, ids=lambda p: p.name)
def test_every_kueue_example_converts_to_a_valid_file(path: Path) -> None:
    result = run(path)
    data = converted(result)
    warnings_of(result)
    objects = _kueue_objects(path)
    count = {kind: sum(1 for o in objects if o["kind"] == kind) for kind in KUEUE_KINDS}
    assert len(data.get("teams", [])) == count["ClusterQueue"]
    assert len(data.get("priorityClasses", [])) == count["WorkloadPriorityClass"]
    declared = {o["metadata"]["name"] for o in objects if o["kind"] == "ResourceFlavor"}
    assert declared <= {f["name"] for f in data.get("flavors", [])}
    queues = [q for team in data.get("teams", []) for q in team.get("queues", [])]
    expected = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objects if o["kind"] == "LocalQueue"]
    assert sorted(queues) == sorted(expected)


@pytest.mark.parametrize("path", sorted(KUEUE.glob("*.yaml")), ids=lambda p: p.name)
def test_no_file_in_the_kueue_folder_breaks_the_importer(path: Path) -> None:
    # CRDs, Jobs, webhook manifests and perf configs hold no queueing objects: skipped with warnings, and a file
    # with nothing else is refused (exit 2, saying so) rather than converted into an empty quota file.
    result = run(path)
    if result.exit_code == 2:
        *warnings, error = result.stderr.splitlines()
        assert error.startswith("error: nothing to import: no Kueue objects"), result.stderr
        assert all(line.startswith("warning: ") for line in warnings), result.stderr
    else:
        converted(result)
        warnings_of(result)


def test_tas_gpu_queues() -> None:
    result = run(KUEUE / "tas__sample-gpu-queues.yaml")
    data = converted(result)
    team = by_name(data["teams"])["tas-cluster-queue"]
    assert team["queues"] == ["default/tas-user-queue"]
    (quota,) = team["quotas"]
    assert quota["flavor"] == "tas-flavor"
    assert quota["resources"]["nvidia.com/gpu"] == {"nominal": 16}
    assert quota["resources"]["memory"] == {"nominal": "100Gi"}
    flavor = by_name(data["flavors"])["tas-flavor"]
    assert flavor["nodeLabels"] == {"cloud.provider.com/node-group": "tas-group"}
    assert flavor["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert flavor["topology"] == "default"
    assert data["topologies"] == [
        {
            "name": "default",
            "levels": [
                "cloud.provider.com/topology-block",
                "cloud.provider.com/topology-rack",
                "kubernetes.io/hostname",
            ],
        }
    ]
    assert "Topology" not in result.stderr, "the Topology is converted, not skipped"
    config = load_config_data(data)
    assert config.team_for_queue("default/tas-user-queue") is not None
    topology = config.topology_of("tas-flavor")
    assert topology is not None and topology.levels[1] == "cloud.provider.com/topology-rack"


@pytest.mark.parametrize(
    ("job", "level", "required"),
    [
        ("tas__sample-job-required.yaml", "cloud.provider.com/topology-rack", True),
        ("tas__sample-job-preferred.yaml", "cloud.provider.com/topology-block", False),
    ],
)
def test_kueue_tas_jobs_keep_their_wish_under_the_imported_topology(job: str, level: str, required: bool) -> None:
    """Kueue's TAS sample Jobs, read against the quota file imported from Kueue's TAS queues, ask kuota for the
    same placement they ask Kueue for."""
    config = load_config_data(converted(run(KUEUE / "tas__sample-queues.yaml")))
    obj = yaml.safe_load((KUEUE / job).read_text(encoding="utf-8"))
    obj["metadata"]["namespace"] = "default"
    conversion = convert_job(REGISTRY.get("Job"), obj, config)
    assert conversion.workload is not None, conversion.problems
    assert conversion.workload.pod_sets[0].topology == TopologyRequest(level, required)


def test_two_resource_groups_stay_resource_groups() -> None:
    data = converted(run(KUEUE / "admin__shared-quota-setup.yaml"))
    team = data["teams"][0]
    assert "quotas" not in team
    groups = team["resourceGroups"]
    assert [g["coveredResources"] for g in groups] == [["cpu"], ["cpu_credits"]]
    assert [f["flavor"] for f in groups[0]["flavors"]] == ["on-demand", "spot"]
    assert groups[1]["flavors"][0]["resources"] == {"cpu_credits": {"nominal": 14}}


def test_admission_fair_sharing_is_a_warning() -> None:
    result = run(KUEUE / "admission-fs__admission-fair-sharing-setup.yaml")
    data = converted(result)
    assert data["teams"][0]["queueingStrategy"] == "StrictFIFO"
    assert data["teams"][0]["queues"] == ["default/lq-a", "default/lq-b"]
    warnings = warnings_of(result)
    assert any("ClusterQueue cluster-queue: spec.admissionScope" in w for w in warnings)
    assert sum("spec.fairSharing" in w and w.startswith("warning: LocalQueue") for w in warnings) == 2


def test_node_taints_are_not_turned_into_tolerations() -> None:
    result = run(KUEUE / "admin__resource-flavor-taints.yaml")
    flavor = converted(result)["flavors"][0]
    assert flavor == {"name": "spot", "nodeLabels": {"instance-type": "spot"}}
    assert "spec.nodeTaints (spot=true:NoSchedule) not converted" in result.stderr


def test_admission_checks_are_a_warning() -> None:
    result = run(KUEUE / "admin__minimal-cq.yaml")
    assert converted(result)["teams"] == [{"name": "cluster-queue-2"}]
    assert "spec.admissionChecksStrategy" in result.stderr
    assert "no admission checks" in result.stderr


def test_several_files_make_one_config() -> None:
    files = [
        KUEUE / "admin__resource-flavor-tolerations.yaml",
        KUEUE / "admin__concurrent-admission-setup.yaml",
    ]
    data = converted(run(*files))
    # Both files declare a flavor `spot`; they differ, so the later one wins, with a warning.
    assert [f["name"] for f in data["flavors"]] == ["spot", "reservation", "on-demand"]
    assert "tolerations" not in by_name(data["flavors"])["spot"]


# ------------------------------------------------------------------------------------------------------------
# knavigator templates and workflows


@pytest.mark.parametrize("path", sorted(KNAVIGATOR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_knavigator_file_converts_with_set_values(path: Path) -> None:
    result = run(path, *set_args(KNAVIGATOR_SET))
    if result.exit_code == 2:  # a Job template: nothing of Kueue's in it
        *warnings, error = result.stderr.splitlines()
        assert error.startswith("error: nothing to import: no Kueue objects"), result.stderr
        assert all(line.startswith("warning: ") for line in warnings), result.stderr
    else:
        converted(result)
        warnings_of(result)


def test_knavigator_files_are_found() -> None:
    assert len(list(KNAVIGATOR.glob("*.yaml"))) >= 5


def test_preemption_workflow() -> None:
    result = run(PREEMPTION_WORKFLOW)
    data = converted(result)
    teams = by_name(data["teams"])
    assert set(teams) == {"team-a-cq", "team-b-cq"}
    assert by_name(data["cohorts"]) == {"team-ab": {"name": "team-ab"}}
    for letter in "ab":
        team = teams[f"team-{letter}-cq"]
        assert team["parent"] == "team-ab"
        assert team["queues"] == [f"team-{letter}/team-{letter}-queue"]
        assert team["quotas"][0]["flavor"] == "gpu-node"
        assert team["quotas"][0]["resources"]["nvidia.com/gpu"] == {"nominal": 16}
        assert team["preemption"] == {
            "withinTeam": "LowerPriority",
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
        }
    classes = {pc["name"]: pc["value"] for pc in data["priorityClasses"]}
    assert classes == {"high-priority": 90, "low-priority": 30}
    assert by_name(data["flavors"])["gpu-node"]["nodeLabels"] == {"nvidia.com/gpu.count": "8"}
    assert "skipped 2 Job objects" in result.stderr


def test_gang_scheduling_workflow_reads_the_kueue_configuration() -> None:
    result = run(KNAVIGATOR / "resources__benchmarks__gang-scheduling__workflows__config-kueue.yaml")
    data = converted(result)
    assert data["teams"][0]["quotas"][0]["resources"]["nvidia.com/gpu"] == {"nominal": 256}
    assert "Configuration: " in result.stderr and "waitForPodsReady" in result.stderr
    # Its integrations.frameworks, in its order, become the kinds kuota queues.
    assert data["jobKinds"] == [
        "Job", "MPIJob", "RayJob", "RayCluster", "JobSet", "PaddleJob", "PyTorchJob", "TFJob", "XGBoostJob",
    ]  # fmt: skip
    assert "integrations" not in result.stderr


#: The FrameworkName of each of Kueue's integrations (pkg/controller/jobs) that kuota has a kind for.
KUEUE_FRAMEWORK_NAMES = [
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob",
    "kubeflow.org/paddlejob",
    "kubeflow.org/jaxjob",
    "kubeflow.org/mpijob",
    "trainer.kubeflow.org/trainjob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "leaderworkerset.x-k8s.io/leaderworkerset",
    "pod",
]


def convert_integrations(integrations: str) -> tuple[dict[str, Any], list[str]]:
    """V1BETA2's objects with a Kueue Configuration whose `integrations` are these lines of YAML."""
    configuration = "---\napiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\nintegrations:\n"
    return convert_text(V1BETA2 + configuration + textwrap.indent(integrations, "  "))


def test_kueues_integration_frameworks_are_kuotas_job_kinds() -> None:
    config, warnings = convert_integrations(f"frameworks: [{', '.join(KUEUE_FRAMEWORK_NAMES)}]\n")
    assert config["jobKinds"] == list(REGISTRY.names())  # every kind kuota queues, in the registry's order
    assert not [w for w in warnings if "frameworks" in w]


def test_kueues_pod_and_leaderworkerset_frameworks_are_kuotas() -> None:
    config, warnings = convert_integrations(
        "frameworks: [pod, leaderworkerset.x-k8s.io/leaderworkerset, deployment, pod]\n"
        "podOptions: {namespaceSelector: {matchExpressions: [{key: team, operator: Exists}]}}\n"
    )
    assert config["jobKinds"] == ["Pod", "LeaderWorkerSet"]
    assert any(w.startswith("Configuration: integrations.frameworks 'deployment' not converted") for w in warnings)
    assert any(w.startswith("Configuration: integrations.podOptions not converted: kuota queues") for w in warnings)
    plain, _ = convert_text(V1BETA2)
    assert "jobKinds" not in plain  # no Configuration: kuota's default, Job


def test_kueue_frameworks_kuota_does_not_queue_are_left_out_with_a_warning() -> None:
    config, warnings = convert_integrations(
        "frameworks: [batch/job, deployment, kubeflow.org/jaxjob, example.com/widget, batch/job]\n"
        "podOptions: {namespaceSelector: {}}\n"
    )
    assert config["jobKinds"] == ["Job", "JAXJob"]
    assert any("'deployment' not converted: kuota does not queue it" in w for w in warnings)
    assert any("'example.com/widget' not converted" in w for w in warnings)
    assert any("integrations.podOptions not converted" in w for w in warnings)
    assert load_config_data(config).job_kinds == ("Job", "JAXJob")


def test_workflow_found_by_its_repository_layout(tmp_path: Path) -> None:
    # In a knavigator checkout, template paths are relative to the repository root, above the workflow.
    (tmp_path / "resources" / "templates" / "kueue").mkdir(parents=True)
    (tmp_path / "resources" / "workflows" / "kueue").mkdir(parents=True)
    for name in ("cluster-queue", "local-queue", "resource-flavor", "job"):
        source = KNAVIGATOR / f"resources__templates__kueue__{name}.yaml"
        shutil.copy(source, tmp_path / "resources" / "templates" / "kueue" / f"{name}.yaml")
    workflow = tmp_path / "resources" / "workflows" / "kueue" / "test-preemption.yaml"
    shutil.copy(PREEMPTION_WORKFLOW, workflow)
    assert converted(run(workflow)) == converted(run(PREEMPTION_WORKFLOW))


def test_workflow_with_a_missing_template_fails_clearly(tmp_path: Path) -> None:
    workflow = tmp_path / "wf.yaml"
    shutil.copy(PREEMPTION_WORKFLOW, workflow)
    result = run(workflow)
    assert result.exit_code == 2
    assert "template 'resources/templates/kueue/resource-flavor.yaml' not found" in result.stderr
    assert "Traceback" not in result.output


def test_set_fills_what_a_workflow_task_leaves_unset(tmp_path: Path) -> None:
    workflow = yaml.safe_load(PREEMPTION_WORKFLOW.read_text())
    for task in workflow["tasks"]:
        if task["id"].startswith("create-cluster-queue"):
            del task["params"]["params"]["gpu"]
    target = tmp_path / "wf.yaml"
    target.write_text(yaml.safe_dump(workflow))
    for name in KNAVIGATOR.glob("resources__templates__*.yaml"):
        shutil.copy(name, tmp_path / name.name)
    missing = run(target)
    assert missing.exit_code == 2
    assert "{{.gpu}}" in missing.stderr and "task 'create-cluster-queue-a'" in missing.stderr
    data = converted(run(target, "--set", "gpu=4", "--set", "cpu=999"))
    for team in data["teams"]:
        assert team["quotas"][0]["resources"]["nvidia.com/gpu"] == {"nominal": 4}
        assert team["quotas"][0]["resources"]["cpu"] == {"nominal": 8}  # the task's own value wins


def test_cluster_queue_template() -> None:
    result = run(KNAVIGATOR / "resources__templates__kueue__cluster-queue.yaml", *set_args(KNAVIGATOR_SET))
    data = converted(result)
    team = data["teams"][0]
    assert team["name"] == "team-a" and team["parent"] == "team-ab"
    assert team["quotas"][0]["resources"] == {
        "cpu": {"nominal": 8},
        "memory": {"nominal": "36Gi"},
        "pods": {"nominal": 4},
        "nvidia.com/gpu": {"nominal": 16},
    }
    # The flavor is not in the input: created, with a warning, so the file is still valid.
    assert data["flavors"] == [{"name": "gpu-node"}]
    assert "ResourceFlavor gpu-node is used by a queue but not in the input" in result.stderr


def test_template_without_cohort_has_no_parent() -> None:
    values = {k: v for k, v in KNAVIGATOR_SET.items() if k != "cohort"}
    data = converted(run(KNAVIGATOR / "resources__templates__kueue__cluster-queue.yaml", *set_args(values)))
    assert "parent" not in data["teams"][0]
    assert "cohorts" not in data


def test_resource_flavor_template_ranges_over_node_labels() -> None:
    values = {"name": "gpu-node", "nodeLabels.nvidia.com/gpu.count": "8", "nodeLabels.zone": "a"}
    data = converted(run(KNAVIGATOR / "resources__templates__kueue__resource-flavor.yaml", *set_args(values)))
    assert data["flavors"] == [{"name": "gpu-node", "nodeLabels": {"nvidia.com/gpu.count": "8", "zone": "a"}}]


def test_unset_placeholder_is_named() -> None:
    values = {k: v for k, v in KNAVIGATOR_SET.items() if k != "gpu"}
    result = run(KNAVIGATOR / "resources__templates__kueue__cluster-queue.yaml", *set_args(values))
    assert result.exit_code == 2
    assert "{{.gpu}} (line 22)" in result.stderr
    assert "--set gpu=VALUE" in result.stderr
    assert "Traceback" not in result.output


def test_local_queue_of_an_unknown_cluster_queue_is_dropped() -> None:
    result = run(KNAVIGATOR / "resources__templates__kueue__local-queue.yaml", *set_args(KNAVIGATOR_SET))
    assert "teams" not in converted(result)
    assert "LocalQueue team-a/team-a: spec.clusterQueue 'team-a' is not a ClusterQueue" in result.stderr


def test_v1beta1_priority_classes() -> None:
    data = converted(run(KNAVIGATOR / "charts__overrides__kueue__priority.yaml"))
    assert data["priorityClasses"] == [
        {"name": "high-priority", "value": 80, "description": "high priority"},
        {"name": "normal-priority", "value": 50, "description": "normal priority"},
        {"name": "low-priority", "value": 20, "description": "low priority"},
    ]


# ------------------------------------------------------------------------------------------------------------
# v1beta1 and v1beta2 alike

V1BETA2 = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec:
  parentName: org
  fairSharing: {weight: 2}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: nlp}
spec:
  namespaceSelector: {}
  cohortName: research
  queueingStrategy: StrictFIFO
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: 512}
      - {name: memory, nominalQuota: 4Ti}
      - {name: nvidia.com/gpu, nominalQuota: 32, borrowingLimit: 16, lendingLimit: 8}
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 1000}
  flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: MayStopSearch}
  fairSharing: {weight: 500m}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: default, namespace: nlp}
spec: {clusterQueue: nlp}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: production}
value: 10000
description: production jobs
"""

# The same objects as Kueue v1beta1 spells them: `cohort`, and Borrow/Preempt for "stop at this flavor".
V1BETA1 = (
    V1BETA2.replace("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")
    .replace("cohortName: research", "cohort: research")
    .replace(
        "whenCanBorrow: MayStopSearch, whenCanPreempt: MayStopSearch",
        "whenCanBorrow: Borrow, whenCanPreempt: Preempt",
    )
)


def test_v1beta1_and_v1beta2_convert_alike() -> None:
    assert "cohort: research" in V1BETA1 and "Borrow" in V1BETA1 and "v1beta2" not in V1BETA1
    old, old_warnings = convert_text(V1BETA1)
    new, new_warnings = convert_text(V1BETA2)
    assert old == new
    assert old_warnings == new_warnings


def test_full_mapping() -> None:
    config, _ = convert_text(V1BETA2)
    assert list(config) == ["apiVersion", "kind", "flavors", "priorityClasses", "cohorts", "teams"]
    assert config["flavors"] == [
        {
            "name": "h100",
            "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
    ]
    assert config["priorityClasses"] == [{"name": "production", "value": 10000, "description": "production jobs"}]
    assert config["cohorts"] == [
        {
            "name": "research",
            "parent": "org",
            "quotas": [{"flavor": "h100", "resources": {"nvidia.com/gpu": {"nominal": 8}}}],
            "fairSharing": {"weight": 2},
        },
        {"name": "org"},  # named as a parent only: created
    ]
    assert config["teams"] == [
        {
            "name": "nlp",
            "parent": "research",
            "queues": ["nlp/default"],
            "queueingStrategy": "StrictFIFO",
            "quotas": [
                {
                    "flavor": "h100",
                    "resources": {
                        "cpu": {"nominal": 512},
                        "memory": {"nominal": "4Ti"},
                        "nvidia.com/gpu": {"nominal": 32, "borrowingLimit": 16, "lendingLimit": 8},
                    },
                }
            ],
            "preemption": {
                "withinTeam": "LowerPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 1000},
            },
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
            "fairSharing": {"weight": 0.5},
        }
    ]
    model = QuotaConfig.model_validate(config)
    assert model.teams[0].groups()[0].flavors[0].resources["memory"].nominal == 4 * 2**40 * 1000


def test_v1beta1_try_next_flavor_and_preference() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: a}
spec:
  namespaceSelector: {}
  flavorFungibility:
    whenCanBorrow: TryNextFlavor
    whenCanPreempt: TryNextFlavor
    preference: PreemptionOverBorrowing
"""
    config, _ = convert_text(text)
    assert config["teams"][0]["flavorFungibility"] == {
        "whenCanBorrow": "TryNextFlavor",
        "whenCanPreempt": "TryNextFlavor",
        "preference": "PreemptionOverBorrowing",
    }


def test_kind_list_is_unwrapped() -> None:
    docs = list(yaml.safe_load_all(V1BETA2))
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [*docs[:3], {"apiVersion": "v1", "kind": "ClusterQueueList", "items": docs[3:]}],
    }
    assert convert([listed]).config == convert(docs).config


def test_weights_without_a_configuration_warn_that_fair_sharing_is_off() -> None:
    _, warnings = convert_text(V1BETA2)
    assert any("fair sharing stays off" in w for w in warnings)
    config_doc = """
---
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing: {enable: true, preemptionStrategies: [LessThanInitialShare]}
waitForPodsReady: {enable: true}
"""
    config, warnings = convert_text(V1BETA2 + config_doc)
    assert config["fairSharing"] == {"enabled": True, "preemptionStrategies": ["LessThanInitialShare"]}
    assert list(config)[:5] == ["apiVersion", "kind", "flavors", "priorityClasses", "fairSharing"]
    assert not any("fair sharing stays off" in w for w in warnings)
    assert any(w.startswith("Configuration: waitForPodsReady not converted") for w in warnings)


# ------------------------------------------------------------------------------------------------------------
# What kuota cannot express: warnings, never failures

UNSUPPORTED = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: solo}
spec:
  namespaceSelector: {matchLabels: {team: solo}}
  stopPolicy: HoldAndDrain
  admissionChecks: [prov]
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  somethingNew: true
  preemption:
    borrowWithinCohort: {policy: Never, maxPriorityThreshold: 5}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: "10", borrowingLimit: 2, lendingLimit: 1}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: no-selector}
spec: {}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
spec:
  topologyName: default
  nodeTaints: [{key: spot, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: solo}
spec: {clusterQueue: solo, stopPolicy: Hold}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: other}
spec: {clusterQueue: no-selector}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lost, namespace: solo}
spec: {clusterQueue: nowhere}
---
apiVersion: batch/v1
kind: Job
metadata: {name: j1}
---
apiVersion: batch/v1
kind: Job
metadata: {name: j2}
---
apiVersion: v1
kind: Namespace
metadata: {name: solo}
"""


def test_unsupported_fields_are_warnings(tmp_path: Path) -> None:
    path = tmp_path / "unsupported.yaml"
    path.write_text(UNSUPPORTED)
    result = run(path)
    data = converted(result)
    team = by_name(data["teams"])["solo"]
    assert team["queues"] == ["solo/q"]
    # Without a cohort, Kueue's limits have nothing to apply to; kuota rejects them, so they go.
    assert team["quotas"] == [{"flavor": "default", "resources": {"cpu": {"nominal": 10}}}]
    assert team["preemption"] == {"borrowWithinCohort": {"policy": "Never"}}
    text = result.stderr
    for expected in (
        "ClusterQueue solo: spec.namespaceSelector {matchLabels: {team: solo}} not converted",
        "ClusterQueue solo: spec.stopPolicy HoldAndDrain not converted",
        "ClusterQueue solo: spec.admissionChecks [prov] not converted",
        "ClusterQueue solo: spec.admissionScope",
        "ClusterQueue solo: spec.somethingNew is not a field the importer knows; ignored",
        "maxPriorityThreshold dropped",
        "ClusterQueue solo: borrowingLimit 2 of cpu in flavor default dropped",
        "ClusterQueue solo: lendingLimit 1 of cpu in flavor default dropped",
        "ClusterQueue no-selector: has no spec.namespaceSelector, so Kueue admits from no namespace",
        "ResourceFlavor default: spec.topologyName 'default' names no Topology in the input; dropped",
        "ResourceFlavor default: spec.nodeTaints (spot:NoSchedule) not converted",
        "LocalQueue solo/q: spec.stopPolicy Hold not converted",
        "LocalQueue solo/lost: spec.clusterQueue 'nowhere' is not a ClusterQueue in the input; the queue is dropped",
        "warning: skipped 2 Job (batch/v1) objects",
        "warning: skipped 1 Namespace (v1) object",
    ):
        assert expected in text, expected
    assert text.count("Job (batch/v1)") == 1
    warnings_of(result)


def test_limits_under_a_cohort_are_kept_and_lending_is_capped() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: a}
spec:
  namespaceSelector: {}
  cohortName: pool
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu
      resources: [{name: nvidia.com/gpu, nominalQuota: 4, borrowingLimit: 0, lendingLimit: 6}]
"""
    config, warnings = convert_text(text)
    resources = config["teams"][0]["quotas"][0]["resources"]
    assert resources == {"nvidia.com/gpu": {"nominal": 4, "borrowingLimit": 0, "lendingLimit": 4}}
    assert any("lendingLimit 6 of nvidia.com/gpu in flavor gpu exceeds the nominal 4; capped" in w for w in warnings)


def test_names_that_are_not_dns_labels_are_renamed_consistently() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: GPU.H100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: Org.Research}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: Team_A}
spec:
  namespaceSelector: {}
  cohortName: Org.Research
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: GPU.H100, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec: {namespaceSelector: {}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: ns}
spec: {clusterQueue: Team_A}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high.priority}
value: 10
"""
    config, warnings = convert_text(text)
    assert config["flavors"] == [{"name": "gpu-h100"}]
    assert config["cohorts"] == [{"name": "org-research"}]
    assert config["priorityClasses"] == [{"name": "high-priority", "value": 10}]
    renamed, kept = config["teams"]
    assert kept == {"name": "team-a"}  # a valid name never moves to make room
    assert renamed["name"].startswith("team-a-") and renamed["name"] != "team-a"
    assert renamed["parent"] == "org-research"
    assert renamed["queues"] == ["ns/q"]
    assert renamed["quotas"][0]["flavor"] == "gpu-h100"
    assert sum("not a DNS-1123 label; renamed" in w for w in warnings) == 4
    assert convert_text(text) == (config, warnings)  # deterministic


def test_a_cohort_cycle_is_cut_with_a_warning() -> None:
    text = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: a}
spec: {parentName: b}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: b}
spec: {parentName: a}
"""
    config, warnings = convert_text(text)
    assert config["cohorts"] == [{"name": "a", "parent": "b"}, {"name": "b"}]
    assert any("closes a cycle (a -> b -> a)" in w for w in warnings)


def test_identical_duplicates_are_silent_and_different_ones_warn() -> None:
    doc = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\n"
    assert convert_text(doc + "---\n" + doc)[1] == []
    changed = doc + "spec: {nodeLabels: {a: b}}\n"
    config, warnings = convert_text(doc + "---\n" + changed)
    assert config["flavors"] == [{"name": "f", "nodeLabels": {"a": "b"}}]
    assert warnings == ["ResourceFlavor f is declared more than once; the last declaration is used"]


# ------------------------------------------------------------------------------------------------------------
# Broken input: exit 2 and a message, never a traceback


def test_invalid_yaml_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: ClusterQueue\nspec: [unclosed\n")
    result = run(path)
    assert result.exit_code == 2
    assert "broken.yaml: not valid YAML (line" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_unreadable_file_exits_2(tmp_path: Path) -> None:
    result = run(tmp_path / "missing.yaml")
    assert result.exit_code == 2
    assert "cannot read" in result.stderr and "missing.yaml" in result.stderr


def test_malformed_kueue_object_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(V1BETA2.replace("nominalQuota: 512", "nominalQuota: lots"))
    result = run(path)
    assert result.exit_code == 2
    assert "ClusterQueue nlp: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in result.stderr
    assert "'lots' is not a Kubernetes quantity" in result.stderr


def test_mismatched_resource_group_exits_2() -> None:
    text = V1BETA2.replace("coveredResources: [cpu, memory, nvidia.com/gpu]", "coveredResources: [cpu, memory]")
    with pytest.raises(KueueImportError, match="Kueue requires them to match"):
        convert(list(yaml.safe_load_all(text)))


def test_bad_set_argument_exits_2() -> None:
    result = run(KNAVIGATOR / "resources__templates__kueue__local-queue.yaml", "--set", "novalue")
    assert result.exit_code == 2
    assert "--set expects KEY=VALUE" in result.stderr


def test_an_invalid_result_is_reported_as_an_importer_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    from importers.kueue import ImportResult

    def broken(documents: list[Any]) -> ImportResult:
        return ImportResult({"teams": [{"name": "Not_A_Label"}]}, [])

    monkeypatch.setattr(command, "convert", broken)
    result = run(KUEUE / "admin__resource-flavor-empty.yaml")
    assert result.exit_code == 2
    assert "teams[0].name" in result.stderr and "bug in the Kueue importer" in result.stderr
    assert result.stdout == ""


# ------------------------------------------------------------------------------------------------------------
# Output


def test_output_file_and_layout(tmp_path: Path) -> None:
    out = tmp_path / "quota.yaml"
    result = run(PREEMPTION_WORKFLOW, "-o", out)
    assert result.exit_code == 0 and result.stdout == ""
    text = out.read_text()
    keys = [line.split(":")[0] for line in text.splitlines() if line and not line.startswith((" ", "-"))]
    assert keys == ["apiVersion", "kind", "flavors", "priorityClasses", "cohorts", "teams"]
    assert "memory: {nominal: 36Gi}" in text
    assert "nvidia.com/gpu: {nominal: 16}" in text
    load_config_data(yaml.safe_load(text))


def test_to_yaml_round_trips_quantities_as_written() -> None:
    config, _ = convert_text(V1BETA2.replace("nominalQuota: 512", "nominalQuota: 500m"))
    text = to_yaml(config)
    assert yaml.safe_load(text) == config
    assert "cpu: {nominal: 500m}" in text and "memory: {nominal: 4Ti}" in text


def test_stdin(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["import-kueue", "-"], input=V1BETA2)
    assert converted(result)["teams"][0]["name"] == "nlp"


def test_the_real_cli_discovers_the_command() -> None:
    from kuota import cli

    names = {c.name for c in cli.app.registered_commands}
    assert "import-kueue" in names
    # With a single registered command typer runs it without its name; with several it is a subcommand.
    args = [str(KUEUE / "tas__sample-gpu-queues.yaml")]
    result = CliRunner().invoke(cli.app, ["import-kueue", *args] if len(names) > 1 else args)
    assert converted(result)["teams"][0]["name"] == "tas-cluster-queue"


# ------------------------------------------------------------------------------------------------------------
# The Go-template subset


def test_template_trim_markers_and_conditions() -> None:
    template = "a:\n  {{- if .x }}\n  x: {{ .x }}\n  {{- else }}\n  x: none\n  {{- end }}\nb: {{.y -}}  \n!"
    assert render_template(template, {"x": "1", "y": 2}) == "a:\n  x: 1\nb: 2!"
    assert render_template(template, {"y": True}) == "a:\n  x: none\nb: true!"


def test_template_range_and_with() -> None:
    ranges = "{{- range $k, $v := .m }}\n{{ $k }}={{ $v }}{{ end }}|{{ range .l }}[{{ . }}]{{ end }}"
    template = ranges + "|{{ with .w }}{{ .n }}{{ end }}"
    assert render_template(template, {"m": {"b": 2, "a": 1}, "l": ["x", "y"], "w": {"n": "N"}}) == "\na=1\nb=2|[x][y]|N"


def test_template_unsupported_action() -> None:
    with pytest.raises(TemplateError, match=r"unsupported template action \{\{printf"):
        render_template('{{printf "%d" .x}}', {"x": 1})
    with pytest.raises(TemplateError, match="has no"):
        render_template("{{ if .x }}open", {"x": 1})


def _docs(paths: list[Path]) -> Iterator[Any]:
    for path in paths:
        yield from yaml.safe_load_all(path.read_text())


def test_converter_is_pure_over_documents() -> None:
    # The same objects converted through the library and through the CLI give the same file.
    paths = [KUEUE / "tas__sample-gpu-queues.yaml", KUEUE / "admin__shared-quota-setup.yaml"]
    assert convert(list(_docs(paths))).config == converted(run(*paths))
