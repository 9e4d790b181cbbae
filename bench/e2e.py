"""Kueue's baseline scheduler-performance mix end to end, in real time, through the fake API server.

Every workload of perf-baseline (5 cohorts × 6 teams, 15,000 workloads of classes small / medium / large) becomes a
batch/v1 Job created with the kubernetes-asyncio client at its submit time: queue label, priority-class label, cpu
request and the fake kubelet's runtime annotation. kuota's real mutating and validating webhooks (served over TLS,
registered from config/deploy/webhooks.yaml) suspend it, kuota's controller component (as `kuota serve
--components controller` builds it, with a SQLite ledger) admits it, and the fake kubelet completes it after its
runtime. A watch on the Jobs times each one from its creation to its unsuspension and to its completion.

Printed: wall time, admissions per second, average time to admission per class, the least any team used of its
nominal quota over the run, and the ideal (capacity-bound) makespan of the mix, next to Kueue's published figures
(../shared/data/manifests/kueue/perf-baseline__rangespec.yaml), which hold for the full mix in real time.

    .venv/bin/python bench/e2e.py --scale 0.05 --time-scale 10

`--scale F` keeps a fraction F of every team's workloads (same teams, same classes, same creation intervals);
`--time-scale F` multiplies runtimes and creation intervals. The run stops by itself: when every Job has finished,
or at `--timeout` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

import tests.e2e.conftest as e2e
from admission.labels import PRIORITY_LABEL, QUEUE_LABEL
from bench.kueue_perf import BASELINE, PerfJob, PerfMix, load_mix, load_ranges
from tests.fakekube import FakeKubelet, FakeKubeServer
from tests.fakekube.testing import job_manifest

#: Kueue's harness evicts at once; a preempted fake Job never checkpoints, so the victim's deadline is kept short.
CHECKPOINT_TIMEOUT = "100ms"
KUEUE_WALL_S = 351.1
WATCH_CHUNK_S = 30
SHUTDOWN_S = 10.0


# -- the mix ------------------------------------------------------------------------------------------------------


def scaled_generator(source: Path, scale: float, time_scale: float) -> dict[str, Any]:
    """Kueue's generator file with fewer workloads per set and stretched runtimes and creation intervals."""
    spec: dict[str, Any] = yaml.safe_load(source.read_text())
    for cohort_class in spec["cohorts"]:
        for queue_set in cohort_class["queuesSets"]:
            for workload_set in queue_set["workloadsSets"]:
                workload_set["count"] = max(1, round(workload_set["count"] * scale))
                workload_set["creationIntervalMs"] = round(workload_set["creationIntervalMs"] * time_scale)
                for w in workload_set["workloads"]:
                    w["runtimeMs"] = max(1, round(w["runtimeMs"] * time_scale))
    return spec


def priority_classes(mix: PerfMix) -> dict[str, int]:
    return {j.klass: j.workload.priority for j in mix.jobs}


