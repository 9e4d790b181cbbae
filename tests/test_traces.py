"""Trace readers on the real shared traces, kuota's own csv, mapping files, and the sample files in config/samples."""

from __future__ import annotations

import collections
import importlib.util
import itertools
import os
import tempfile
import time
import zlib
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quota.config import QuotaConfig
from quota.loader import load_config_file, load_config_text
from sim.replay import replay, sim_jobs
from sim.traces import (
    Assign,
    TraceError,
    TraceJob,
    TraceMapping,
    class_weights,
    default_mapping,
    format_csv,
    load_mapping,
    parse_mapping,
    qos_map,
    read_trace,
    read_trace_detailed,
)
from workloads.registry import REGISTRY

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"
ITP = TRACES / "msft-itp-2021" / "itp_2021_all_clusters.csv"
OPENB = TRACES / "alibaba-openb-2023" / "openb_pod_list_default.csv"
SAMPLES = REPO / "config" / "samples"

GI = 2**30 * 1000
ITP_HEAD = "cluster,job_id,submission_time,duration,num_gpu\n"

CONFIG_TEXT = """\
apiVersion: kuota.dev/v1
kind: QuotaConfig
flavors: [{name: h100}]
priorityClasses:
  - {name: system-critical, value: 1000000, preemptible: false}
  - {name: production, value: 10000}
  - {name: research, value: 1000, default: true}
  - {name: development, value: 100}
cohorts: [{name: org}]
teams:
  - {name: nlp, parent: org, quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 8}}}]}
  - {name: vision, parent: org, quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 8}}}]}
  - {name: speech, parent: org, quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 8}}}]}
"""


@pytest.fixture(scope="module")
def config() -> QuotaConfig:
    return load_config_text(CONFIG_TEXT)


@pytest.fixture(scope="module")
def itp_read(config: QuotaConfig) -> tuple[list[TraceJob], float]:
    """The full ITP trace with default mapping, read once for the module, and the CPU seconds it took."""
    started = time.process_time()  # CPU time: a busy machine must not fail the speed check
    jobs = read_trace(ITP, "itp", TraceMapping(), config)
    return jobs, time.process_time() - started


@pytest.fixture(scope="module")
def itp_jobs(itp_read: tuple[list[TraceJob], float]) -> list[TraceJob]:
    return itp_read[0]


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- Microsoft ITP 2021 --------------------------------------------------------------------------------------------


def test_itp_every_row_and_the_provenance_gpu_hours(itp_jobs: list[TraceJob]) -> None:
    assert len(itp_jobs) == 69_351
    assert len({job.name for job in itp_jobs}) == 69_351
    gpu_ms = sum(job.gpus * job.duration_ms for job in itp_jobs)
    assert round(gpu_ms / 3_600_000, 2) == 1_632_719.74
    sizes = collections.Counter(job.gpus for job in itp_jobs)
    assert sizes == {1: 57_682, 2: 1_483, 4: 2_371, 8: 7_009, 16: 381, 32: 354, 64: 71}


def test_itp_times_are_shifted_to_the_first_submission_and_sorted(itp_jobs: list[TraceJob]) -> None:
    assert itp_jobs[0].submit_ms == 0
    assert all(a.submit_ms <= b.submit_ms for a, b in itertools.pairwise(itp_jobs))
    assert min(job.duration_ms for job in itp_jobs) == 600_000
    assert max(job.duration_ms for job in itp_jobs) == 1_573_360_000
    # The first submission of the trace is at 1,999 s; the last at 5,175,336 s.
    assert itp_jobs[-1].submit_ms == (5_175_336 - 1_999) * 1000


def test_itp_default_clusters_round_robin_onto_teams_in_file_order(itp_jobs: list[TraceJob]) -> None:
    per_team = collections.Counter(job.team for job in itp_jobs)
    # cluster01..10 (sorted) → nlp, vision, speech, nlp, ... with the PROVENANCE counts per cluster.
    clusters = [1595, 5778, 3011, 15802, 3629, 2396, 12699, 13047, 11134, 260]
    expected = {"nlp": sum(clusters[0::3]), "vision": sum(clusters[1::3]), "speech": sum(clusters[2::3])}
    assert per_team == expected
    first = next(job for job in itp_jobs if job.name.startswith("itp-cluster04-"))
    assert first.team == "nlp"


