"""The labelled metrics keep their children; what a scrape reads must still count every call."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from admin.metrics import metrics_for, metrics_journal, observe_webhook
from admission.workload import Workload


def _sample(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float | None:
    return registry.get_sample_value(name, labels)


def test_each_call_counts_and_teams_stay_apart() -> None:
    registry = CollectorRegistry()
    journal = metrics_journal(registry)
    vision, nlp = Workload("a", "vision", 100, ()), Workload("b", "nlp", 100, ())
    for at in (1, 2, 3):
        journal.admitted(vision, 1, {}, {}, at)
    journal.admitted(nlp, 1, {}, {}, 4)
    assert _sample(registry, "kuota_admitted_workloads_total", {"team": "vision"}) == 3
    assert _sample(registry, "kuota_admitted_workloads_total", {"team": "nlp"}) == 1


def test_a_child_is_looked_up_once_and_is_the_registry_s_own() -> None:
    registry = CollectorRegistry()
    family = metrics_for(registry).webhook_latency
    assert family.labels("/mutate") is family.labels("/mutate")
    assert family.labels("/mutate") is family.metric.labels("/mutate")
    for seconds in (0.002, 0.004):
        observe_webhook("/mutate", seconds, registry)
    observe_webhook("/validate", 0.5, registry)
    count = "kuota_webhook_request_duration_seconds_count"
    assert _sample(registry, count, {"endpoint": "/mutate"}) == 2
    assert _sample(registry, count, {"endpoint": "/validate"}) == 1
    assert _sample(registry, "kuota_webhook_request_duration_seconds_sum", {"endpoint": "/validate"}) == 0.5
