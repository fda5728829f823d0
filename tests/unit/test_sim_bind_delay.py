"""The bind delay after a boot in the simulator (``SimConfig.bind_delay_seconds``): a booted
cell is Ready (billed, seen by the policy) at once and takes pods that long later, as the
twin's HAMi binds a waiting pod on its next pass over the new node; at 0 the engine places
waiting pods at the boot's end, as before."""

from __future__ import annotations

import argparse

import pytest

from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellState
from simulations.demo.config import DemoSpec, WorldTimings, sim_config
from simulations.simulator.cli import add_world_arguments
from simulations.simulator.cli import sim_config as cli_sim_config
from simulations.simulator.engine import BootModel, ProductionPolicy, SimConfig, simulate
from simulations.simulator.traces import TracePod
from tests.unit.test_sim_engine import HALF, WHOLE, Scripted, Seeing, random_trace

FIXED_BOOT = BootModel(median_seconds=50.0, sigma=0.0)


def delayed(seconds: float, **kwargs: object) -> SimConfig:
    base: dict[str, object] = {"boot": FIXED_BOOT, "samples": 50, "warm_start": False}
    base["bind_delay_seconds"] = seconds
    return SimConfig(**(base | kwargs))  # type: ignore[arg-type]


def test_a_pod_waiting_for_a_boot_is_placed_the_delay_after_it() -> None:
    pods = (TracePod("p", 0.0, 1000.0, WHOLE),)
    at_once = simulate(pods, Scripted([(0.0, 1, ())]), delayed(0.0))
    late = simulate(pods, Scripted([(0.0, 1, ())]), delayed(4.0))
    assert at_once.waits_seconds == (50.0,)  # the boot only
    assert late.waits_seconds == (54.0,)  # the boot, then HAMi's pass over the new node
    # the cell is billed from its creation either way; the pod runs 4 s later, so it does too
    assert late.cost_cell_hours == pytest.approx(at_once.cost_cell_hours + 4.0 / 3600)


def test_the_policy_sees_the_cell_ready_before_a_pod_lands_on_it() -> None:
    pods = (TracePod("p", 0.0, 1000.0, WHOLE),)
    policy = Seeing([(0.0, 1, ())], tick_seconds=5.0, view=lambda c: (c.state, c.pods))
    simulate(pods, policy, delayed(15.0))
    at = dict(policy.seen)
    assert at[45.0] == ((CellState.BOOTING, 0),)
    assert at[50.0] == at[60.0] == ((CellState.READY, 0),)  # Ready at 50, the pod not on it
    assert at[65.0] == ((CellState.READY, 1),)  # HAMi's pass at 50 + 15


def test_an_arrival_on_an_open_cell_is_placed_at_once() -> None:
    """Only a fresh cell waits for HAMi's pass: a pod arriving once it took pods lands at once."""
    pods = (TracePod("a", 0.0, 1000.0, HALF), TracePod("b", 200.0, 1000.0, HALF))
    result = simulate(pods, Scripted([(0.0, 1, ())]), delayed(4.0))
    assert sorted(result.waits_seconds) == [0.0, 54.0]


def test_an_arrival_inside_the_delay_waits_for_the_cell_to_open() -> None:
    pods = (TracePod("a", 0.0, 1000.0, HALF), TracePod("b", 52.0, 1000.0, HALF))
    result = simulate(pods, Scripted([(0.0, 1, ())]), delayed(4.0))
    assert sorted(result.waits_seconds) == [2.0, 54.0]  # b arrived at 52, the cell opened at 54


