"""Expected run times from past work: the median duration of finished workloads like this one, with its sample size.

Pure. "Like this one" narrows as far as the history allows: the same team, queue and size class; else the same team
and size class; else the size class across teams. A level counts only with at least `min_samples` runs (one long
outlier must not set everyone's expectation); the median (the lower one, an exact sample, never an average) is
robust to the long tail GPU job durations have. A workload that declares `kuota.dev/expected-runtime` is taken at
its word.

Size classes are those users reason in (and the bench reports by): 1 GPU, 2-8 (one node), 9-32, more than 32, and
no GPU at all.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from admission.workload import Workload
from quota.pod_set import PodSet

SIZE_CLASSES = ("cpu", "1", "2-8", "9-32", ">32")
MIN_SAMPLES = 3


def size_class(gpu_milli: int) -> str:
    """The size class of a workload asking for `gpu_milli` milli-GPUs in all (a fraction of a GPU counts as 1)."""
    if gpu_milli <= 0:
        return "cpu"
    gpus = -(-gpu_milli // 1000)
    if gpus == 1:
        return "1"
    if gpus <= 8:
        return "2-8"
    if gpus <= 32:
        return "9-32"
    return ">32"


def gpu_milli_of(pod_sets: Iterable[PodSet]) -> int:
    return sum(ps.count * q for ps in pod_sets for r, q in ps.requests.items() if r.endswith("gpu"))


@dataclass(frozen=True, slots=True)
class RunSample:
    """One finished workload's work (sim.history.run_time_ms: the time it ran, checkpointed progress counted once)."""

    team: str
    queue: str | None
    gpu_milli: int
    duration_ms: int


@dataclass(frozen=True, slots=True)
class Expected:
    """An expected run time and what it rests on."""

    duration_ms: int
    basis: str
    """`declared`, or `team+queue+size`, `team+size`, `size`: the level of history it came from."""
    samples: int
    """How many finished runs the median is of (0 for a declared one)."""

    def describe(self) -> str:
        if self.basis.startswith("declared"):
            return f"{self.basis} (kuota.dev/expected-runtime)"
        return f"median of {self.samples} finished ({self.basis})"


class RuntimeBook:
    """Finished runs grouped at each level, medians computed once per group on first use."""

    def __init__(self, samples: Iterable[RunSample], *, min_samples: int = MIN_SAMPLES) -> None:
        self.min_samples = min_samples
        self._runs: dict[tuple[str, ...], list[int]] = defaultdict(list)
        self._medians: dict[tuple[str, ...], int] = {}
        self._ordered: dict[tuple[str, ...], list[int]] = {}
        self.count = 0
        for sample in samples:
            self.add(sample)

    def add(self, sample: RunSample) -> None:
        size = size_class(sample.gpu_milli)
        for key in _keys(sample.team, sample.queue, size):
            self._runs[key].append(sample.duration_ms)
            self._medians.pop(key, None)
        self.count += 1

    def expected(self, workload: Workload) -> Expected | None:
        """The workload's expected run time, or None when it declares none and no level has enough history."""
        if workload.expected_runtime_ms is not None:
            return Expected(workload.expected_runtime_ms, "declared", 0)
        size = size_class(gpu_milli_of(workload.pod_sets))
        for key, basis in zip(_keys(workload.team, workload.queue, size), _BASES, strict=True):
            runs = self._runs.get(key)
            if runs is not None and len(runs) >= self.min_samples:
                return Expected(self._median(key, runs), basis, len(runs))
        return None

    def remaining(self, workload: Workload, ran_ms: int) -> Expected | None:
        """How much longer a workload that has run `ran_ms` is expected to run: its declared run time less what it
        ran, or the median of the past runs (at the first level with enough) longer than `ran_ms`, less `ran_ms`.
        Work that has outrun its declared time is expected to end now; work that has outrun every past run, to run
        as long again (the basis says which). None: no basis at all."""
        if workload.expected_runtime_ms is not None:
            left = workload.expected_runtime_ms - ran_ms
            basis = "declared" if left > 0 else "declared, overrun"
            return Expected(max(0, left), basis, 0)
        size = size_class(gpu_milli_of(workload.pod_sets))
        for key, basis in zip(_keys(workload.team, workload.queue, size), _BASES, strict=True):
            runs = self._runs.get(key)
            if runs is None or len(runs) < self.min_samples:
                continue
            ordered = self._sorted(key, runs)
            longer = ordered[bisect.bisect_right(ordered, ran_ms) :]
            if not longer:
                # Longer than every run like it: run times are heavy-tailed, and what has outlived them all is
                # expected to run about as long again, not to end now (which made estimates optimistic).
                return Expected(max(ran_ms, 1000), f"{basis}, longer than all: as long again", len(ordered))
            return Expected(longer[(len(longer) - 1) // 2] - ran_ms, f"{basis}, of those longer", len(longer))
        return None

    def _sorted(self, key: tuple[str, ...], runs: list[int]) -> list[int]:
        ordered = self._ordered.get(key)
        if ordered is None or len(ordered) != len(runs):
            ordered = self._ordered[key] = sorted(runs)
        return ordered

    def _median(self, key: tuple[str, ...], runs: list[int]) -> int:
        median = self._medians.get(key)
        if median is None:
            ordered = self._sorted(key, runs)
            median = self._medians[key] = ordered[(len(ordered) - 1) // 2]
        return median


_BASES = ("team+queue+size", "team+size", "size")


def _keys(team: str, queue: str | None, size: str) -> tuple[tuple[str, ...], ...]:
    return (("tqs", team, queue or "", size), ("ts", team, size), ("size", size))
