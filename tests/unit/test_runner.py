"""The keyed runner (gpucellpool.runtime.runner) on the virtual clock: wake coalescing, the
debounce's min and max, the leading edge of a quiet key, requeue-after, backoff growth and
reset, the gate, no overlap per key, one key's failure isolated, and a finished key forgotten."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable

import pytest

from gpucellpool.runtime.runner import KeyedRunner, RunnerSettings, backoff_s
from simulations.simulator.engine.clock import VirtualClock, settle

SETTINGS = RunnerSettings(
    debounce_min_s=0.15, debounce_max_s=1.0, backoff_base_s=1.0, backoff_max_s=8.0
)
START = 1_000_000.0


class Steps:
    """A step function recording (key, time, woken); its answer per key is settable."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, float, bool]] = []
        self.answer: dict[str, float | None] = {}
        self.fail: set[str] = set()
        self.hold: asyncio.Event | None = None
        self.active: dict[str, int] = {}
        self.max_active = 0

    async def __call__(self, key: str, woken: bool) -> float | None:
        self.calls.append((key, self.clock.now() - START, woken))
        self.active[key] = self.active.get(key, 0) + 1
        self.max_active = max(self.max_active, self.active[key])
        try:
            if self.hold is not None:
                await self.hold.wait()
            if key in self.fail:
                raise RuntimeError(f"{key} broke")
            return self.answer.get(key, math.inf)
        finally:
            self.active[key] -= 1

    def times(self, key: str) -> list[float]:
        return [round(t, 3) for k, t, _ in self.calls if k == key]


def make(
    gate: Callable[[str], bool] = lambda _k: True,
    leading: Callable[[str], bool] = lambda _k: False,
) -> tuple[KeyedRunner[str], Steps, VirtualClock]:
    clock = VirtualClock(START)
    steps = Steps(clock)
    runner: KeyedRunner[str] = KeyedRunner(steps, clock, SETTINGS, gate, leading=leading, name="t")
    return runner, steps, clock


async def test_a_burst_of_wake_ups_is_one_step_after_the_quiet_time() -> None:
    runner, steps, clock = make()
    runner.add("a")
    await clock.advance(0.2)
    assert steps.times("a") == [0.15]  # quiet for debounce_min_s after the first wake-up
    for _ in range(10):  # ten wake-ups 10 ms apart: one burst
        runner.wake("a")
        await clock.advance(0.01)
    await clock.advance(0.1)
    assert len(steps.calls) == 1, "stepped inside the burst"
    await clock.advance(0.1)
    assert steps.times("a") == [0.15, 0.44]  # last wake at 0.29 + 0.15 quiet
    assert all(woken for _, _, woken in steps.calls)
    await runner.close()


async def test_a_steady_stream_steps_at_the_debounce_max() -> None:
    runner, steps, clock = make()
    runner.add("a")
    for _ in range(35):  # a wake-up every 0.1 s: never quiet for 0.15 s
        await clock.advance(0.1)
        runner.wake("a")
    times = steps.times("a")
    assert times[0] == 1.0, times  # the first wake-up (add, at 0) plus debounce_max_s
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times)]
    assert len(times) >= 3 and all(gap <= 1.1 for gap in gaps), times  # never starved
    await runner.close()


async def test_a_quiet_keys_wake_up_steps_at_once_and_the_burst_after_it_is_debounced() -> None:
    runner, steps, clock = make(leading=lambda _k: True)
    runner.add("a")
    await settle()
    assert steps.times("a") == [0.0]  # never active before: quiet
    for _ in range(10):  # ten wake-ups 10 ms apart, the first 10 ms after the step: a burst
        await clock.advance(0.01)
        runner.wake("a")
    await clock.advance(0.14)
    assert steps.times("a") == [0.0], "the burst after a step did not wait to be quiet"
    await clock.advance(0.02)
    assert steps.times("a") == [0.0, 0.25]  # last wake at 0.10 + 0.15 quiet
    await clock.advance(0.1)  # 0.1 s after that step: not quiet yet
    runner.wake("a")
    await settle()
    assert steps.times("a") == [0.0, 0.25]
    await clock.advance(0.15)
    assert steps.times("a") == [0.0, 0.25, 0.51]  # trailing: the wake at 0.36 + 0.15
    await clock.advance(1.0)
    runner.wake("a")  # quiet for a second: at once again
    await settle()
    assert steps.times("a") == [0.0, 0.25, 0.51, 1.51]
    assert all(woken for _, _, woken in steps.calls)
    await runner.close()


async def test_the_leading_edge_is_per_key_and_a_stream_is_still_capped() -> None:
    runner, steps, clock = make(leading=lambda key: key == "a")
    runner.add("a")
    runner.add("b")
    await settle()
    assert steps.times("a") == [0.0] and steps.times("b") == []
    await clock.advance(0.15)
    assert steps.times("b") == [0.15]  # b has no leading edge: the quiet time first
    for _ in range(35):  # a wake-up every 0.1 s: never quiet for 0.15 s
        await clock.advance(0.1)
        runner.wake("a")
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(steps.times("a"))]
    assert len(gaps) >= 3 and all(gap <= 1.1 for gap in gaps), steps.times("a")
    await runner.close()


