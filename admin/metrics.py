"""Prometheus metrics, prefix `kuota_`: counters and histograms fed by a Journal, gauges read at scrape time.

Kueue-equivalent: pending workloads per team and status, admission attempts and cycle duration, admitted /
evicted / preempted workloads with reasons, queueing wait, quota / usage / borrowing per team, flavor and
resource, weighted share. kuota's own: checkpoint request→ack latency, checkpoint timeouts, lost GPU-seconds,
fair-share credit and factor, ledger outbox depth, webhook latency per endpoint.

Everything lives in a dedicated CollectorRegistry (`REGISTRY` unless told otherwise), never the global one, so
that tests and several servers in one process do not collide.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from admin.ports import RuntimePort
from admission.workload import Workload
from queues.read_model import ControllerReader, QueueManagerReader
from quota.budgets import HOUR_MS, BudgetStatus
from quota.preemption import PreemptionReason
from quota.tree import FlavorResource, QuotaTree

REGISTRY = CollectorRegistry(auto_describe=True)
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200)
_CHECKPOINT_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)


_Metric = TypeVar("_Metric", Counter, Histogram)


class _Labelled(Generic[_Metric]):
    """A labelled counter or histogram whose children are looked up once per label values.

    prometheus_client's `labels()` validates its arguments and takes the metric's lock on every call; the webhook
    and the scheduling loop ask for the same few children once per review and per step, so the child is kept.
    Label values here are teams, reasons and endpoints: as bounded as the children prometheus_client keeps anyway.
    """

    def __init__(self, metric: _Metric) -> None:
        self.metric: _Metric = metric
        self._children: dict[tuple[str, ...], _Metric] = {}

    def labels(self, *values: str) -> _Metric:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


def _counter(name: str, documentation: str, labels: list[str], registry: CollectorRegistry) -> _Labelled[Counter]:
    return _Labelled(Counter(name, documentation, labels, registry=registry))


def _histogram(
    name: str, documentation: str, labels: list[str], buckets: tuple[float, ...], registry: CollectorRegistry
) -> _Labelled[Histogram]:
    return _Labelled(Histogram(name, documentation, labels, buckets=buckets, registry=registry))


class KuotaMetrics:
    """The counters and histograms, created once per registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.admission_attempts = _counter(
            "kuota_admission_attempts",
            "Heads considered by scheduling cycles, by result (success|inadmissible)",
            ["result"],
            registry,
        )
        self.cycle_duration = Histogram(
            "kuota_admission_attempt_duration_seconds",
            "Duration of one scheduling cycle",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.cycles = Counter("kuota_scheduling_cycles", "Scheduling cycles run", registry=registry)
        self.admitted = _counter("kuota_admitted_workloads", "Workloads admitted", ["team"], registry)
        self.evicted = _counter(
            "kuota_evicted_workloads",
            "Workloads evicted (suspended and requeued), by reason",
            ["team", "reason"],
            registry,
        )
        self.preempted = _counter(
            "kuota_preempted_workloads", "Preemptions issued, by victim team and reason", ["team", "reason"], registry
        )
        self.finished = _counter("kuota_finished_workloads", "Workloads finished", ["team", "result"], registry)
        self.wait = _histogram(
            "kuota_admission_wait_time_seconds",
            "Time from (re)queueing to admission",
            ["team"],
            _WAIT_BUCKETS,
            registry,
        )
        self.checkpoint_latency = _histogram(
            "kuota_checkpoint_ack_latency_seconds",
            "Checkpoint request to acknowledgement",
            ["via"],
            _CHECKPOINT_BUCKETS,
            registry,
        )
        self.checkpoint_timeouts = _counter(
            "kuota_checkpoint_timeouts", "Checkpoint requests that timed out", ["team"], registry
        )
        self.node_failure_evictions = _counter(
            "kuota_node_failure_evictions",
            "Admitted workloads evicted because a node they had pods on was NotReady or gone past the grace period",
            ["team"],
            registry,
        )
        self.lost_gpu_seconds = _counter(
            "kuota_lost_gpu_seconds", "GPU-seconds of work lost to preemption", ["team"], registry
        )
        self.operator_actions = _counter(
            "kuota_operator_actions", "Hold and release by operators", ["action"], registry
        )
        self.config_reloads = Counter("kuota_config_reloads", "Quota files applied", registry=registry)
        self.decision_errors = _counter(
            "kuota_decision_errors",
            "Workloads kuota failed to decide for (the error is their reason to wait)",
            ["team"],
            registry,
        )
        self.webhook_latency = _histogram(
            "kuota_webhook_request_duration_seconds",
            "Admission webhook request latency",
            ["endpoint"],
            _LATENCY_BUCKETS,
            registry,
        )


_METRICS: dict[int, KuotaMetrics] = {}


def metrics_for(registry: CollectorRegistry = REGISTRY) -> KuotaMetrics:
    metrics = _METRICS.get(id(registry))
    if metrics is None:
        metrics = _METRICS[id(registry)] = KuotaMetrics(registry)
    return metrics


def observe_webhook(endpoint: str, seconds: float, registry: CollectorRegistry = REGISTRY) -> None:
    """The webhook server calls this once per AdmissionReview, endpoint being its path (`/mutate`, `/validate`)."""
    metrics_for(registry).webhook_latency.labels(endpoint).observe(seconds)


class MetricsJournal:
    """A Journal that turns controller steps into counters and histograms. Times are controller milliseconds."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.m = metrics_for(registry)
        self._queued_at: dict[str, int] = {}
        self._reason: dict[str, str] = {}
        self._checkpoint: dict[str, tuple[int, str]] = {}

    def workload_seen(self, workload: Workload, at: int) -> None:
        if workload.admission is None:
            self._queued_at[workload.name] = at

    def queued(self, workload: Workload, position: int, at: int) -> None:
        self._queued_at.setdefault(workload.name, at)

    def admitted(
        self,
        workload: Workload,
        attempt: int,
        usage: Mapping[FlavorResource, int],
        borrowed: Mapping[FlavorResource, int],
        at: int,
    ) -> None:
        self.m.admitted.labels(workload.team).inc()
        since = self._queued_at.pop(workload.name, None)
        if since is not None:
            self.m.wait.labels(workload.team).observe(max(0, at - since) / 1000)

    def finished(self, workload: Workload, attempt: int, succeeded: bool, at: int) -> None:
        self.m.finished.labels(workload.team, "succeeded" if succeeded else "failed").inc()
        self._forget(workload.name)

    def preemption_issued(
        self, victim: Workload, attempt: int, preemptor: str | None, reason: PreemptionReason | str, at: int
    ) -> None:
        label = "Manual" if str(reason).startswith("Manual") else str(reason)
        self._reason[victim.name] = label
        self.m.preempted.labels(victim.team, label).inc()

    def checkpoint_requested(self, victim: Workload, attempt: int, deadline: int, via: str, at: int) -> None:
        self._checkpoint[victim.name] = (at, via)

    def checkpoint_acked(self, victim: Workload, attempt: int, checkpoint_id: str | None, at: int) -> None:
        requested = self._checkpoint.pop(victim.name, None)
        if requested is not None:
            self.m.checkpoint_latency.labels(requested[1]).observe(max(0, at - requested[0]) / 1000)

    def checkpoint_timed_out(self, victim: Workload, attempt: int, at: int) -> None:
        self._checkpoint.pop(victim.name, None)
        self.m.checkpoint_timeouts.labels(victim.team).inc()

    def suspended(self, victim: Workload, attempt: int, lost_gpu_milliseconds: int, at: int) -> None:
        # lost_gpu_milliseconds is milli-GPU-seconds: thousandths of a GPU-second.
        self.m.lost_gpu_seconds.labels(victim.team).inc(lost_gpu_milliseconds / 1000)

    def requeued(self, workload: Workload, attempt: int, eligible_at: int, at: int) -> None:
        self.m.evicted.labels(workload.team, self._reason.pop(workload.name, "Evicted")).inc()
        self._queued_at[workload.name] = at

    def deactivated(self, workload: Workload, attempt: int, message: str, at: int) -> None:
        self.m.evicted.labels(workload.team, self._reason.pop(workload.name, "Evicted")).inc()

    def node_failed(self, victim: Workload, attempt: int, node: str, since: int, at: int) -> None:
        self.m.node_failure_evictions.labels(victim.team).inc()

    def held(self, workload: Workload, actor: str, at: int) -> None:
        self.m.operator_actions.labels("hold").inc()

    def released(self, workload: Workload, actor: str, at: int) -> None:
        self.m.operator_actions.labels("release").inc()

    def config_applied(self, text: str, source: str, at: int) -> None:
        self.m.config_reloads.inc()

    def decision_failed(self, workload: Workload, message: str, at: int) -> None:
        self.m.decision_errors.labels(workload.team).inc()

    def budget_reached(self, status: BudgetStatus, percent: int, pending: Sequence[Workload], at: int) -> None:
        return None  # kuota_budget_spent and kuota_budget_remaining are read at scrape time

    def cycle(self, heads: int, admitted: int, preempting: int, duration_s: float, at: int) -> None:
        self.m.cycles.inc()
        self.m.cycle_duration.observe(duration_s)
        if admitted:
            self.m.admission_attempts.labels("success").inc(admitted)
        if heads > admitted:
            self.m.admission_attempts.labels("inadmissible").inc(heads - admitted)

    def _forget(self, name: str) -> None:
        self._queued_at.pop(name, None)
        self._reason.pop(name, None)
        self._checkpoint.pop(name, None)


def metrics_journal(registry: CollectorRegistry = REGISTRY) -> MetricsJournal:
    """For the controller's `Journals(...)` fan-out."""
    return MetricsJournal(registry)


class RuntimeCollector(Collector):
    """Gauges computed from the runtime at scrape time: queues, quota, usage, borrowing, shares, credits, ledger."""

    def __init__(self, runtime: RuntimePort) -> None:
        self.runtime = runtime

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names depend on nothing but the code, yet computing them needs the runtime

    def collect(self) -> Iterator[Metric]:
        runtime = self.runtime
        ledger = runtime.ledger
        outbox = GaugeMetricFamily("kuota_ledger_outbox_depth", "Ledger events recorded and not yet committed")
        healthy = GaugeMetricFamily("kuota_ledger_healthy", "1 when the ledger's last write succeeded")
        if ledger is not None:
            outbox.add_metric([], ledger.backlog)
            healthy.add_metric([], 1 if ledger.healthy else 0)
        yield outbox
        yield healthy
        leader = GaugeMetricFamily("kuota_leader", "1 when this replica runs the controller as leader")
        leader.add_metric([], 1 if runtime.leader and runtime.controller is not None else 0)
        yield leader
        controller = runtime.controller
        if controller is None:
            return
        yield from _queue_gauges(controller.manager)
        yield from _quota_gauges(controller.manager.live)
        yield from _credit_gauges(controller, runtime.now())
        yield from _budget_gauges(controller, runtime.now())


def _queue_gauges(manager: QueueManagerReader) -> Iterator[Metric]:
    pending = GaugeMetricFamily("kuota_pending_workloads", "Pending workloads", labels=["team", "status"])
    running = GaugeMetricFamily("kuota_admitted_active_workloads", "Admitted workloads running", labels=["team"])
    evicting = GaugeMetricFamily("kuota_evicting_workloads", "Workloads being evicted", labels=["team"])
    held = GaugeMetricFamily("kuota_held_workloads", "Workloads held by operators", labels=["team"])
    counts: dict[tuple[str, str], int] = {}
    for name, state in manager.state.items():
        key = (manager.workloads[name].team, str(state))
        counts[key] = counts.get(key, 0) + 1
    held_by_team: dict[str, int] = {}
    for name in manager.held:
        if name in manager.workloads:
            team = manager.workloads[name].team
            held_by_team[team] = held_by_team.get(team, 0) + 1
    for team, queue in manager.queues.items():
        parked = len(queue.inadmissible)
        pending.add_metric([team, "active"], len(queue) - parked)
        pending.add_metric([team, "inadmissible"], parked)
        running.add_metric([team], counts.get((team, "admitted"), 0))
        evicting.add_metric([team], counts.get((team, "evicting"), 0))
        held.add_metric([team], held_by_team.get(team, 0))
    yield from (pending, running, evicting, held)


def _quota_gauges(live: QuotaTree) -> Iterator[Metric]:
    labels = ["team", "flavor", "resource"]
    nominal = GaugeMetricFamily("kuota_team_nominal_quota", "Nominal quota (units)", labels=labels)
    borrowing = GaugeMetricFamily("kuota_team_borrowing_limit", "Borrowing limit (units)", labels=labels)
    lending = GaugeMetricFamily("kuota_team_lending_limit", "Lending limit (units)", labels=labels)
    usage = GaugeMetricFamily("kuota_team_resource_usage", "Quota in use (units)", labels=labels)
    borrowed = GaugeMetricFamily("kuota_team_resource_borrowed", "Usage above nominal (units)", labels=labels)
    cohort_usage = GaugeMetricFamily(
        "kuota_cohort_resource_usage", "Cohort subtree usage (units)", labels=["cohort", "flavor", "resource"]
    )
    cohort_quota = GaugeMetricFamily(
        "kuota_cohort_subtree_quota", "Cohort subtree quota (units)", labels=["cohort", "flavor", "resource"]
    )
    share = GaugeMetricFamily(
        "kuota_team_weighted_share", "Dominant resource share (DRS; +Inf when weight 0)", labels=["team"]
    )
    for name, node in live.teams.items():
        for fr in sorted(set(node.quotas) | {fr for fr, v in node.usage.items() if v}):
            key = [name, fr[0], fr[1]]
            limits = node.quotas.get(fr)
            nominal.add_metric(key, (limits.nominal if limits else 0) / 1000)
            if limits is not None and limits.borrowing_limit is not None:
                borrowing.add_metric(key, limits.borrowing_limit / 1000)
            if limits is not None and limits.lending_limit is not None:
                lending.add_metric(key, limits.lending_limit / 1000)
            used = node.usage.get(fr, 0)
            usage.add_metric(key, used / 1000)
            borrowed.add_metric(key, max(0, used - node.subtree_quota.get(fr, 0)) / 1000)
        drs = live.dominant_resource_share(node)
        share.add_metric([name], float("inf") if drs.infinite else float(drs.value))
    for name, node in live.cohorts.items():
        for fr in sorted(node.subtree_quota):
            cohort_usage.add_metric([name, fr[0], fr[1]], node.usage.get(fr, 0) / 1000)
            cohort_quota.add_metric([name, fr[0], fr[1]], node.subtree_quota[fr] / 1000)
    yield from (nominal, borrowing, lending, usage, borrowed, cohort_usage, cohort_quota, share)


def _budget_gauges(controller: ControllerReader, now: int) -> Iterator[Metric]:
    labels = ["team", "resource", "window", "scope"]
    remaining = GaugeMetricFamily(
        "kuota_budget_remaining",
        "Resource-hours left of a budget in its current window (scope: team, or cohort for a cohort's budget)",
        labels=labels,
    )
    spent = GaugeMetricFamily(
        "kuota_budget_spent", "Resource-hours spent of a budget in its current window", labels=labels
    )
    limit = GaugeMetricFamily("kuota_budget_limit", "Resource-hours a budget allows per window", labels=labels)
    for status in controller.budgets.current(now):
        key = [status.owner, status.resource, status.window, "cohort" if status.cohort else "team"]
        remaining.add_metric(key, status.remaining / HOUR_MS / 1000)
        spent.add_metric(key, status.spent / HOUR_MS / 1000)
        limit.add_metric(key, status.limit / HOUR_MS / 1000)
    yield from (remaining, spent, limit)


def _credit_gauges(controller: ControllerReader, now: int) -> Iterator[Metric]:
    credit = GaugeMetricFamily("kuota_fair_share_credit", "Fair-share credit S - U per team", labels=["team"])
    factor = GaugeMetricFamily("kuota_fair_share_factor", "Fair-share factor F = 2^(-U/S) per team", labels=["team"])
    for team, c in sorted(controller.credits.credits(now).items()):
        credit.add_metric([team], float(c.credit))
        factor.add_metric([team], float(c.factor))
    yield from (credit, factor)