def quota_file(mix: PerfMix, path: Path) -> Path:
    """The mix's teams and cohorts as a quota file, plus one priority class per workload class."""
    data = mix.config.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data["priorityClasses"] = [
        {"name": name, "value": value, "checkpointTimeout": CHECKPOINT_TIMEOUT}
        for name, value in sorted(priority_classes(mix).items(), key=lambda kv: kv[1])
    ]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def job_body(job: PerfJob) -> dict[str, Any]:
    namespace, _, name = job.workload.name.partition("/")
    queue = (job.workload.queue or "").partition("/")[2]
    return job_manifest(
        name,
        namespace=namespace,
        labels={QUEUE_LABEL: queue, PRIORITY_LABEL: job.klass},
        cpu=str(job.workload.pod_sets[0].requests["cpu"] // 1000),
        runtime_s=job.runtime_ms / 1000,
    )


def ideal_makespan_s(mix: PerfMix) -> float:
    work = sum(j.runtime_ms * j.workload.pod_sets[0].requests["cpu"] for j in mix.jobs)
    return work / mix.capacity_milli / 1000


# -- what the watch sees ------------------------------------------------------------------------------------------


@dataclass
class Track:
    klass: str
    team: str
    cpu: int  # milli
    scheduled: float  # seconds after the start
    created: float | None = None  # when the create request was sent
    admitted: float | None = None  # first unsuspension seen
    running_since: float | None = None
    finished: float | None = None
    admissions: int = 0
    used_cpu_ms: float = 0.0  # milli-cpu × seconds


@dataclass
class Observer:
    tracks: dict[str, Track]
    start: float
    all_done: asyncio.Event = field(default_factory=asyncio.Event)
    pending: int = 0
    errors: list[str] = field(default_factory=list)
    create_failures: int = 0

    def now(self) -> float:
        return time.monotonic() - self.start

    def see(self, job: dict[str, Any]) -> None:
        meta = job.get("metadata") or {}
        track = self.tracks.get(f"{meta.get('namespace')}/{meta.get('name')}")
        if track is None or track.finished is not None:
            return
        now = self.now()
        suspended = (job.get("spec") or {}).get("suspend") is True
        conditions = (job.get("status") or {}).get("conditions") or []
        done = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions)
        if not suspended and track.running_since is None and not done:
            track.running_since = now
            track.admissions += 1
            if track.admitted is None:
                track.admitted = now
        if (suspended or done) and track.running_since is not None:
            track.used_cpu_ms += track.cpu * (now - track.running_since)
            track.running_since = None
        if done:
            if track.admitted is None:  # admitted and finished between two events the watch delivered
                track.admitted = now
                track.admissions = 1
            track.finished = now
            self.pending -= 1
            if self.pending <= 0:
                self.all_done.set()


async def watch_jobs(batch: client.BatchV1Api, observer: Observer, deadline: float) -> None:
    """List, then watch from the list's resourceVersion; resume after each chunk, relist after a 410."""
    version: str | None = None
    while time.monotonic() < deadline and not observer.all_done.is_set():
        try:
            if version is None:
                listing = await batch.list_job_for_all_namespaces(label_selector=QUEUE_LABEL, _preload_content=False)
                body = await listing.json()
                for item in body.get("items") or []:
                    observer.see(item)
                version = body["metadata"]["resourceVersion"]
            stream = watch.Watch(return_type="object")
            async with stream:
                async for event in stream.stream(
                    batch.list_job_for_all_namespaces,
                    label_selector=QUEUE_LABEL,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_CHUNK_S,
                ):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        observer.see(event["object"])
                    version = stream.resource_version or version
                    if observer.all_done.is_set():
                        return
        except ApiException as exc:
            if exc.status == 410:
                version = None
                continue
            observer.errors.append(f"watch: {exc.status} {exc.reason}")
            await asyncio.sleep(0.5)
        except (TimeoutError, OSError) as exc:
            observer.errors.append(f"watch: {exc!r}")
            await asyncio.sleep(0.5)


# -- submitting ---------------------------------------------------------------------------------------------------


async def submit_all(
    batch: client.BatchV1Api, jobs: list[PerfJob], observer: Observer, in_flight: int, time_base: float
) -> None:
    """Create every Job at its submit time, at most `in_flight` requests at once (a late one goes as soon as it can)."""
    gate = asyncio.Semaphore(in_flight)
    tasks: set[asyncio.Task[None]] = set()

    async def create(job: PerfJob) -> None:
        try:
            track = observer.tracks[job.workload.name]
            track.created = observer.now()
            for attempt in range(3):
                try:
                    await batch.create_namespaced_job(job.workload.name.partition("/")[0], job_body(job))
                    return
                except ApiException as exc:
                    if exc.status == 409:
                        return
                    if attempt == 2 or exc.status < 500:
                        raise
                    await asyncio.sleep(0.2)
        except Exception as exc:  # counted and reported; the Job is dropped from the run
            observer.create_failures += 1
            observer.errors.append(f"create {job.workload.name}: {exc!r}"[:300])
            track = observer.tracks[job.workload.name]
            if track.finished is None:
                track.finished = observer.now()
                observer.pending -= 1
                if observer.pending <= 0:
                    observer.all_done.set()
        finally:
            gate.release()

    for job in jobs:
        delay = time_base + job.submit_ms / 1000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await gate.acquire()
        task = asyncio.create_task(create(job))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


