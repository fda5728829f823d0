"""Engine: determinism, conservation, no over-commit, drain semantics, ticks, boots, HAMi."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from autoscaler.policy.decision import Decision, Reason, Steady
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    NodeTemplate,
    Observation,
    PolicyMemory,
)
from simulations.simulator.baselines import PEERS, oracle
from simulations.simulator.engine import (
    BootModel,
    DrainMode,
    ProductionPolicy,
    ScalingPolicy,
    SimConfig,
    SimResult,
    simulate,
)
from simulations.simulator.engine.hami import BINPACK, SPREAD, choose_gpus
from simulations.simulator.engine.world import World
from simulations.simulator.fidelity import normalise
from simulations.simulator.traces import TracePod

WHOLE = GPUAsk(memory_percent=100, cores_percent=100)
HALF = GPUAsk(memory_percent=50, cores_percent=50)
FIXED_BOOT = BootModel(median_seconds=50.0, sigma=0.0)


@dataclass
class Scripted:
    """Desired replicas (and victims) as a step function of time; records when it was called."""

    steps: list[tuple[float, int, tuple[str, ...]]]
    name: str = "scripted"
    tick_seconds: float = 10.0
    react_on_arrival: bool = False
    act: bool = True
    calls: list[float] = field(default_factory=list)

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        self.calls.append(now)
        desired = 0
        victims: tuple[str, ...] = ()
        for start, want, names in self.steps:
            if now >= start:
                desired, victims = want, names
        return Decision(desired, Reason.IDLE, "", memory, victims=victims, act=self.act)


def random_trace(seed: int, count: int = 150, span: float = 20000.0) -> tuple[TracePod, ...]:
    rng = random.Random(seed)
    asks = [WHOLE, HALF, GPUAsk(memory_percent=20, cores_percent=20), GPUAsk(memory_mib=4096)]
    pods = [
        TracePod(f"p{i}", rng.uniform(0, span), rng.uniform(30, 3000), rng.choice(asks))
        for i in range(count)
    ]
    return tuple(sorted(pods, key=lambda p: (p.arrival_seconds, p.key)))


def config(**kwargs: object) -> SimConfig:
    base: dict[str, object] = {
        "policy_config": PolicyConfig(max_replicas=100),
        "boot": BootModel(median_seconds=120.0, sigma=0.3, failure_probability=0.05),
        "samples": 50,
    }
    base.update(kwargs)
    return SimConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("factory", [ProductionPolicy, PEERS["cluster-autoscaler"]])
def test_same_seed_same_result_other_seed_differs(factory: type[ScalingPolicy]) -> None:
    pods = random_trace(1, count=60, span=6000.0)
    first = simulate(pods, factory(), config(seed=3))
    again = simulate(pods, factory(), config(seed=3))
    other = simulate(pods, factory(), config(seed=4))
    assert first == again
    assert other.cost_cell_hours != first.cost_cell_hours


class Checking:
    """Wraps a policy and checks world invariants in every observation it is shown."""

    def __init__(self, inner: ScalingPolicy, shape: CellShape, total: int) -> None:
        self.inner, self.shape, self.total = inner, shape, total
        self.name = inner.name
        self.tick_seconds = getattr(inner, "tick_seconds", 10.0)
        self.react_on_arrival = getattr(inner, "react_on_arrival", False)
        self.seen_pods = 0

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        for cell in observation.cells:
            for gpu in cell.gpus:
                assert 0 <= gpu.memory_mib <= self.shape.memory_mib
                assert 0 <= gpu.cores_percent <= self.shape.cores_percent
                assert 0 <= gpu.slots <= self.shape.slots
        placed = sum(c.pods for c in observation.cells)
        assert placed + len(observation.pending) <= self.total
        self.seen_pods = max(self.seen_pods, placed)
        return self.inner.decide(observation, memory, config, now)


@pytest.mark.parametrize("name", ["gpucellpool", *PEERS])
def test_conservation_and_no_overcommit(name: str) -> None:
    pods = random_trace(2)
    cfg = config(drain_mode=DrainMode.EVICT)
    inner = ProductionPolicy() if name == "gpucellpool" else PEERS[name]()
    checking = Checking(inner, cfg.policy_config.shape, len(pods))
    result = simulate(pods, checking, cfg)
    assert checking.seen_pods > 0
    assert len(result.waits_seconds) == result.pods == len(pods)
    assert result.unplaced == 0  # every pod placed, ran and ended
    assert all(w >= 0 for w in result.waits_seconds)


def test_world_never_places_beyond_a_gpu() -> None:
    world = World(CellShape(gpus=1, slots=2), BINPACK, SPREAD)
    cell = world.add_cell(0.0, CellState.READY)
    for i in range(3):
        world.enqueue(
            TracePod(f"p{i}", 0.0, 10.0, GPUAsk(memory_percent=10, cores_percent=10)), 0.0, 10.0
        )
    placed = 0
    for entry in list(world.pending.values()):
        found = world.find_cell(entry.pod.ask)
        if found:
            world.bind(entry, found[0], found[1], 0.0, placed)
            placed += 1
    assert placed == 2 and cell.gpus[0].slots == 2  # the slot limit held


DRAIN_STEPS = [(0.0, 2, ()), (200.0, 1, ("cell-0",))]


def run_drain(mode: DrainMode, timeout: float | None) -> SimResult:
    pods = (TracePod("long", 0.0, 1000.0, WHOLE),)
    cfg = config(
        boot=FIXED_BOOT,
        drain_mode=mode,
        drain_timeout_seconds=timeout,
        warm_start=False,
        drain_seconds=30.0,
    )
    return simulate(pods, Scripted(list(DRAIN_STEPS)), cfg)


def test_evict_requeues_with_remaining_time() -> None:
    result = run_drain(DrainMode.EVICT, None)
    assert result.evictions == 1
    assert result.waits_seconds == pytest.approx((50.0,))  # boot wait; re-placed at once
    assert result.end_seconds == pytest.approx(1050.0)  # remaining duration kept
    # cell-0 billed 0..230 (drain started at 200 + 30 s), cell-1 0..1050
    assert result.cost_cell_hours * 3600 == pytest.approx(230.0 + 1050.0)


def test_wait_for_idle_does_not_evict() -> None:
    result = run_drain(DrainMode.WAIT_FOR_IDLE, None)
    assert result.evictions == 0
    assert result.end_seconds == pytest.approx(1050.0)
    assert result.cost_cell_hours * 3600 == pytest.approx(2 * 1050.0)


def test_wait_for_idle_timeout_abandons_the_drain_and_keeps_the_cell() -> None:
    result = run_drain(DrainMode.WAIT_FOR_IDLE, 300.0)
    # drain at 200, abandoned at 500, re-drained at the 510 tick, abandoned at 810, again at
    # 820; the pod ends at 1050 first. Nothing is evicted; the cell is billed throughout.
    assert result.evictions == 0 and result.drains_abandoned == 2
    assert result.scale_down_cells == 3
    assert result.cost_cell_hours * 3600 == pytest.approx(2 * 1050.0)


def test_billable_cells_are_recorded_at_each_change_exactly() -> None:
    # Two cells from 0; cell-0 drained at 200 and gone at 230. The samples (every 20 s here)
    # show the change only at 240; the change points carry 230 itself, which the fidelity
    # check against the twin compares.
    result = run_drain(DrainMode.EVICT, None)
    changes = normalise(result.cells)  # the instant 0 passes through 0 cells to 2
    assert changes[:2] == [(0.0, 2), (pytest.approx(230.0), 1)]
    first_sampled = next(s for s in result.timeline if s.ready + s.booting + s.draining == 1)
    assert first_sampled.time_seconds == pytest.approx(240.0)


def test_react_on_arrival_ticks_within_a_second() -> None:
    policy = Scripted([(0.0, 0, ())], tick_seconds=100.0, react_on_arrival=True)
    pods = (TracePod("a", 3.0, 5.0, WHOLE),)
    simulate(pods, policy, config(tail_seconds=150.0, warm_start=False))
    assert policy.calls[:3] == [0.0, 4.0, 100.0]


@pytest.mark.parametrize("failure_probability", [0.0, 1.0])
def test_react_also_follows_a_finished_boot(failure_probability: float) -> None:
    # the live loop wakes on the Node's change (Ready, or the boot failed), not at its next
    # requeue: a policy that reacts sees a cell that finished booting within a second
    boot = BootModel(median_seconds=55.0, sigma=0.0, failure_probability=failure_probability)
    cfg = config(boot=boot, tail_seconds=150.0, warm_start=False)
    reacting = Scripted([(0.0, 1, ())], tick_seconds=100.0, react_on_arrival=True)
    pods = (TracePod("a", 0.0, 300.0, WHOLE),)  # pending at the first tick: a react at 1 s
    simulate(pods, reacting, cfg)
    assert reacting.calls[:4] == [0.0, 1.0, 56.0, 100.0]
    ticking = Scripted([(0.0, 1, ())], tick_seconds=100.0)
    simulate(pods, ticking, cfg)
    assert ticking.calls[:2] == [0.0, 100.0]


def test_react_also_follows_a_pod_ending() -> None:
    # live, a pod's end changes its Node, which wakes the pool (autoscaler.routing.route_pod):
    # a cell it leaves idle starts its scale-down window then, not at the next tick
    cfg = config(boot=BootModel(median_seconds=55.0, sigma=0.0), tail_seconds=150.0)
    reacting = Scripted([(0.0, 2, ())], tick_seconds=100.0, react_on_arrival=True)
    # placed as their cells are Ready at 55: "a" ends at 75, "b" runs on
    pods = (TracePod("a", 0.0, 20.0, WHOLE), TracePod("b", 0.0, 300.0, WHOLE))
    simulate(pods, reacting, replace(cfg, warm_start=False))
    assert reacting.calls[:5] == [0.0, 1.0, 56.0, 76.0, 100.0]
    ticking = Scripted([(0.0, 2, ())], tick_seconds=100.0)
    simulate(pods, ticking, replace(cfg, warm_start=False))
    assert ticking.calls[:2] == [0.0, 100.0]


def test_shadow_decisions_create_nothing() -> None:
    policy = Scripted([(0.0, 3, ())], act=False)
    pods = (TracePod("a", 5.0, 5.0, WHOLE),)
    result = simulate(pods, policy, config(tail_seconds=100.0, warm_start=False))
    assert result.scale_up_cells == 0 and result.unplaced == 1


def test_failed_boots_are_counted_and_cost_until_failure() -> None:
    policy = Scripted([(0.0, 1, ())], tick_seconds=1000.0)
    cfg = config(
        boot=BootModel(median_seconds=50.0, sigma=0.0, failure_probability=1.0),
        tail_seconds=500.0,
        warm_start=False,
    )
    result = simulate((TracePod("a", 0.0, 10.0, WHOLE),), policy, cfg)
    assert result.boot_failures == 1 and result.unplaced == 1
    assert result.cost_cell_hours * 3600 == pytest.approx(50.0)


def test_warm_start_places_pods_present_at_zero() -> None:
    pods = (TracePod("a", 0.0, 100.0, HALF), TracePod("b", 0.0, 100.0, HALF))
    result = simulate(pods, Scripted([(0.0, 1, ())]), config())
    assert result.waits_seconds == (0.0, 0.0)
    assert result.cost_cell_hours * 3600 == pytest.approx(100.0)


def test_unschedulable_pods_are_left_out_and_counted() -> None:
    pods = (
        TracePod("big", 0.0, 10.0, GPUAsk(gpu_count=2)),
        TracePod("elsewhere", 0.0, 10.0, HALF, node_selector=(("gpu", "h100"),)),
        TracePod("here", 0.0, 10.0, HALF, node_selector=(("gpu", "a100"),)),
        TracePod("a", 0.0, 10.0, HALF),
    )
    pool = PolicyConfig(max_replicas=10, node_template=NodeTemplate(labels={"gpu": "a100"}))
    result = simulate(pods, Scripted([(0.0, 1, ())]), config(policy_config=pool))
    assert result.unschedulable == 2 and result.pods == 2


def test_hami_gpu_and_node_policies() -> None:
    shape = CellShape(gpus=2)
    used = [GPUUsage(memory_mib=12288, cores_percent=50, slots=1), GPUUsage()]
    assert choose_gpus(used, shape, HALF, SPREAD) == (1,)
    assert choose_gpus(used, shape, HALF, BINPACK) == (0,)
    assert choose_gpus(used, shape, WHOLE, BINPACK) == (1,)  # exclusive needs an idle GPU
    assert choose_gpus(used, shape, GPUAsk(gpu_count=2, memory_percent=10), SPREAD) == (0, 1)
    assert choose_gpus(used, shape, GPUAsk(gpu_count=2, memory_percent=60), SPREAD) is None


def test_oracle_is_below_every_policy() -> None:
    pods = random_trace(5, count=100)
    cfg = config(drain_mode=DrainMode.EVICT)
    bound = oracle(pods, cfg.policy_config.shape)
    assert bound.cost_cell_hours > 0
    for factory in [ProductionPolicy, *PEERS.values()]:
        result = simulate(pods, factory(), cfg)
        assert bound.cost_cell_hours <= result.cost_cell_hours, result.policy


@dataclass
class Seeing(Scripted):
    """Scripted, and records what ``view`` reads of each cell at every call:
    (time, (view(cell), ...)); by default each cell's name and state."""

    view: Callable[[CellView], object] = lambda cell: (cell.name, cell.state)
    seen: list[tuple[float, tuple[Any, ...]]] = field(default_factory=list)

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        self.seen.append((now, tuple(self.view(c) for c in observation.cells)))
        return super().decide(observation, memory, config, now)