def test_itp_default_priority_draw_and_checkpoints(itp_jobs: list[TraceJob], config: QuotaConfig) -> None:
    assert class_weights(config) == {"production": 0.1, "research": 0.6, "development": 0.3}
    classes = collections.Counter(job.priority_class for job in itp_jobs)
    assert set(classes) == {"production", "research", "development"}  # never the non-preemptible class
    assert classes["research"] / len(itp_jobs) == pytest.approx(0.6, abs=0.01)
    assert classes["production"] / len(itp_jobs) == pytest.approx(0.1, abs=0.01)
    checkpointing = sum(job.checkpoint_interval_ms == 1_800_000 for job in itp_jobs)
    assert checkpointing / len(itp_jobs) == pytest.approx(0.5, abs=0.01)
    assert {job.checkpoint_interval_ms for job in itp_jobs} == {None, 1_800_000}
    job = itp_jobs[0]
    assert (job.cpu_milli, job.memory_milli) == (1000, 4 * GI * job.gpus)


def test_itp_loads_fast(itp_read: tuple[list[TraceJob], float]) -> None:
    assert itp_read[1] < 2.0


def test_window_keeps_each_jobs_draw(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(tmp_path, ITP_HEAD + "".join(f"c{n % 3},id{n},{n * 60},600,1\n" for n in range(500)))
    full = {job.name: job for job in read_trace(path, "itp", TraceMapping(), config)}
    window = read_trace_detailed(path, "itp", TraceMapping(), config, start_ms=6_000_000, end_ms=12_000_000)
    assert len(window.jobs) == 100
    assert window.outside == 400
    assert [job.submit_ms for job in window.jobs] == [n * 60_000 for n in range(100)]
    # Same seed, same draws: a job gets the same class and checkpoint interval whatever slice is read.
    assert all(full[job.name] == replace(job, submit_ms=full[job.name].submit_ms) for job in window.jobs)


def test_seed_decides_the_draws_and_limit_keeps_the_first(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(tmp_path, ITP_HEAD + "".join(f"c{n % 3},id{n},{1000 - n},60,1\n" for n in range(300)))
    first = read_trace(path, "itp", TraceMapping(), config, seed=7)
    assert read_trace(path, "itp", TraceMapping(), config, seed=7) == first
    other = read_trace(path, "itp", TraceMapping(), config, seed=8)
    assert [j.name for j in other] == [j.name for j in first]
    assert [j.priority_class for j in other] != [j.priority_class for j in first]
    limited = read_trace(path, "itp", TraceMapping(), config, seed=7, limit=10)
    assert limited == first[:10]
    assert [job.submit_ms for job in limited] == [n * 1000 for n in range(10)]  # latest row submitted first


# -- Alibaba openb -------------------------------------------------------------------------------------------------


def test_openb_skips_pods_that_never_ran(config: QuotaConfig) -> None:
    result = read_trace_detailed(OPENB, "openb", TraceMapping(), config)
    assert result.rows == 8_152
    assert result.skipped == {"never ran (pod_phase Pending)": 897}
    assert len(result.jobs) == 7_255
    assert "897 skipped" in result.summary()
    pod = next(job for job in result.jobs if job.name == "openb-pod-0001")
    # openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061: a shared GPU rounded up to one.
    assert pod.submit_ms == 427_061_000
    assert pod.duration_ms == (12_902_960 - 427_061) * 1000
    assert (pod.gpus, pod.cpu_milli, pod.memory_milli) == (1, 6000, 12 * GI)
    assert pod.priority_class == "production"
    assert pod.checkpoint_interval_ms is None
    assert pod.team == ["nlp", "vision", "speech"][zlib.crc32(b"openb-pod-0001") % 3]


def test_openb_qos_to_classes_and_hash_teams(config: QuotaConfig) -> None:
    assert qos_map(config) == {"LS": "production", "Guaranteed": "production", "Burstable": "research",
                               "BE": "development"}  # fmt: skip
    jobs = read_trace(OPENB, "openb", TraceMapping(), config)
    assert set(collections.Counter(job.priority_class for job in jobs)) == {"production", "research", "development"}
    teams = collections.Counter(job.team for job in jobs)
    assert set(teams) == {"nlp", "vision", "speech"}
    assert min(teams.values()) > 2000  # a hash spreads pods about evenly


def test_openb_can_skip_fractional_gpu_pods(config: QuotaConfig) -> None:
    result = read_trace_detailed(OPENB, "openb", TraceMapping(fractional_gpu="skip"), config)
    assert result.skipped == {
        "never ran (pod_phase Pending)": 897,
        "shares a GPU (gpu_milli < 1000, fractionalGpu: skip)": 2_573,
    }
    assert len(result.jobs) == 4_682


# -- kuota's csv ---------------------------------------------------------------------------------------------------


def test_csv_defaults_for_empty_cells(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(
        tmp_path,
        "submit_s,duration_s,team,priority_class,gpus,cpus,memory,checkpoint_s\n"
        "0,60,nlp,,,,,\n"
        "1.5,3600,vision,production,2,500m,16Gi,300\n"
        "2,10,speech,development,4,,,none\n",
    )
    a, b, c = read_trace(path, "csv", TraceMapping(), config)
    assert a == TraceJob("job-1", 0, 60_000, "nlp", "research", 0, 1000, 1 * GI, None)
    assert b == TraceJob("job-2", 1_500, 3_600_000, "vision", "production", 2, 500, 16 * GI, 300_000)
    assert c == TraceJob("job-3", 2_000, 10_000, "speech", "development", 4, 1000, 16 * GI, None)


def test_csv_optional_columns_and_times_kept(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(tmp_path, "team,duration_s,submit_s,name\nnlp,5,30,first\nnlp,5,10,second\n")
    jobs = read_trace(path, "csv", TraceMapping(), config)
    assert [(j.name, j.submit_ms) for j in jobs] == [("second", 10_000), ("first", 30_000)]
    shifted = read_trace(path, "csv", TraceMapping(), config, start_ms=20_000)
    assert [(j.name, j.submit_ms) for j in shifted] == [("first", 10_000)]


def test_csv_names_must_be_unique(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(tmp_path, "submit_s,duration_s,team,name\n0,60,nlp,a\n0,60,nlp,b\n1,60,nlp,a\n")
    with pytest.raises(TraceError, match="line 4: name 'a' is already used on line 2"):
        read_trace(path, "csv", TraceMapping(), config)


def test_csv_mapping_checkpoint_fills_empty_cells_only(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(tmp_path, "submit_s,duration_s,team,checkpoint_s\n0,60,nlp,\n0,60,nlp,120\n0,60,nlp,never\n")
    jobs = read_trace(path, "csv", TraceMapping(checkpoint_interval="30m"), config)
    assert [j.checkpoint_interval_ms for j in jobs] == [1_800_000, 120_000, None]


@pytest.mark.parametrize(
    ("rows", "line", "message"),
    [
        ("0,60,nlp\n5,abc,nlp\n", 3, "duration_s 'abc' is not a number of seconds"),
        ("-1,60,nlp\n", 2, "submit_s '-1' must be 0 or more seconds"),
        ("0,0,nlp\n", 2, "duration_s '0' must be more than 0 seconds"),
        ("0,60,nlp\n0,60,robotics\n", 3, "team 'robotics' is not a team of the quota file"),
        ("0,60,\n", 2, "team is empty"),
        ("0,60,nlp,1\n", 2, "4 cells where the header has 3"),
    ],
)
def test_csv_errors_name_the_line(tmp_path: Path, config: QuotaConfig, rows: str, line: int, message: str) -> None:
    path = write(tmp_path, "submit_s,duration_s,team\n" + rows)
    with pytest.raises(TraceError) as caught:
        read_trace(path, "csv", TraceMapping(), config)
    assert f"line {line}: " in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("header", "good", "bad", "message"),
    [
        ("gpus", "1", "1.5", "gpus '1.5' is not a whole number"),
        ("cpus", "1", "lots", "cpus: 'lots' is not a Kubernetes quantity"),
        ("memory", "1Gi", "-4Gi", "memory '-4Gi' is negative"),
        ("priority_class", "research", "urgent", "priority_class 'urgent' is not a priority class of the quota file"),
        ("checkpoint_s", "60", "0", "checkpoint_s '0' must be more than 0 seconds"),
    ],
)
def test_csv_bad_cells(tmp_path: Path, config: QuotaConfig, header: str, good: str, bad: str, message: str) -> None:
    path = write(tmp_path, f"submit_s,duration_s,team,{header}\n0,60,nlp,{good}\n0,60,nlp,{bad}\n")
    with pytest.raises(TraceError, match="line 3: ") as caught:
        read_trace(path, "csv", TraceMapping(), config)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("submit_s,team\n0,nlp\n", "missing column(s) duration_s"),
        ("submit_s,duration_s,team,gpu\n0,1,nlp,1\n", "unknown column(s) gpu"),
    ],
)
def test_csv_bad_files(tmp_path: Path, config: QuotaConfig, text: str, message: str) -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(write(tmp_path, text), "csv", TraceMapping(), config)
    assert message in str(caught.value)


def test_missing_file_and_unknown_format(tmp_path: Path, config: QuotaConfig) -> None:
    with pytest.raises(TraceError, match="cannot read the trace"):
        read_trace(tmp_path / "nope.csv", "csv", TraceMapping(), config)
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(ITP, "philly", TraceMapping(), config)  # type: ignore[arg-type]


def test_itp_columns_checked(tmp_path: Path, config: QuotaConfig) -> None:
    with pytest.raises(TraceError, match="not an itp trace: missing column"):
        read_trace(write(tmp_path, "submit_s,duration_s,team\n0,1,nlp\n"), "itp", TraceMapping(), config)
    bad = write(tmp_path, "cluster,job_id,submission_time,duration,num_gpu\nc1,a,10,60,1\nc1,b,11,sixty,1\n")
    with pytest.raises(TraceError, match="line 3: duration 'sixty' is not a whole number"):
        read_trace(bad, "itp", TraceMapping(), config)


def test_format_csv_reads_back(tmp_path: Path, config: QuotaConfig) -> None:
    jobs = [
        TraceJob("a", 0, 1_500, "nlp", "production", 8, 4000, 32 * GI, 1_800_000),
        TraceJob("b", 2_250, 60_000, "vision", None, 0, 500, 1536 * 2**20 * 1000, None),
    ]
    path = write(tmp_path, format_csv(jobs, names=True))
    back = read_trace(path, "csv", TraceMapping(), config)
    assert back[0] == jobs[0]
    assert back[1] == TraceJob("b", 2_250, 60_000, "vision", "research", 0, 500, 1536 * 2**20 * 1000, None)


# -- kinds and gangs -----------------------------------------------------------------------------------------------

KINDS_HEAD = "submit_s,duration_s,team,gpus,cpus,memory,kind,pods\n"
KNOWN_KINDS = ", ".join(REGISTRY.names())


def test_csv_kind_and_pods_are_totals_split_over_the_gang(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(
        tmp_path,
        KINDS_HEAD + "0,60,nlp,16,8,64Gi,JobSet,4\n"
        "1,60,nlp,1,,,,\n"
        "2,60,vision,,,,RayJob,3\n"
        "3,60,speech,8,,,PyTorchJob,2\n",
    )
    gang, job, ray, torch = read_trace(path, "csv", TraceMapping(), config)
    assert gang == TraceJob("job-1", 0, 60_000, "nlp", "research", 16, 8000, 64 * GI, None, "JobSet", 4)
    assert gang.pod_requests() == (4000, 2000, 16 * GI)
    assert job == TraceJob("job-2", 1_000, 60_000, "nlp", "research", 1, 1000, 4 * GI, None)
    assert (job.kind, job.pods) == ("Job", 1)
    # Defaults are per pod (memory: per GPU), so the totals they make always split.
    assert (ray.cpu_milli, ray.memory_milli, ray.pod_requests()) == (3000, 3 * GI, (0, 1000, GI))
    assert (torch.cpu_milli, torch.memory_milli, torch.pod_requests()) == (2000, 32 * GI, (4000, 1000, 16 * GI))


def test_a_trace_without_kinds_is_all_single_pod_jobs(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(tmp_path, "submit_s,duration_s,team,gpus\n0,60,nlp,8\n")
    assert [(job.kind, job.pods) for job in read_trace(path, "csv", TraceMapping(), config)] == [("Job", 1)]
    itp = read_trace(write(tmp_path, ITP_HEAD + "c1,a,0,60,8\n"), "itp", TraceMapping(), config)
    assert [(job.kind, job.pods) for job in itp] == [("Job", 1)]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0,60,nlp,8,,,Deployment,1", f"kind 'Deployment' is not a job kind kuota knows (job kinds: {KNOWN_KINDS})"),
        ("0,60,nlp,8,,,jobset,1", "kind 'jobset' is not a job kind kuota knows"),
        ("0,60,nlp,8,,,JobSet,0", "pods '0' must be 1 or more"),
        ("0,60,nlp,8,,,JobSet,2.5", "pods '2.5' is not a whole number"),
        ("0,60,nlp,3,,,JobSet,2", "gpus 3 do not split into whole GPUs over 2 pods"),
        ("0,60,nlp,1,,,JobSet,8", "gpus 1 do not split into whole GPUs over 8 pods"),
        ("0,60,nlp,0,1,,JobSet,3", "cpus 1 do not split evenly over 3 pods (in milli-units)"),
        ("0,60,nlp,0,1001m,,RayJob,2", "cpus 1001m do not split evenly over 2 pods"),
        ("0,60,nlp,0,,1,RayJob,3", "memory 1 do not split evenly over 3 pods"),
        ("0,60,nlp,2,,,Job,2.0", "pods '2.0' is not a whole number"),
    ],
)
def test_csv_kind_and_pods_errors_name_file_and_line(
    tmp_path: Path, config: QuotaConfig, row: str, message: str
) -> None:
    path = write(tmp_path, KINDS_HEAD + "0,60,nlp,8,,,JobSet,8\n" + row + "\n")
    with pytest.raises(TraceError) as caught:
        read_trace(path, "csv", TraceMapping(), config)
    assert str(caught.value).startswith(f"{path}, line 3: ")
    assert message in str(caught.value)


def test_a_gang_name_is_one_object_name(tmp_path: Path, config: QuotaConfig) -> None:
    path = write(tmp_path, "submit_s,duration_s,team,kind,name\n0,60,nlp,,nlp/a\n0,60,nlp,JobSet,nlp/b\n")
    with pytest.raises(TraceError, match=r"line 3: name 'nlp/b' of a JobSet cannot hold '/'"):
        read_trace(path, "csv", TraceMapping(), config)


def test_mapping_gives_kinds(tmp_path: Path, config: QuotaConfig) -> None:
    itp = write(tmp_path, ITP_HEAD + "c1,a,0,60,8\nc2,b,1,60,8\n")
    jobs = read_trace(itp, "itp", parse_mapping("kind: {value: PyTorchJob}\n"), config)
    assert {job.kind for job in jobs} == {"PyTorchJob"}
    by_cluster = parse_mapping("kind: {column: cluster, map: {c1: MPIJob}, default: RayJob}\n")
    assert [job.kind for job in read_trace(itp, "itp", by_cluster, config)] == ["MPIJob", "RayJob"]
    # A default kind for a csv's empty kind cells; the cells given still win.
    csv_path = write(tmp_path, "submit_s,duration_s,team,kind\n0,60,nlp,\n1,60,nlp,Job\n", "kinds.csv")
    default = parse_mapping("kind: {column: kind, default: JobSet}\n")
    assert [job.kind for job in read_trace(csv_path, "csv", default, config)] == ["JobSet", "Job"]
    with pytest.raises(TraceError, match="mapping kind: 'Deployment' not a job kind kuota knows \\(job kinds: Job, "):
        read_trace(itp, "itp", TraceMapping(kind=Assign(value="Deployment")), config)


def test_format_csv_reads_back_kinds_and_pods(tmp_path: Path, config: QuotaConfig) -> None:
    jobs = [
        TraceJob("a", 0, 1_500, "nlp", "production", 8, 4000, 32 * GI, 1_800_000, "JobSet", 4),
        TraceJob("b", 2_250, 60_000, "vision", "research", 1, 500, 4 * GI, None),
    ]
    text = format_csv(jobs, names=True)
    assert text.splitlines()[0].endswith(",name,kind,pods")
    assert read_trace(write(tmp_path, text), "csv", TraceMapping(), config) == jobs
    assert "kind" not in format_csv(jobs[1:])  # nothing to say: the columns of old traces


GPU_MEMORY_CONFIG = load_config_text(
    "flavors: [{name: h100}]\n"
    "teams: [{name: nlp, queues: [lang/default], quotas: [{flavor: h100, resources: "
    "{nvidia.com/gpu: {nominal: 1000000}, cpu: {nominal: 1000000}, memory: {nominal: 1Pi}}}]}]\n"
)


def test_sim_jobs_name_every_kind_but_job_kind_namespace_name(config: QuotaConfig) -> None:
    trace = [
        TraceJob("a", 0, 60_000, "nlp", None, 8, 8000, 32 * GI, None),
        TraceJob("a", 0, 60_000, "nlp", None, 8, 8000, 32 * GI, None, "JobSet", 4),
        TraceJob("b", 0, 60_000, "nlp", None, 3, 3000, 3 * GI, None, "JobSet", 2),
    ]
    names = [job.workload.name for job in sim_jobs(GPU_MEMORY_CONFIG, trace[:2])]
    assert names == ["a", "JobSet/lang/a"]  # the namespace of the team's first queue, lang/default
    assert sim_jobs(config, trace[1:2])[0].workload.name == "JobSet/nlp/a"  # a team without queues: its name
    with pytest.raises(ValueError, match="trace job 'b': gpus 3 do not split into whole GPUs over 2 pods"):
        sim_jobs(config, trace[2:])


@settings(max_examples=int(os.environ.get("KUOTA_HYPOTHESIS_EXAMPLES", "150")), deadline=None)
@given(
    gpus=st.integers(0, 512),
    cpu_milli=st.integers(0, 10**9),
    memory_milli=st.integers(0, 2**62),
    pods=st.integers(1, 64),
    split=st.booleans(),
)
def test_splitting_over_pods_then_summing_gives_the_totals(
    gpus: int, cpu_milli: int, memory_milli: int, pods: int, split: bool
) -> None:
    if split:  # mostly totals that split, so both branches are exercised
        gpus, cpu_milli, memory_milli = (gpus // pods * pods, cpu_milli // pods * pods, memory_milli // pods * pods)
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), KINDS_HEAD + f"0,60,nlp,{gpus},{cpu_milli}m,{memory_milli}m,JobSet,{pods}\n")
        splits = gpus % pods == 0 and cpu_milli % pods == 0 and memory_milli % pods == 0
        if not splits:
            with pytest.raises(TraceError, match=f"{path}, line 2: .* do not split"):
                read_trace(path, "csv", TraceMapping(), GPU_MEMORY_CONFIG)
            return
        (job,) = read_trace(path, "csv", TraceMapping(), GPU_MEMORY_CONFIG)
    assert (job.gpus, job.cpu_milli, job.memory_milli, job.pods) == (gpus, cpu_milli, memory_milli, pods)
    (pod_set,) = sim_jobs(GPU_MEMORY_CONFIG, [job])[0].workload.pod_sets
    assert pod_set.count == pods
    totals = {resource: milli * pods for resource, milli in pod_set.requests.items()}
    wanted = {"nvidia.com/gpu": gpus * 1000, "cpu": cpu_milli, "memory": memory_milli}
    assert totals == {resource: milli for resource, milli in wanted.items() if milli}


# -- mappings ------------------------------------------------------------------------------------------------------


def test_mapping_file_map_random_and_checkpoints(tmp_path: Path, config: QuotaConfig) -> None:
    mapping = load_mapping(
        write(
            tmp_path,
            "team: {column: cluster, map: {c1: nlp, c2: vision}, default: speech}\n"
            "priority: {random: {production: 1, development: 1}}\n"
            "checkpointInterval: 10m\n"
            "defaults: {cpus: 2, memoryPerGpu: 8Gi}\n",
            "mapping.yaml",
        )
    )
    rows = "".join(f"c{n % 4},id{n},{n},60,1\n" for n in range(400))
    jobs = read_trace(write(tmp_path, ITP_HEAD + rows), "itp", mapping, config)
    teams = {job.name.split("-")[1]: job.team for job in jobs}
    assert teams == {"c0": "speech", "c1": "nlp", "c2": "vision", "c3": "speech"}
    classes = collections.Counter(job.priority_class for job in jobs)
    assert set(classes) == {"production", "development"}
    assert all(job.checkpoint_interval_ms == 600_000 for job in jobs)  # an interval alone: every job
    assert {(job.cpu_milli, job.memory_milli) for job in jobs} == {(2000, 8 * GI)}


def test_mapping_round_robin_wraps_and_value(tmp_path: Path, config: QuotaConfig) -> None:
    rows = "".join(f"c{n},id{n},{n},60,1\n" for n in range(5))
    path = write(tmp_path, ITP_HEAD + rows)
    mapping = TraceMapping(team=Assign(column="cluster", round_robin=True), priority=Assign(value="production"))
    jobs = read_trace(path, "itp", mapping, config)
    assert [job.team for job in jobs] == ["nlp", "vision", "speech", "nlp", "vision"]
    assert {job.priority_class for job in jobs} == {"production"}


def test_mapping_fraction_of_checkpointing_jobs(tmp_path: Path, config: QuotaConfig) -> None:
    rows = "".join(f"c1,id{n},{n},60,1\n" for n in range(2000))
    path = write(tmp_path, ITP_HEAD + rows)
    jobs = read_trace(path, "itp", TraceMapping(checkpoint_interval="1h", checkpoint_fraction=0.25), config)
    share = sum(job.checkpoint_interval_ms == 3_600_000 for job in jobs) / len(jobs)
    assert share == pytest.approx(0.25, abs=0.04)
    never = read_trace(path, "itp", TraceMapping(checkpoint_interval="none"), config)
    assert {job.checkpoint_interval_ms for job in never} == {None}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("team: {column: cluster, random: {nlp: 1}}\n", "team (line 1): give exactly one of"),
        ("team: {roundRobin: true, value: nlp}\n", "`roundRobin` needs a `column`"),
        ("team: {column: c, map: {a: nlp}, hash: true}\n", "at most one of `map`, `roundRobin` or `hash`"),
        ("priority: {random: {production: -1}}\n", "must be a non-negative number"),
        ("checkpointInterval: often\n", "'often' is not a duration"),
        ("checkpointFraction: 1.5\n", "checkpointFraction (line 1)"),
        ("teams: {column: cluster}\n", "teams (line 1): unknown field"),
        ("- team\n", "a trace mapping is a YAML mapping"),
        ("team: {column: [\n", "not valid YAML"),
    ],
)
def test_bad_mapping_files(text: str, message: str) -> None:
    with pytest.raises(TraceError) as caught:
        parse_mapping(text, source="m.yaml")
    assert message in str(caught.value)
    assert "m.yaml" in str(caught.value)


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        (TraceMapping(team=Assign(column="cluster", map={"c1": "robotics"})), "'robotics' not a team"),
        (TraceMapping(priority=Assign(random={"urgent": 1.0})), "'urgent' not a priority class"),
        (TraceMapping(team=Assign(column="region")), "has no column 'region'"),
        (TraceMapping(team=Assign(column="cluster", map={"c9": "nlp"})), "line 2: cluster 'c1' is not in the"),
    ],
)
def test_mapping_checked_against_config_and_trace(
    tmp_path: Path, config: QuotaConfig, mapping: TraceMapping, message: str
) -> None:
    path = write(tmp_path, ITP_HEAD + "c1,a,0,60,1\n")
    with pytest.raises(TraceError) as caught:
        read_trace(path, "itp", mapping, config)
    assert message in str(caught.value)


