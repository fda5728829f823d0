"""One execution rule: the simulator's actuator and live membership carry out a plan alike.

What these prove (issue 13: simulator and twin differ only in timing): given the same plan and
the same cells, ``simulations.simulator.engine.actuator`` (simulated world) and ``fsm.membership``
(live rows, plan checked by ``fsm.plan_check``) create the same number of cells and mark the same
cells for draining, in the same order - a cancelled hedged boot (a Booting victim), a victim
gone while the pool is above its target (no stand-in in either world), a clamped target, a
scale-up within the physical GPUs. The rule itself (``fsm.plan_execute``) is tested directly
too: Failed cells go first, a held victim's slot waits, a plan naming no victim converges by
highest index.
"""

from __future__ import annotations

import pytest

from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape, CellState, PolicyMemory
from provisioner.fsm.membership import (
    MemberRow,
    MembershipInput,
    MembershipLimits,
    MembershipPlan,
    plan_membership,
)
from provisioner.fsm.plan_check import Bounds, CellFact, CheckedPlan, Plan, check_plan
from provisioner.fsm.plan_execute import LiveCell, execute, removals
from provisioner.fsm.vocabulary import CellPhase
from simulations.simulator.engine.actuator import actions
from simulations.simulator.engine.world import World

CONFIG = PolicyConfig(min_replicas=0, max_replicas=6, shape=CellShape(gpus=1))
NOW = 5000.0
PHASE = {CellState.READY: CellPhase.READY, CellState.BOOTING: CellPhase.BOOTING}
B, R = CellState.BOOTING, CellState.READY


def _world(states: tuple[CellState, ...], gone: tuple[int, ...]) -> World:
    w = World(CONFIG.shape, "binpack", "binpack")
    for state in states:
        w.add_cell(0.0, state)
    for index in gone:
        w.remove_cell(f"cell-{index}")
    return w


def _live_plan(
    world: World, target: int, victims: tuple[str, ...], free: int | None
) -> MembershipPlan:
    """What membership marks for removal, or creates, for the same plan on the same cells."""
    cells = list(world.cells.values())
    facts = [CellFact(c.name) for c in cells]
    bounds = Bounds(CONFIG.min_replicas, CONFIG.max_replicas, None, free, 1)
    checked = check_plan(Plan(target, victims), facts, bounds, NOW)
    rows = tuple(MemberRow(c.name, c.index, PHASE[c.state], ready_once=True) for c in cells)
    limits = MembershipLimits(max_in_flight=100, lift_in_flight_when_proven=True)
    inp = MembershipInput("cell", checked.target, rows, {}, NOW, limits=limits, plan=checked)
    return plan_membership(inp)


SCENARIOS = {
    # the hedge cancels its two newest surplus boots
    "cancel-booting-spares": ((R, R, B, B, B), (), 3, ("cell-4", "cell-3"), None),
    # a victim vanished (deleted by hand) while an extra cell exists: nobody stands in
    "victim-gone-no-stand-in": ((R, R, R, R, R), (1,), 2, ("cell-1", "cell-3"), None),
    # maxReplicas lowered under the plan: the clamp's extra cells go highest index first
    "clamped-target": ((R,) * 8, (), 7, ("cell-0",), None),
    # scale-up within the free physical GPUs (2 free, 3 wanted)
    "create-within-physical": ((R, B), (), 5, (), 4),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_actuator_and_membership_execute_a_plan_alike(name: str) -> None:
    states, gone, target, victims, physical = SCENARIOS[name]
    world = _world(states, gone)
    free = None if physical is None else max(physical - len(world.cells), 0)
    decision = Decision(target, Reason.SCALED_DOWN, "", PolicyMemory(), victims)
    simulated = actions(decision, world.cells.values(), CONFIG, physical, NOW)
    live = _live_plan(world, target, victims, free)
    assert (simulated.create, simulated.drain) == (len(live.create), live.remove)


def test_booting_victims_are_removed_like_ready_ones_newest_first() -> None:
    checked = CheckedPlan(2, ("b-4", "b-3"), victims_named=True)
    live = [LiveCell("r-0", 0), LiveCell("r-1", 1), LiveCell("b-3", 3), LiveCell("b-4", 4)]
    assert execute(checked, live).remove == ("b-4", "b-3")


def test_failed_first_held_slot_waits_and_an_unnamed_plan_goes_by_index() -> None:
    live = [LiveCell("p-0", 0), LiveCell("p-1", 1, failed=True), LiveCell("p-2", 2)]
    live += [LiveCell("p-3", 3)]
    assert removals(CheckedPlan(2, ("p-0",), victims_named=True), live) == ("p-1", "p-0")
    held = CheckedPlan(1, ("p-2",), held=("p-3",), victims_named=True)
    assert removals(held, live) == ("p-1", "p-2")  # p-3's slot waits: 4 - 1 - 1 held = 2
    assert removals(CheckedPlan(2), live) == ("p-1", "p-3")  # named none: highest index
    assert execute(CheckedPlan(6, create_limit=1), live).create == 1