# -- the run ------------------------------------------------------------------------------------------------------


@dataclass
class Result:
    mix: PerfMix
    observer: Observer
    wall_s: float
    timed_out: bool
    controller_cpu_s: float


async def run(mix: PerfMix, tmp: Path, args: argparse.Namespace) -> Result:
    quota = quota_file(mix, tmp / "quota.yaml")
    # The rig's helpers read their quota file from this module global; point it at the mix's.
    e2e.QUOTA = quota
    teams = sorted({j.workload.team for j in mix.jobs})
    async with FakeKubeServer(bookmark_interval_s=1.0, history_limit=max(10_000, 10 * len(mix.jobs))) as server:
        for namespace in ("kuota-system", *teams):
            await server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        webhook = await e2e.start_webhook(server, tmp)
        api = await server.api_client(user="alice")
        batch = client.BatchV1Api(api)
        try:
            async with FakeKubelet(server, default_runtime_s=1.0) as kubelet:
                rig = e2e.Rig(server, kubelet, tmp, batch, client.CoreV1Api(api))
                try:
                    return await _measure(rig, mix, quota, batch, args)
                finally:
                    for component in rig.controllers:
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(component.stop(), SHUTDOWN_S)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(webhook.stop(), SHUTDOWN_S)


async def _measure(
    rig: e2e.Rig, mix: PerfMix, quota: Path, batch: client.BatchV1Api, args: argparse.Namespace
) -> Result:
    controller = await rig.controller(config=quota, kube_qps=args.kube_qps, kube_burst=args.kube_burst)
    await e2e.eventually(lambda: controller.runtime.leader, timeout_s=30, what="the controller leads")
    tracks = {
        j.workload.name: Track(j.klass, j.workload.team, j.workload.pod_sets[0].requests["cpu"], j.submit_ms / 1000)
        for j in mix.jobs
    }
    start = time.monotonic()
    observer = Observer(tracks, start, pending=len(tracks))
    deadline = start + args.timeout
    cpu_start = time.process_time()
    watches = rig.server.open_watches
    watcher = asyncio.create_task(watch_jobs(batch, observer, deadline))
    await rig.server.wait_for_watches(count=watches + 1, timeout_s=10)
    submitter = asyncio.create_task(submit_all(batch, mix.jobs, observer, args.in_flight, start))
    timed_out = False
    try:
        await asyncio.wait_for(observer.all_done.wait(), max(1.0, deadline - time.monotonic()))
    except TimeoutError:
        timed_out = True
    wall = observer.now()
    for task in (submitter, watcher):
        task.cancel()
    await asyncio.gather(submitter, watcher, return_exceptions=True)
    for track in tracks.values():  # close what still runs at a timeout
        if track.running_since is not None:
            track.used_cpu_ms += track.cpu * (wall - track.running_since)
            track.running_since = None
    return Result(mix, observer, wall, timed_out, time.process_time() - cpu_start)


# -- the report ---------------------------------------------------------------------------------------------------


