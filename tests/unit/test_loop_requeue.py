"""When the loop decides while nothing happens: the held decision's "next change" time.

What these prove, on the virtual clock: a pool whose last decision holds (``Decision.steady``)
sleeps until the instant its output can next change (here a scale-down stabilisation window
ending) and decides exactly then, not a tick later and not every tick in between; a wake-up still
decides at once; with no promise (``steady`` None) or for a pool reading Prometheus the tick
cadence is the one it always was; the ticks slept through leave the same memory samples as
deciding every tick; a stream of no-op events is skipped only until the pool's own next timed
decision. ``test_idle_pool_decisions_per_hour`` is the measurement quoted in docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest

from autoscaler import loop
from autoscaler.loop import Autoscaler, LoopSettings
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision, Reason
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import (
    FakeWorkload,
    FakeWriter,
    pending_pod,
    pool_manifest,
    with_cells,
)

A = ("ns", "a")
WINDOW_S = 95.0  # off the 10 s tick grid: a tick-driven loop would see its end 5 s late
SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0, resync_s=60.0)

World = tuple[Autoscaler, FakeWorkload, VirtualClock]
MakeWorld = Callable[[LoopSettings], World]


@pytest.fixture
async def make_world() -> AsyncIterator[MakeWorld]:
    made: list[Autoscaler] = []

    def make(settings: LoopSettings) -> World:
        clock, workload = VirtualClock(), FakeWorkload()
        scaler = Autoscaler(workload, FakeWriter(), clock, settings=settings)
        made.append(scaler)
        return scaler, workload, clock

    yield make
    for scaler in made:
        await scaler.close()


@pytest.fixture
def no_promise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's ``decide`` never promises anything: the loop as it was before requeueing."""

    def without_steady(*args: Any) -> Decision:
        return replace(decide(*args), steady=None)

    monkeypatch.setattr(loop, "decide", without_steady)


def _idle_cell_pool(**auto: Any) -> dict[str, Any]:
    """One Ready cell nobody uses: the decision holds (Stabilizing) until the window ends."""
    raw = pool_manifest("a", scaleDownStabilizationWindow=f"{WINDOW_S:.0f}s", **auto)
    row = {"name": "a-0", "index": 0, "phase": "Ready", "nodeName": "a-0"}
    raw = with_cells(raw, [{**row, "lastTransitionTime": "1970-01-12T00:00:00Z"}])
    raw["status"]["desiredReplicas"] = 1
    return raw


async def _start(world: World, raw: dict[str, Any]) -> float:
    scaler, workload, clock = world
    workload.nodes = [{"metadata": {"name": "a-0"}}]
    scaler.pool_event("ADDED", raw)
    await clock.advance(0.2)
    state = scaler.pools[A]
    assert state.decisions == 1
    return state.decided_at


async def test_held_pool_decides_at_the_window_end_only(make_world: MakeWorld) -> None:
    world = make_world(replace(SETTINGS, resync_s=3600.0))
    scaler, _, clock = world
    first = await _start(world, _idle_cell_pool())
    state = scaler.pools[A]
    assert state.last_decision is not None
    assert state.last_decision.reason is Reason.STABILIZING
    await clock.advance(WINDOW_S - 0.5)  # nine ticks gone by: none of them decided
    assert state.decisions == 1
    await clock.advance(1.0)
    assert state.decisions == 2
    assert state.decided_at == pytest.approx(first + WINDOW_S)  # at the end, not a tick later
    last = scaler.pools[A].last_decision
    assert last is not None and last.reason is Reason.SCALED_DOWN and last.victims == ("a-0",)


@pytest.mark.usefixtures("no_promise")
async def test_without_a_promise_the_tick_decides_as_before(make_world: MakeWorld) -> None:
    world = make_world(SETTINGS)
    scaler, _, clock = world
    first = await _start(world, _idle_cell_pool())
    state = scaler.pools[A]
    times = []
    for _ in range(12):
        await clock.advance(10.0)
        times.append(round(state.decided_at - first, 6))
    assert times[:9] == [10.0 * k for k in range(1, 10)]
    assert state.last_decision is not None
    scaled = [t for t in times if t >= WINDOW_S]
    assert scaled[0] == 100.0  # the first tick after the window, 5 s late


async def test_a_pool_reading_prometheus_keeps_the_tick(make_world: MakeWorld) -> None:
    world = make_world(SETTINGS)
    scaler, _, clock = world
    first = await _start(world, _idle_cell_pool(prometheus={"url": "http://prometheus:9090"}))
    state = scaler.pools[A]
    await clock.advance(10.0)  # its usage changes with no event: the tick still reads it
    assert state.decisions == 2 and state.decided_at == pytest.approx(first + 10.0)


async def test_wake_up_decides_at_once_while_held(make_world: MakeWorld) -> None:
    world = make_world(SETTINGS)
    scaler, workload, clock = world
    await _start(world, _idle_cell_pool())
    state = scaler.pools[A]
    await clock.advance(30.0)
    assert state.decisions == 1
    workload.pods["p"] = pending_pod("p")
    woken_at = clock.now()
    scaler.wake([A])
    await clock.advance(0.5)
    assert state.decisions == 2
    assert state.decided_at - woken_at <= SETTINGS.max_debounce_s
    assert state.last_decision is not None and state.last_decision.pending_asks == 1


async def test_slept_ticks_leave_the_samples_every_tick_would(
    make_world: MakeWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = make_world(SETTINGS)
    await _start(held, _idle_cell_pool())
    await held[2].advance(60.1)  # the resync: one decision since the first
    held_state = held[0].pools[A]
    assert held_state.decisions == 2
    ticked = make_world(SETTINGS)
    monkeypatch.setattr(loop, "decide", lambda *a: replace(decide(*a), steady=None))
    await _start(ticked, _idle_cell_pool())
    await ticked[2].advance(60.1)
    ticked_state = ticked[0].pools[A]
    assert ticked_state.decisions == 7
    assert held_state.memory is not None and ticked_state.memory is not None
    assert len(held_state.memory.recommendations) == 7
    assert held_state.memory.recommendations == ticked_state.memory.recommendations
    assert held_state.memory.idle_since == ticked_state.memory.idle_since


async def test_no_op_events_are_skipped_only_until_the_next_timed_decision(
    make_world: MakeWorld,
) -> None:
    world = make_world(replace(SETTINGS, resync_s=30.0))
    scaler, _, clock = world
    first = await _start(world, _idle_cell_pool())
    state = scaler.pools[A]
    for _ in range(80):  # an event every 0.5 s for 40 s, none of them changing anything
        scaler.wake([A])
        await clock.advance(0.5)
    assert state.skipped > 50
    assert state.decisions == 2  # the resync at 30 s decided all the same
    assert state.decided_at - first == pytest.approx(30.0, abs=1.0)


async def _decisions_in_an_hour(world: World) -> int:
    scaler, _, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))  # no cells, no demand: Idle, held forever
    await clock.advance(0.2)
    start = scaler.pools[A].decisions
    for _ in range(60):
        await clock.advance(60.0)
    return scaler.pools[A].decisions - start


async def test_idle_pool_decisions_per_hour(
    make_world: MakeWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = await _decisions_in_an_hour(make_world(SETTINGS))
    monkeypatch.setattr(loop, "decide", lambda *a: replace(decide(*a), steady=None))
    ticked = await _decisions_in_an_hour(make_world(SETTINGS))
    print(f"decisions per idle pool per hour: {ticked} every tick, {held} held")
    assert ticked == 360  # every 10 s tick
    assert held == 60  # every 60 s resync