def test_a_waves_cells_ready_within_the_delay_open_together_oldest_pod_to_lowest_cell() -> None:
    """HAMi's pass sees every placeable node: the cells of a wave that turned Ready before the
    first one's delay ended open with it, and the oldest pods go to the lowest cells (as the
    twin's HAMi binds a wave oldest first to the lowest names), not to whichever opened first."""
    pods = tuple(TracePod(f"p{i}", float(i), 1000.0, WHOLE) for i in range(3))
    boots = iter([(50.0, False), (49.0, False), (48.0, False)])  # the last cell is Ready first

    class Reversed(BootModel):
        def sample(self, rng: object) -> tuple[float, bool]:
            return next(boots)

    config = delayed(4.0, boot=Reversed(median_seconds=50.0, sigma=0.0))
    result = simulate(pods, Scripted([(0.0, 3, ())]), config)
    # Ready at 48, 49 and 50 (cell-2 first); all open at 48 + 4, so the pods (arrived at 0, 1
    # and 2) wait 52, 51 and 50 s; opened one by one each would have waited 52 s
    assert result.waits_seconds == (52.0, 51.0, 50.0)


def test_a_cell_drained_before_it_opens_takes_no_pod() -> None:
    pods = (TracePod("p", 0.0, 1000.0, WHOLE),)
    steps = [(0.0, 1, ()), (52.0, 0, ("cell-0",))]
    result = simulate(pods, Scripted(steps, tick_seconds=1.0), delayed(10.0, tail_seconds=100.0))
    assert result.unplaced == 1 and result.evictions == 0


def test_no_delay_is_the_engine_as_before() -> None:
    pods = random_trace(5, count=80)
    policy = ProductionPolicy("gpucellpool")
    plain = SimConfig(boot=FIXED_BOOT, samples=50, warm_start=False)
    assert simulate(pods, policy, delayed(0.0)) == simulate(pods, policy, plain)


def test_the_production_policy_asks_no_cell_for_pods_a_ready_cell_will_take() -> None:
    """Through three ticks of delay the policy sees Ready cells with room and the pods still
    pending: it asks for no more cells, cancels and retires none of them."""
    pods = tuple(TracePod(f"p{i}", 0.0, 1000.0, WHOLE) for i in range(4))
    config = {"react_on_arrival": True, "tail_seconds": 2000.0}
    base = simulate(pods, ProductionPolicy("gpucellpool"), delayed(0.0, **config))
    late = simulate(pods, ProductionPolicy("gpucellpool"), delayed(30.0, **config))
    assert base.waits_seconds == (50.0,) * 4 and late.waits_seconds == (80.0,) * 4
    assert late.scale_up_cells == base.scale_up_cells == 4
    assert late.scale_down_cells == base.scale_down_cells == 0


def test_the_production_policy_under_a_delay_is_deterministic() -> None:
    pods = random_trace(3, count=60, span=6000.0)
    late = simulate(pods, ProductionPolicy("gpucellpool"), delayed(5.0, react_on_arrival=True))
    again = simulate(pods, ProductionPolicy("gpucellpool"), delayed(5.0, react_on_arrival=True))
    assert late == again and late.unplaced == 0


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="bind_delay_seconds"):
        SimConfig(bind_delay_seconds=-1.0)


def test_the_cli_passes_the_delay_and_refuses_a_negative_one() -> None:
    parser = argparse.ArgumentParser()
    add_world_arguments(parser)
    args = parser.parse_args(["--bind-delay-seconds", "3.5"])
    assert cli_sim_config(args, PolicyConfig()).bind_delay_seconds == 3.5
    assert cli_sim_config(parser.parse_args([]), PolicyConfig()).bind_delay_seconds == 0.0
    with pytest.raises(SystemExit):
        parser.parse_args(["--bind-delay-seconds", "-1"])


def test_the_demo_gives_the_simulator_the_twins_median_bind_delay() -> None:
    spec = DemoSpec()
    timings = WorldTimings.nominal(spec)
    assert timings.with_binds([]) == timings  # none seen: placed at the boot's end
    measured = timings.with_binds([0.1, 0.3, 0.2, 0.25])
    assert measured.bind_delay_seconds == pytest.approx(0.225)
    assert sim_config(spec, measured).bind_delay_seconds == pytest.approx(0.225)