def report(result: Result, args: argparse.Namespace) -> None:
    mix, observer = result.mix, result.observer
    tracks = list(observer.tracks.values())
    ranges = load_ranges()
    full = args.scale == 1 and args.time_scale == 1
    ideal = ideal_makespan_s(mix)
    admitted = [t for t in tracks if t.admitted is not None]
    finished = [t for t in tracks if t.finished is not None and t.admitted is not None]
    print(
        f"mix: {len(mix.config.teams)} teams in {len(mix.config.cohorts)} cohorts, {len(tracks)} workloads"
        f" (scale {args.scale:g}, time scale {args.time_scale:g}); total nominal {mix.capacity_milli // 1000} cpu"
    )
    wall_limit = ranges["cmd"]["maxWallMs"] / 1000
    kueue = f"Kueue {KUEUE_WALL_S:.0f} s, limit {wall_limit:.0f} s" + ("" if full else " for the full mix")
    print(f"wall time            {result.wall_s:8.1f} s{'  (TIMED OUT)' if result.timed_out else ''}   [{kueue}]")
    print(
        f"ideal makespan       {ideal:8.1f} s   (total cpu·runtime / total nominal cpu)   wall/ideal"
        f" {result.wall_s / ideal:.2f}   [Kueue {KUEUE_WALL_S / (ideal_makespan_s(load_mix()) or 1):.2f}]"
    )
    admissions = sum(t.admissions for t in tracks)
    print(
        f"admissions           {len(admitted):8d} of {len(tracks)} ({admissions} counting readmissions),"
        f" {len(admitted) / result.wall_s:.1f}/s; finished {len(finished)}"
    )
    lags = [t.created - t.scheduled for t in tracks if t.created is not None]
    if lags:
        print(f"submission lag       mean {statistics.fmean(lags):.2f} s, max {max(lags):.2f} s behind schedule")
    limits = ranges["wlClassesMaxAvgTimeToAdmissionMs"]
    waits: dict[str, list[float]] = defaultdict(list)
    for t in admitted:
        if t.created is not None:
            waits[t.klass].append(max(0.0, t.admitted - t.created))  # type: ignore[operator]
    for klass in sorted(limits, key=lambda k: limits[k]):
        values = waits.get(klass, [])
        average = statistics.fmean(values) if values else float("nan")
        limit = limits[klass] / 1000
        verdict = f"{'met' if average <= limit else 'MISSED'}" if full else "full mix only"
        print(
            f"  {klass:<7} average time to admission {average:8.2f} s over {len(values):5d}"
            f"   [Kueue ≤ {limit:.0f} s: {verdict}]"
        )
    span = max(1e-9, result.wall_s)  # from the first submission to the last completion (or the timeout)
    nominal = {t.name: sum(q.resources["cpu"].nominal for q in t.groups()[0].flavors) for t in mix.config.teams}
    used: dict[str, float] = defaultdict(float)
    for t in tracks:
        used[t.team] += t.used_cpu_ms
    shares = {team: used[team] / (nominal[team] * span) for team in nominal if nominal[team]}
    least = min(shares, key=lambda k: shares[k])
    mean_share = statistics.fmean(shares.values())
    floor = ranges["clusterQueueClassesMinUsage"]["cq"]
    print(
        f"min team usage       {shares[least] * 100:8.1f} %  ({least}; mean {mean_share * 100:.1f} %"
        f" of nominal over {span:.1f} s)   [Kueue ≥ {floor} %]"
    )
    print(f"process CPU          {result.controller_cpu_s:8.1f} s (API server, webhook, controller, kubelet, client)")
    if observer.errors:
        print(
            f"errors: {len(observer.errors)} (create failures {observer.create_failures}); first: {observer.errors[0]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of every team's workloads (default 1)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiply runtimes and creation intervals")
    parser.add_argument("--timeout", type=float, default=None, help="global limit in seconds (default from the mix)")
    parser.add_argument("--in-flight", type=int, default=64, help="concurrent create requests at most")
    parser.add_argument("--kube-qps", type=float, default=e2e.Options.kube_qps, help="the controller's API rate")
    parser.add_argument("--kube-burst", type=int, default=e2e.Options.kube_burst)
    parser.add_argument("--verbose", action="store_true", help="kuota's and the fake server's logs")
    args = parser.parse_args()
    if not 0 < args.scale <= 1 or args.time_scale <= 0:
        parser.error("--scale takes a fraction in (0, 1], --time-scale a positive factor")
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    with tempfile.TemporaryDirectory(prefix="kuota-e2e-") as tmp:
        generator = Path(tmp) / "generator.yaml"
        generator.write_text(yaml.safe_dump(scaled_generator(BASELINE, args.scale, args.time_scale)))
        mix = load_mix(generator)
        last_submit = max(j.submit_ms for j in mix.jobs) / 1000
        if args.timeout is None:
            args.timeout = 120 + 2 * last_submit + 15 * ideal_makespan_s(mix)
        print(f"running {len(mix.jobs)} workloads; stops at the latest after {args.timeout:.0f} s", flush=True)
        result = asyncio.run(asyncio.wait_for(run(mix, Path(tmp), args), args.timeout + 120))
    report(result, args)


if __name__ == "__main__":
    main()
