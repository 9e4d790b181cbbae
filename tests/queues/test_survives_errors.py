"""The controller survives its own bugs: a workload whose evaluation raises is parked with the error as its
reason while every other workload is still admitted, and a cycle that raises as a whole is logged and retried
after a backoff instead of stopping the loop (which would keep the Lease and admit nothing, cluster-wide)."""

from __future__ import annotations

from typing import Any

import pytest

import admission.cycle as cycle
from admission.cycle import Verdict
from queues.loop import RETRY_BASE_MS, UNHEALTHY_AFTER, ControllerLoop, LoopTimers
from queues.manager import State
from tests.queues.test_lifecycle import MIN, job, simulate


def failing_for(name: str, original: Any) -> Any:
    def stage(snapshot: Any, workload_or_entry: Any, *rest: Any) -> Any:
        workload = getattr(workload_or_entry, "workload", workload_or_entry)
        if workload.name == name:
            raise ValueError("year 13434 is out of range")  # what an unbounded duration once did
        return original(snapshot, workload_or_entry, *rest)

    return stage


@pytest.mark.parametrize("stage", ["_nominate", "_process"])
def test_one_workload_that_cannot_be_evaluated_does_not_stop_the_others(
    monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    monkeypatch.setattr(cycle, stage, failing_for("poison", getattr(cycle, stage)))
    sim, journal = simulate(
        job("poison", "nlp", 1, 0, 10), job("a", "nlp", 1, 0, 5), job("b", "vision", 2, 0, 5), job("c", "nlp", 1, 0, 5)
    )
    admitted = {p["args"][0].name for p in journal.named("admitted")}
    assert admitted == {"a", "b", "c"}
    finished = {n: j.finished_at for n, j in sim.jobs.items() if n != "poison"}
    assert finished == {"a": 5 * MIN, "b": 5 * MIN, "c": 5 * MIN}
    manager = sim.controller.manager
    assert manager.state["poison"] is State.PENDING and manager.inadmissible("poison")
    failed = journal.named("decision_failed")  # the metric and the Event on the Job come from this
    assert failed and {f["args"][0].name for f in failed} == {"poison"}
    assert "year 13434" in failed[0]["args"][1]


def test_the_error_is_the_decision_the_workload_waits_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cycle, "_nominate", failing_for("poison", cycle._nominate))
    sim, _ = simulate(job("poison", "nlp", 1, 0, 10))
    decisions = [d for d in (sim.controller.last_cycle.decisions if sim.controller.last_cycle else [])]
    assert [d.verdict for d in decisions] == [Verdict.ERROR]
    assert "kuota could not decide for this workload (nominating: ValueError: year 13434" in decisions[0].message


class RaisingController:
    """Just what the loop drives; its cycles raise `fail` times, then admit."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.dirty = True
        self.paused = False
        self.cycles = 0

    def tick(self, now: int) -> None:
        return None

    def next_due(self) -> int | None:
        return None

    def schedule(self, now: int) -> Any:
        if not self.dirty:
            return None
        if self.fail:
            self.fail -= 1
            raise RuntimeError("usage must be in [0, 2**63)")
        self.dirty = False
        self.cycles += 1
        return cycle.CycleResult()


def test_a_cycle_that_raises_is_retried_with_backoff_and_the_loop_goes_on() -> None:
    now = 0
    controller = RaisingController(fail=UNHEALTHY_AFTER)
    loop = ControllerLoop(controller, LoopTimers(), clock=lambda: now)  # type: ignore[arg-type]
    for expected in range(1, UNHEALTHY_AFTER + 1):
        assert loop.step() == 0
        assert loop.failures == expected and controller.dirty
        assert loop._retry_at == now + RETRY_BASE_MS * 2 ** (expected - 1)
        now = loop._retry_at
    assert not loop.healthy and "2**63" in (loop.last_error or "")
    assert loop.step() == 1  # the next try goes through
    assert loop.failures == 0 and loop.healthy and controller.cycles == 1


async def test_the_running_loop_waits_out_the_backoff() -> None:
    import asyncio

    controller = RaisingController(fail=1)
    loop = ControllerLoop(controller, LoopTimers(), coalesce_s=0)  # type: ignore[arg-type]
    loop.start()
    try:
        await asyncio.sleep(0.3)
        assert loop.failures == 1 and controller.cycles == 0  # still backing off: no busy retry
        await asyncio.sleep(RETRY_BASE_MS / 1000)
        assert controller.cycles == 1 and loop.failures == 0
    finally:
        await loop.stop()


def test_a_loop_that_keeps_failing_gives_up_once_and_says_why() -> None:
    from queues.loop import GIVE_UP_AFTER

    now = 0
    reasons: list[str] = []
    loop = ControllerLoop(RaisingController(fail=10**6), LoopTimers(), clock=lambda: now, on_give_up=reasons.append)  # type: ignore[arg-type]
    for _ in range(GIVE_UP_AFTER - 1):
        loop.step()
        now = loop._retry_at
    assert not loop.gave_up and not reasons
    loop.step()
    assert loop.gave_up and reasons == ["RuntimeError: usage must be in [0, 2**63)"]
    loop.step()  # a stray wake-up after giving up does not call the owner again
    assert len(reasons) == 1


async def test_serve_stops_every_component_and_fails_when_one_cannot_go_on() -> None:
    from kuota.commands.serve import _run
    from kuota.components import StartError
    from kuota.runtime import Runtime
    from quota.config import QuotaConfig

    runtime = Runtime(QuotaConfig(), "")
    stopped: list[str] = []

    class Component:
        def __init__(self, name: str, fail: bool) -> None:
            self.name, self.fail = name, fail

        async def start(self) -> None:
            if self.fail:
                assert runtime.on_fatal is not None
                runtime.on_fatal("the scheduling loop gave up: boom")  # as the controller does

        async def stop(self) -> None:
            stopped.append(self.name)

    with pytest.raises(StartError, match="gave up: boom"):
        await _run([Component("webhook", False), Component("controller", True)], runtime)  # type: ignore[list-item]
    assert stopped == ["controller", "webhook"]