def test_default_mappings_are_documented_shapes(config: QuotaConfig) -> None:
    itp = default_mapping("itp", config)
    assert itp.team == Assign(column="cluster", round_robin=True)
    assert (itp.checkpoint_interval, itp.checkpoint_fraction) == ("30m", 0.5)
    openb = default_mapping("openb", config)
    assert openb.team == Assign(column="name", hash=True)
    assert openb.priority == Assign(column="qos", map=qos_map(config))
    assert default_mapping("csv", config).team == Assign(column="team")
    assert default_mapping("csv", config).kind == Assign(column="kind")
    assert itp.kind is None and openb.kind is None  # Jobs, unless a mapping says otherwise


# -- the sample files ----------------------------------------------------------------------------------------------


def _slice_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_itp_slice", SAMPLES / "make_itp_slice.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sample_quota_file_is_a_realistic_org() -> None:
    config = load_config_file(SAMPLES / "org-quota.yaml")
    assert 8 <= len(config.teams) <= 10
    assert {c.name for c in config.cohorts} >= {"org", "research", "product"}
    assert {f.name for f in config.flavors} == {"h100", "a100"}
    assert all("nvidia.com/gpu.product" in f.node_labels for f in config.flavors)
    assert config.fair_sharing.enabled
    development = config.priority_class("development")
    assert development is not None and development.checkpoint_timeout == 120_000
    assert any(not pc.preemptible for pc in config.priority_classes)
    assert any(c.quotas for c in config.cohorts)  # a cohort's own pool


