"""The simulator replays the trace's ``usage`` column for ``scaleDownOn: Usage``.

What these prove: the generic format reads and writes ``usage`` (a fraction 0-1, default 1,
anything else refused with the column named); the engine marks a cell idle once every pod on
it has computed nothing for the window; with Usage mode and Evict drains a pod that holds a
whole GPU idle is evicted and not re-run, so the cell goes and the run costs less than with
Allocation mode, while busy pods (usage 1) are never touched; idle-tick skipping gives the same
result as deciding on every tick.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.policy.policy_config import PolicyConfig, RatePolicy, RatePolicyType, ScalingRules
from autoscaler.policy.types import CellShape, GPUAsk
from simulations.simulator.engine import BootModel, DrainMode, ProductionPolicy, SimConfig, simulate
from simulations.simulator.engine.clock import VirtualClock
from simulations.simulator.engine.sim import Simulation
from simulations.simulator.traces import TracePod
from simulations.simulator.traces.generic import parse_generic, write_generic

WHOLE = GPUAsk(memory_percent=100, cores_percent=100)
SHAPE = CellShape(gpus=1, memory_mib=24576, cores_percent=100, slots=10)
ALLOCATION = PolicyConfig(
    min_replicas=0,
    max_replicas=10,
    shape=SHAPE,
    scale_down=ScalingRules(0.0, ()),
    scale_down_delay_after_scale_up_seconds=0.0,
    rehome_draining_pods=True,
)
USAGE = replace(ALLOCATION, scale_down_on_usage=True)
HOUR = 3600.0


def config(policy: PolicyConfig, **kw: object) -> SimConfig:
    return SimConfig(
        policy_config=policy,
        boot=BootModel(median_seconds=60.0, sigma=0.0),
        drain_mode=DrainMode.EVICT,
        usage_idle_window_seconds=600.0,
        tail_seconds=600.0,
        **kw,  # type: ignore[arg-type]
    )


def test_generic_usage_column_round_trips_and_is_checked(tmp_path: Path) -> None:
    text = [
        "arrival_seconds,duration_seconds,usage\n",
        "0,100,0.25\n",
        "0,100,\n",
        "0,100,1.5\n",
        "0,100,-0.1\n",
    ]
    loaded = parse_generic(text, jsonl=False)
    assert [p.usage for p in loaded.pods] == [0.25, 1.0]
    assert [m.line for m in loaded.malformed] == [4, 5]
    assert all("usage=" in m.reason for m in loaded.malformed)
    path = tmp_path / "t.csv"
    write_generic(loaded.pods, path)
    again = parse_generic(path.read_text().splitlines(keepends=True), jsonl=False)
    assert [p.usage for p in again.pods] == [0.25, 1.0]
    json = parse_generic(['{"arrival_seconds": 0, "duration_seconds": 5, "usage": 0}\n'], True)
    assert json.pods[0].usage == 0.0


def pods() -> list[TracePod]:
    """One pod busy 1 h of its 10 h, one busy for all of its 10 h: a whole GPU each."""
    return [
        TracePod("idler", 0.0, 10 * HOUR, WHOLE, usage=0.1),
        TracePod("worker", 0.0, 10 * HOUR, WHOLE),
    ]


def test_usage_mode_reclaims_the_idle_pods_cell_and_leaves_the_busy_one() -> None:
    by_allocation = simulate(pods(), ProductionPolicy(), config(ALLOCATION))
    by_usage = simulate(pods(), ProductionPolicy(), config(USAGE))
    assert by_allocation.evictions == 0
    assert by_usage.evictions == 1  # the idler, once: it is not re-run
    assert by_usage.unplaced == 0
    # The idler's cell goes ~1 h 10 min in (1 h busy, 10 min window) instead of at 10 h.
    assert by_allocation.cost_cell_hours == pytest.approx(20.0, abs=0.2)
    assert by_usage.cost_cell_hours == pytest.approx(10 + 1 + 600 / HOUR, abs=0.2)


def test_busy_pods_are_never_reclaimed() -> None:
    busy = [TracePod(f"w{i}", 0.0, 5 * HOUR, WHOLE) for i in range(3)]
    by_usage = simulate(busy, ProductionPolicy(), config(USAGE))
    assert by_usage.evictions == 0
    assert by_usage.cost_cell_hours == pytest.approx(15.0, abs=0.2)


def test_idle_tick_skipping_gives_the_same_usage_run() -> None:
    trace = [
        *pods(),
        TracePod("late", 2 * HOUR, 3 * HOUR, WHOLE, usage=0.5),
        TracePod("half", HOUR, 4 * HOUR, GPUAsk(memory_percent=50, cores_percent=50), usage=0.0),
    ]
    skipping = simulate(trace, ProductionPolicy(), config(USAGE))
    every = simulate(trace, ProductionPolicy(), config(USAGE, skip_idle_ticks=False))
    assert replace(skipping, decisions=0, events=0) == replace(every, decisions=0, events=0)


def test_rate_limits_and_budget_still_bound_usage_scale_down() -> None:
    idlers = [TracePod(f"i{i}", 0.0, 10 * HOUR, WHOLE, usage=0.0) for i in range(4)]
    one_an_hour = (RatePolicy(RatePolicyType.CELLS, 1, 3600),)
    slow = replace(USAGE, scale_down=ScalingRules(0.0, one_an_hour))
    run = simulate(idlers, ProductionPolicy(), config(slow))
    assert run.evictions == 4
    # One cell per hour: the last idler's cell goes about three hours after the first.
    assert run.cost_cell_hours > 4 * (600 / HOUR) + 5.5


def test_the_simulator_runs_on_the_virtual_clock_and_sorts_arrivals() -> None:
    """Arrivals out of order (``late`` before ``half``) run as if sorted, and the run's event
    time is the one virtual clock's (``Simulation.clock``), which never goes back."""
    trace = [
        *pods(),
        TracePod("late", 2 * HOUR, 3 * HOUR, WHOLE, usage=0.5),
        TracePod("half", HOUR, 4 * HOUR, GPUAsk(memory_percent=50, cores_percent=50), usage=0.0),
    ]
    ordered = sorted(trace, key=lambda p: p.arrival_seconds)
    run = Simulation(trace, ProductionPolicy(), config(USAGE))
    result = run.run()
    assert result == simulate(ordered, ProductionPolicy(), config(USAGE))
    assert isinstance(run.clock, VirtualClock) and 5 * HOUR <= run.clock.now() <= run.horizon