async def test_requeue_after_steps_without_a_wake_up_and_inf_waits_for_one() -> None:
    runner, steps, clock = make()
    steps.answer["a"] = 5.0
    runner.add("a")
    await clock.advance(11.0)
    assert steps.times("a") == [0.15, 5.15, 10.15]
    assert [w for _, _, w in steps.calls] == [True, False, False]
    steps.answer["a"] = math.inf
    await clock.advance(5.0)  # the step at 15.15 asked for no timed requeue
    await clock.advance(100.0)
    assert steps.times("a") == [0.15, 5.15, 10.15, 15.15]
    runner.wake("a")
    await clock.advance(0.2)
    assert len(steps.times("a")) == 5
    await runner.close()


async def test_a_wake_up_during_the_requeue_wait_steps_early() -> None:
    runner, steps, clock = make()
    steps.answer["a"] = 30.0
    runner.add("a")
    await clock.advance(2.0)
    runner.wake("a")
    await clock.advance(0.2)
    assert steps.times("a") == [0.15, 2.15]
    await runner.close()


async def test_backoff_doubles_to_its_max_and_resets_after_a_success() -> None:
    runner, steps, clock = make()
    steps.fail.add("a")
    runner.add("a")
    await clock.advance(0.15 + 1 + 2 + 4 + 8 + 8 + 0.01)
    assert steps.times("a") == [0.15, 1.15, 3.15, 7.15, 15.15, 23.15]
    state = runner.keys["a"]
    assert state.errors == 6 and state.failures == 6 and state.steps == 0
    steps.fail.clear()
    await clock.advance(8.0)  # the next retry succeeds
    assert state.failures == 0 and state.steps == 1
    steps.fail.add("a")
    runner.wake("a")
    await clock.advance(0.15)
    await clock.advance(1.0)  # back to the base delay after the reset
    last, retry = steps.times("a")[-2:]
    assert round(retry - last, 3) == 1.0
    assert [backoff_s(SETTINGS, n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    await runner.close()


async def test_a_closed_gate_runs_no_step_until_it_opens_and_a_wake_up_comes() -> None:
    owned: set[str] = set()
    runner, steps, clock = make(gate=lambda key: key in owned)
    runner.add("a")
    runner.add("b")
    await clock.advance(60.0)  # rechecked every gate_recheck_s, still closed
    assert steps.calls == []
    owned.add("a")
    runner.wake_all()
    await clock.advance(0.2)
    assert [k for k, _, _ in steps.calls] == ["a"]
    await runner.close()


async def test_one_key_never_steps_twice_at_once_and_a_wake_during_a_step_is_kept() -> None:
    runner, steps, clock = make()
    steps.hold = asyncio.Event()
    runner.add("a")
    await clock.advance(0.2)
    assert runner.keys["a"].running
    for _ in range(5):
        runner.wake("a")
        await clock.advance(0.5)
    assert len(steps.calls) == 1 and runner.pending("a")
    steps.hold.set()
    await settle()
    await clock.advance(0.2)
    assert len(steps.calls) == 2, "the wake-up during the step was lost"
    assert steps.max_active == 1
    await runner.close()


async def test_one_keys_failure_leaves_the_others_alone() -> None:
    runner, steps, clock = make()
    steps.fail.add("bad")
    steps.answer["good"] = 1.0
    runner.add("bad")
    runner.add("good")
    await clock.advance(5.0)
    bad, good = runner.keys["bad"], runner.keys["good"]
    assert bad.errors >= 2 and bad.task is not None and not bad.task.done()
    assert good.errors == 0 and good.steps == 5
    await runner.close()
    assert runner.keys == {}


async def test_a_finished_key_is_forgotten_and_can_start_again() -> None:
    runner, steps, clock = make()
    steps.answer["a"] = None
    runner.add("a")
    await clock.advance(0.2)
    assert "a" not in runner and len(steps.calls) == 1
    runner.wake("a")  # unknown now: ignored
    await clock.advance(1.0)
    assert len(steps.calls) == 1
    runner.add("a")
    await clock.advance(0.2)
    assert len(steps.calls) == 2
    await runner.close()


async def test_remove_cancels_the_key_only() -> None:
    runner, steps, clock = make()
    steps.answer["a"] = steps.answer["b"] = 1.0
    runner.add("a")
    runner.add("b")
    await clock.advance(0.2)
    task = runner.keys["a"].task
    runner.remove("a")
    await clock.advance(3.0)
    assert task is not None and task.cancelled()
    assert len(steps.times("a")) == 1 and len(steps.times("b")) == 4
    await runner.close()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"debounce_min_s": 2.0, "debounce_max_s": 1.0}, "debounce_min_s"),
        ({"debounce_min_s": -1.0}, "debounce_min_s"),
        ({"backoff_base_s": 0.0}, "backoff_base_s"),
        ({"backoff_base_s": 9.0, "backoff_max_s": 8.0}, "backoff_base_s"),
        ({"gate_recheck_s": 0.0}, "gate_recheck_s"),
    ],
)
def test_settings_that_cannot_work_are_refused_naming_the_field(
    fields: dict[str, float], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        RunnerSettings(**fields)