def test_sample_slice_reads_and_overloads_the_sample_org() -> None:
    config = load_config_file(SAMPLES / "org-quota.yaml")
    jobs = read_trace(SAMPLES / "itp-slice.csv", "csv", TraceMapping(), config)
    assert 2_000 <= len(jobs) <= 4_000
    assert {job.team for job in jobs} == {team.name for team in config.teams}
    gpu = "nvidia.com/gpu"
    quota = sum(
        entry.resources[gpu].nominal // 1000
        for holder in (*config.teams, *config.cohorts)
        for group in holder.groups()
        for entry in group.flavors
        if gpu in entry.resources
    )
    assert quota == 1024
    # Demand if every job started on submission: its peak must exceed everything the org has.
    changes = sorted([(j.submit_ms, j.gpus) for j in jobs] + [(j.submit_ms + j.duration_ms, -j.gpus) for j in jobs])
    running = peak = 0
    for _, delta in changes:
        running += delta
        peak = max(peak, running)
    assert peak > quota
    mapping = load_mapping(SAMPLES / "itp-slice.mapping.yaml")
    assert mapping.team is not None and mapping.team.map is not None and len(mapping.team.map) == 10


def test_sample_kinds_trace_is_a_day_of_gangs_for_the_sample_org() -> None:
    config = load_config_file(SAMPLES / "org-quota.yaml")
    jobs = read_trace(SAMPLES / "kinds-day.csv", "csv", TraceMapping(), config)
    assert {job.team for job in jobs} == {team.name for team in config.teams}
    assert {job.kind for job in jobs} >= {"Job", "JobSet", "PyTorchJob", "RayJob", "MPIJob", "JAXJob", "TFJob"}
    assert max(job.submit_ms for job in jobs) < 86_400_000 and max(job.pods for job in jobs) == 64
    summary = replay(config, jobs).summary()
    assert summary["finished"] == len(jobs)
    kinds = summary["kinds"]
    assert isinstance(kinds, dict) and kinds["JobSet"]["preemptions"] == 1  # the borrowing pretraining gang, reclaimed


def test_sample_slice_is_what_the_script_makes() -> None:
    script = _slice_script()
    assert script.make_slice() == (SAMPLES / "itp-slice.csv").read_text(encoding="utf-8")
