"""The actuator's fast path accepts exactly what the provisioner's plan check would.

A plan that names no victim, keeps or raises the count within the spec's bounds and meets no
physical limit skips ``check_plan`` (most of a replay's decisions); every target, in and out of
the bounds, over pools of every mix of states, gets the same checked plan and the same actions
as through the check.
"""

from __future__ import annotations

import itertools

from autoscaler.policy.types import CellState, PolicyConfig
from provisioner.fsm.plan_check import Bounds, CellFact, CheckedPlan, Plan, check_plan
from provisioner.fsm.plan_execute import LiveCell, creatable, removals
from simulations.simulator.engine.actuator import LIVE, actions
from simulations.simulator.engine.world import SimCell
from tests.unit.test_sim_actuator import CONFIG, plan, world

STATES = (CellState.BOOTING, CellState.READY, CellState.DRAINING)


def _through_the_check(
    config: PolicyConfig, target: int, w_cells: list[SimCell]
) -> tuple[int, tuple[str, ...], CheckedPlan]:
    live = sum(c.state in LIVE for c in w_cells)
    bounds = Bounds(config.min_replicas, config.max_replicas, None, None, config.shape.gpus)
    facts = [CellFact(c.name, live=c.state in LIVE) for c in w_cells]
    checked = check_plan(Plan(target, ()), facts, bounds, 0.0)
    if checked.target >= live:
        return creatable(checked, checked.target - live), (), checked
    in_service = [LiveCell(c.name, c.index) for c in w_cells if c.state in LIVE]
    return 0, removals(checked, in_service), checked


def test_every_victimless_plan_gets_what_the_check_gives() -> None:
    configs = (CONFIG, PolicyConfig(min_replicas=2, max_replicas=4, shape=CONFIG.shape))
    fast = 0
    for config, size in itertools.product(configs, range(4)):
        for states in itertools.product(STATES, repeat=size):
            cells = list(world(*states).cells.values())
            for target in range(0, 8):
                todo = actions(plan(target), cells, config, None, 0.0)
                expected = _through_the_check(config, target, cells)
                assert (todo.create, todo.drain, todo.checked) == expected, (states, target)
                live = sum(c.state in LIVE for c in cells)
                fast += config.min_replicas <= target <= config.max_replicas and target >= live
    assert fast > 50  # the fast path was taken, not only the check
