"""Expected run times from past runs: the median is a real run's, levels fall back only when too few runs are
there, run time already spent conditions the rest, and a declared run time wins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission.workload import Workload
from quota.pod_set import PodSet
from sim.runtimes import MIN_SAMPLES, RunSample, RuntimeBook, size_class

durations = st.lists(st.integers(min_value=1, max_value=10**10), min_size=MIN_SAMPLES, max_size=60)


def job(team: str = "nlp", queue: str = "nlp/default", gpus: int = 4, declared: int | None = None) -> Workload:
    return Workload(
        name="w",
        team=team,
        priority=0,
        pod_sets=(PodSet("main", 1, {"nvidia.com/gpu": gpus * 1000}),),
        queue=queue,
        expected_runtime_ms=declared,
    )


@pytest.mark.parametrize(
    ("milli", "size"),
    [(0, "cpu"), (500, "1"), (1000, "1"), (1001, "2-8"), (8000, "2-8"), (8001, "9-32"), (32000, "9-32"),
     (32001, ">32"), (512_000, ">32")],
)  # fmt: skip
def test_size_classes(milli: int, size: str) -> None:
    assert size_class(milli) == size


@given(durations)
def test_the_median_is_a_run_with_half_on_each_side(runs: list[int]) -> None:
    book = RuntimeBook(RunSample("nlp", "nlp/default", 4000, r) for r in runs)
    expected = book.expected(job())
    assert expected is not None and expected.basis == "team+queue+size" and expected.samples == len(runs)
    assert expected.duration_ms in runs
    assert 2 * sum(r <= expected.duration_ms for r in runs) >= len(runs)
    assert 2 * sum(r >= expected.duration_ms for r in runs) >= len(runs)


@given(durations, st.integers(min_value=0, max_value=2 * 10**10))
def test_what_is_left_of_a_run_is_a_longer_runs_median(runs: list[int], ran: int) -> None:
    book = RuntimeBook(RunSample("nlp", "nlp/default", 4000, r) for r in runs)
    left = book.remaining(job(), ran)
    assert left is not None and left.duration_ms >= 0
    longer = sorted(r for r in runs if r > ran)
    if longer:
        assert left.duration_ms + ran in longer and left.samples == len(longer)
        assert left.basis == "team+queue+size, of those longer"
    else:
        assert left.duration_ms == max(ran, 1000), "what outlived every run like it runs as long again"
        assert left.basis == "team+queue+size, longer than all: as long again"


def test_levels_fall_back_when_too_few_runs() -> None:
    samples = [RunSample("nlp", "nlp/default", 4000, 10)] * 2  # too few for the team's queue
    samples += [RunSample("nlp", "nlp/batch", 4000, 20)] * 2  # with them, enough for the team
    samples += [RunSample("vision", "vision/default", 2000, 30)] * 5
    book = RuntimeBook(samples)
    team = book.expected(job())
    assert team is not None and (team.duration_ms, team.basis, team.samples) == (10, "team+size", 4)
    across = book.expected(job(team="ml", queue="ml/default", gpus=8))
    assert across is not None and (across.basis, across.samples) == ("size", 9)
    assert across.describe() == "median of 9 finished (size)"
    assert book.expected(job(gpus=1)) is None, "nothing of its size ran: no basis"
    assert book.remaining(job(gpus=1), 5) is None


def test_a_declared_run_time_wins() -> None:
    book = RuntimeBook([RunSample("nlp", "nlp/default", 4000, 10)] * 5)
    declared = book.expected(job(declared=7_200_000))
    assert declared is not None and (declared.duration_ms, declared.samples) == (7_200_000, 0)
    assert declared.describe() == "declared (kuota.dev/expected-runtime)"
    left = book.remaining(job(declared=7_200_000), 3_600_000)
    assert left is not None and left.duration_ms == 3_600_000
    over = book.remaining(job(declared=7_200_000), 9_000_000)
    assert (
        over is not None
        and over.duration_ms == 0
        and over.describe() == "declared, overrun (kuota.dev/expected-runtime)"
    )