def test_pods_freed_at_one_instant_are_placed_once_after_all_of_them() -> None:
    """Two pods end at the same instant on two cells; the pending pod goes where HAMi's binpack
    puts it seeing both (the fuller cell), not on the cell whose pod's end came first."""
    quarter = GPUAsk(memory_percent=25, cores_percent=25)
    pods = (
        TracePod("x", 0.0, 100.0, HALF),  # cell-0, ends first in the event order
        TracePod("y", 0.0, 1000.0, quarter),  # cell-0: 25 % left after x
        TracePod("z", 0.0, 100.0, HALF),  # cell-1
        TracePod("w", 0.0, 1000.0, HALF),  # cell-1: 50 % left after z
        TracePod("p", 50.0, 500.0, HALF),  # fits nowhere until x and z end
    )
    policy = Seeing([(0.0, 2, ())], view=lambda cell: (cell.name, cell.pods))
    result = simulate(pods, policy, SimConfig(samples=50, boot=BootModel(50.0, sigma=0.0)))
    assert result.waits_seconds[-1] == 50.0 and result.scale_up_cells == 0
    at = dict(policy.seen)
    assert at[40.0] == (("cell-0", 2), ("cell-1", 2))
    assert at[110.0] == (("cell-0", 1), ("cell-1", 2))  # p next to w, the fuller cell


