"""A changed observation repeats a decision only when ``decide`` would give it again.

``policy.same_facts.holds_after`` lets the simulator skip ``decide`` when a pod lands on or
leaves a cell the last decision read only through its facts (issue 14, simulator speed). Here
every "holds" is checked against ``decide`` itself on random pools and changes: the same
count, reason, victims and ``act``, and exactly the memory ``next_change.advance`` gives for
the skipped call. The replays check that the skip changes no SimResult (against the same
policy without ``holds_after``) and that it happens.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from autoscaler.policy import cell_index
from autoscaler.policy.cell_index import fact_key
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reads, Reason
from autoscaler.policy.fit import place_asks
from autoscaler.policy.next_change import advance
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.same_facts import holds_after
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    Observation,
    PendingPod,
    PolicyMemory,
)
from simulations.simulator.engine import DrainMode, ProductionPolicy, ScalingPolicy, SimConfig
from simulations.simulator.engine.policy import legacy_windows_policy
from simulations.simulator.engine.sim import Simulation
from simulations.simulator.traces import TracePod, synthetic
from tests.unit.test_sim_skip import _bursts
from tests.unit.test_sim_speed_identity import ASKS

NOW = 50_000.0
KEYS = ("desired_replicas", "reason", "victims", "act")


def _loaded(rng: random.Random, shape: CellShape, most: int) -> tuple[Any, Any]:
    gpus: tuple[GPUUsage, ...] = tuple(GPUUsage() for _ in range(shape.gpus))
    asks: list[tuple[GPUAsk, ...]] = []
    for _ in range(rng.randint(0, most)):
        ask = rng.choice(ASKS)
        after, reason = place_asks((ask,), gpus, shape)
        if reason is None:
            gpus, asks = after, [*asks, (ask,)]
    return gpus, tuple(asks)


def _cell(rng: random.Random, shape: CellShape, index: int) -> CellView:
    state = rng.choice((CellState.READY,) * 6 + (CellState.BOOTING, CellState.DRAINING))
    gpus, asks = _loaded(rng, shape, rng.choice((0, 1, 2 * shape.gpus, 4 * shape.gpus)))
    if state is CellState.BOOTING:
        gpus, asks = (), ()
    ready_at = None if state is CellState.BOOTING else 10.0 * index
    return CellView(
        f"c{index}", index, state, 5.0 * index, gpus, len(asks), len(asks), ready_at, asks
    )


def _changed(rng: random.Random, shape: CellShape, cells: list[CellView]) -> list[CellView]:
    """A pod lands on or leaves one cell (new view of that cell only), or a cell changes
    state, or a pod is pending."""
    out = list(cells)
    i = rng.randrange(len(out))
    cell, roll = out[i], rng.random()
    if roll < 0.05:
        out[i] = replace(cell, state=rng.choice(list(CellState)))
    elif cell.state is not CellState.BOOTING:
        gpus, asks = cell.gpus, list(cell.pod_asks)
        if roll < 0.5 and asks:
            asks.pop(rng.randrange(len(asks)))
            gpus = tuple(GPUUsage() for _ in range(shape.gpus))
            for (ask,) in asks:
                gpus = place_asks((ask,), gpus, shape)[0]
        else:
            ask = rng.choice(ASKS)
            after, reason = place_asks((ask,), gpus, shape)
            if reason is None:
                gpus, asks = after, [*asks, (ask,)]
        out[i] = replace(cell, gpus=gpus, pods=len(asks), evictable_pods=len(asks))
        out[i] = replace(out[i], pod_asks=tuple(asks))
    return out


def _world(seed: int) -> tuple[PolicyConfig, Observation, PolicyMemory]:
    rng = random.Random(seed)
    shape = CellShape(gpus=rng.choice((1, 4)))
    config = PolicyConfig(
        max_replicas=50,
        shape=shape,
        headroom_cells=rng.choice((0, 0, 1)),
        disruption_budget=rng.choice((1, 1, 2)),
        utilization_threshold=rng.choice((0.3, 0.5, 0.8)),
        scale_down_on_usage=rng.random() < 0.2,
        boot_hedge_fraction=0.5 if seed % 2 else 0.0,  # with and without hedged boots
        idle_hand_over_boots=rng.choice((0.0, 0.05)),  # idle times handed over at once or later
    )
    cells = [_cell(rng, shape, i) for i in range(rng.randint(2, 12))]
    if rng.random() < 0.7:  # a drain that still holds pods: the budget may be spent
        busy = _cell(rng, shape, len(cells))
        gpus, asks = _loaded(rng, shape, 3)
        if not asks:
            gpus, asks = place_asks((ASKS[1],), gpus, shape)[0], ((ASKS[1],),)
        cells.append(replace(busy, state=CellState.DRAINING, gpus=gpus, pods=len(asks)))
        cells[-1] = replace(cells[-1], pod_asks=asks, evictable_pods=len(asks))
    idle = frozenset(c.name for c in cells if config.scale_down_on_usage and rng.random() < 0.3)
    pending = (PendingPod("p", rng.choice(ASKS), NOW - 5.0),) if rng.random() < 0.1 else ()
    observation = Observation(pending, tuple(cells), idle_cells=idle)
    since = {c.name: NOW - rng.choice((100.0, 5000.0)) for c in cells}
    up = rng.choice((None, None, NOW - 100.0, NOW - 5000.0))
    ago = range(rng.choice((0, 0, 12)), 0, -1)
    recs = tuple((NOW - 30.0 * k, rng.randint(0, len(cells))) for k in ago)
    return config, observation, PolicyMemory(up, None, recs, since)


def _check_one(seed: int, outcomes: dict[str, int]) -> None:
    config, before, memory = _world(seed)
    rng = random.Random(seed + 10_000)
    made = decide(before, memory, config, NOW)
    if made.steady is None:
        return
    after = replace(before, cells=tuple(_changed(rng, config.shape, list(before.cells))))
    later = NOW + min(1.0, (made.steady.until - NOW) / 2)
    if later <= NOW or not holds_after(made.steady, before, after, config):
        outcomes["decided"] += 1
        return
    outcomes[made.steady.reads] += 1
    outcomes[made.reason] = outcomes.get(made.reason, 0) + 1
    again = decide(after, made.memory, config, later)
    assert [getattr(again, k) for k in KEYS] == [getattr(made, k) for k in KEYS], seed
    assert again.memory == advance(made.memory, made.steady, [later]), seed


def test_holds_after_only_when_decide_repeats_the_decision() -> None:
    outcomes = {"decided": 0, Reads.FACTS: 0, Reason.DISRUPTION_BUDGET: 0}
    # 8,000 worlds: a world's busy cells remembered idle leave the idle set at once, and no
    # promise is made while their idle times wait to be handed over (decide's ``_idle``)
    for seed in range(8000):
        _check_one(seed, outcomes)
    # not vacuous: repeats happened, on a spent budget too, and many changes were decided again
    kinds = ("decided", Reads.FACTS, Reason.DISRUPTION_BUDGET)
    assert min(outcomes[k] for k in kinds) >= 50, outcomes


def _cells(*usage: tuple[int, CellState]) -> tuple[CellView, ...]:
    out = []
    for i, (pods, state) in enumerate(usage):
        asks = tuple((GPUAsk(),) for _ in range(pods))
        gpus = tuple(GPUUsage(24576, 100, 1) if g < pods else GPUUsage() for g in range(4))
        out.append(CellView(f"c{i}", i, state, 0.0, gpus, pods, pods, 0.0, asks))
    return tuple(out)


def test_a_spent_budget_repeats_while_the_facts_stay_and_not_once_one_changes() -> None:
    config = PolicyConfig(max_replicas=10, shape=CellShape(gpus=4), utilization_threshold=0.6)
    ready, draining = CellState.READY, CellState.DRAINING
    before = Observation((), _cells((2, ready), (2, ready), (3, ready), (1, draining)))
    made = decide(before, PolicyMemory(idle_since={"c0": 0.0}), config, NOW)
    assert made.reason == Reason.DISRUPTION_BUDGET and made.steady is not None
    assert made.steady.reads is Reads.FACTS
    one_less = _cells((1, ready), (1, ready), (2, ready), (0, draining))

    def changed(i: int, cells: tuple[CellView, ...] = one_less) -> Observation:
        """Only cell ``i`` has a new view, as the world gives them."""
        return replace(before, cells=(*before.cells[:i], cells[i], *before.cells[i + 1 :]))

    later = NOW + 1.0
    # c0 (eligible) keeps a pod and stays below the threshold; c1 gets an equal new view
    for same in (changed(0), changed(1, _cells(*[(2, ready)] * 2))):
        assert holds_after(made.steady, before, same, config)
        again = decide(same, made.memory, config, later)
        assert (again.reason, again.memory) == (
            made.reason,
            advance(made.memory, made.steady, [later]),
        )
    # c2 drops below the threshold: same reason, but a new idle clock in memory
    assert not holds_after(made.steady, before, changed(2), config)
    assert "c2" in decide(changed(2), made.memory, config, later).memory.idle_since
    # the drain empties: the budget is back and c0 goes
    assert not holds_after(made.steady, before, changed(3), config)
    assert decide(changed(3), made.memory, config, later).victims == ("c0",)
    emptied = changed(0, _cells((0, ready)))  # c0 emptied: an empty cell goes without budget
    assert not holds_after(made.steady, before, emptied, config)
    assert decide(emptied, made.memory, config, later).victims == ("c0",)


def test_pending_pods_are_always_decided_again() -> None:
    config = PolicyConfig(max_replicas=10, shape=CellShape(gpus=4))
    ready = CellState.READY
    before = Observation((PendingPod("p", GPUAsk(), NOW),), _cells((1, ready), (4, ready)))
    made = decide(before, PolicyMemory(), config, NOW)
    assert made.steady is not None and made.steady.reads is Reads.CELLS
    after = replace(before, cells=_cells((2, ready), (4, ready)))
    assert not holds_after(made.steady, before, after, config)


@dataclass
class _TimeSkipOnly:
    """The policy without ``holds_after``: the engine repeats only on an unchanged world."""

    inner: ProductionPolicy

    def __post_init__(self) -> None:
        self.name = self.inner.name
        self.tick_seconds = self.inner.tick_seconds
        self.react_on_arrival = self.inner.react_on_arrival

    def decide(self, *args: Any) -> Any:
        return self.inner.decide(*args)


def _replays() -> list[tuple[str, Sequence[TracePod], SimConfig, Callable[[], ScalingPolicy]]]:
    four = PolicyConfig(max_replicas=1000, shape=CellShape(gpus=4))
    month = list(synthetic(1200, days=0.4, seed=1))
    bursts = SimConfig(policy_config=replace(four, max_replicas=60), samples=200, seed=2)
    usage = replace(four, scale_down_on_usage=True, utilization_threshold=0.3)
    return [
        ("synthetic", month, SimConfig(policy_config=four, samples=200), ProductionPolicy),
        ("legacy", month, SimConfig(policy_config=four, samples=200), legacy_windows_policy),
        ("evict", _bursts(2), replace(bursts, drain_mode=DrainMode.EVICT), ProductionPolicy),
        ("usage", month, SimConfig(policy_config=usage, samples=200), ProductionPolicy),
        (
            "budget2",
            _bursts(1),
            replace(bursts, policy_config=replace(four, disruption_budget=2)),
            ProductionPolicy,
        ),
    ]


@pytest.mark.parametrize("case", range(5))
def test_replays_are_the_same_with_and_without_the_repeat_on_changed_cells(case: int) -> None:
    _, pods, config, make = _replays()[case]
    fast = Simulation(pods, make(), config)
    fast_result = fast.run()
    plain = Simulation(pods, _TimeSkipOnly(make()), config)  # type: ignore[arg-type]
    assert fast_result == plain.run()
    # the repeat happened, and often (hedged boots and the warm spare change more decisions:
    # bursts of fractional pods on 4-GPU cells repeat 9 % of ticks with both by default)
    assert fast.decide_calls < 0.93 * plain.decide_calls


def test_fact_key_is_the_index_facts_of_the_view() -> None:
    for seed in range(400):
        rng = random.Random(seed)
        shape = CellShape(gpus=rng.choice((1, 4, 8)))
        view = _cell(rng, shape, seed)
        if rng.random() < 0.2:  # fewer GPUs reported than the shape has
            view = replace(view, gpus=view.gpus[:-1])
        threshold = rng.choice((0.0, 0.3, 0.5))
        f = cell_index._cell_facts(view, shape, threshold)
        holds = f.row is not None and any(g.slots for g in f.row[1])
        expected = (f.row is not None, f.empty, f.live_empty, f.candidate, f.draining_busy)
        assert fact_key(view, shape, threshold) == (*expected, holds), seed