@dataclass
class Promising(Scripted):
    """Scripted, and every decision promises to hold ``hold_s`` (``Decision.steady``)."""

    hold_s: float = 30.0

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        decision = super().decide(observation, memory, config, now)
        return replace(decision, steady=Steady(until=now + self.hold_s))


def test_a_reacting_policy_also_decides_when_its_promise_ends_before_the_next_tick() -> None:
    """The live loop sleeps until ``steady.until`` (a window or delay running out, a pending
    pod becoming stuck), not to its next tick: so does the simulator for a reacting policy."""
    cfg = config(tail_seconds=250.0, warm_start=False)
    reacting = Promising([(0.0, 0, ())], tick_seconds=100.0, react_on_arrival=True)
    simulate((TracePod("a", 500.0, 5.0, WHOLE),), reacting, cfg)
    # each promise's end (the tick at 100 s, inside a promise, repeats the decision)
    assert reacting.calls[:6] == [0.0, 30.0, 60.0, 90.0, 120.0, 150.0]
    ticking = Promising([(0.0, 0, ())], tick_seconds=100.0)
    simulate((TracePod("a", 500.0, 5.0, WHOLE),), ticking, cfg)
    assert ticking.calls[:2] == [0.0, 100.0]


def test_a_finished_boot_can_have_its_own_reaction_delay() -> None:
    boot = BootModel(median_seconds=55.0, sigma=0.0)
    cfg = config(boot=boot, tail_seconds=150.0, warm_start=False, boot_react_delay_seconds=7.0)
    reacting = Scripted([(0.0, 1, ())], tick_seconds=100.0, react_on_arrival=True)
    simulate((TracePod("a", 0.0, 300.0, WHOLE),), reacting, cfg)
    assert reacting.calls[:4] == [0.0, 1.0, 62.0, 100.0]  # Ready at 56, decided 7 s later


def test_the_first_reaction_of_a_run_can_have_its_own_delay() -> None:
    cfg = config(tail_seconds=150.0, warm_start=False, first_react_delay_seconds=6.0)
    policy = Scripted([(0.0, 0, ())], tick_seconds=100.0, react_on_arrival=True)
    pods = (TracePod("a", 3.0, 5.0, WHOLE), TracePod("b", 30.0, 5.0, WHOLE))
    simulate(pods, policy, cfg)
    assert policy.calls[:4] == [0.0, 9.0, 31.0, 100.0]  # 6 s after the first pod, then 1 s
