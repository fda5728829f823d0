"""The simulator carries out a decision through the provisioner's plan check (engine.actuator).

What these prove: the simulated actuator runs ``provisioner.fsm.plan_check`` on the world's
cells, so what the live provisioner would trim is trimmed for the same typed reason - new cells
beyond the free physical GPUs (every simulated cell holds its GPUs, draining ones included;
GPUs per cell counted) and a target outside the spec's bounds - and the accepted victims are
drained in the plan's order, at most down to the target, a cell already leaving being skipped
and a missing one rejected (VictimGone), without another cell standing in.
"""

from __future__ import annotations

from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape, CellState, GPUAsk, PolicyMemory
from provisioner.fsm.plan_check import Bounds, CellFact, Plan, Rejection, check_plan
from simulations.simulator.engine.actuator import actions
from simulations.simulator.engine.world import Running, World
from simulations.simulator.traces.model import TracePod

CONFIG = PolicyConfig(min_replicas=0, max_replicas=6, shape=CellShape(gpus=2))


def world(*states: CellState) -> World:
    w = World(CONFIG.shape, "binpack", "binpack")
    for state in states:
        w.add_cell(0.0, state)
    return w


def plan(target: int, *victims: str) -> Decision:
    return Decision(target, Reason.SCALED_UP, "", PolicyMemory(), victims)


def test_creations_stop_at_the_free_physical_gpus() -> None:
    w = world(CellState.READY, CellState.DRAINING)  # the draining cell still holds its 2 GPUs
    todo = actions(plan(5), w.cells.values(), CONFIG, 9, 0.0)  # (9 - 4) // 2 = 2 new cells
    assert (todo.create, todo.drain) == (2, ())
    (verdict,) = todo.checked.rejections
    assert verdict.rejection is Rejection.PHYSICAL_GPU_EXCEEDED
    assert actions(plan(5), w.cells.values(), CONFIG, None, 0.0).create == 4  # no ledger


def test_a_target_beyond_max_is_clamped_as_the_provisioner_does() -> None:
    todo = actions(plan(9), world().cells.values(), CONFIG, None, 0.0)
    assert todo.create == 6
    assert todo.checked.rejections[0].rejection is Rejection.TARGET_OUT_OF_BOUNDS


def test_victims_in_the_plans_order_down_to_the_target_only() -> None:
    w = world(CellState.READY, CellState.READY, CellState.READY, CellState.DRAINING)
    todo = actions(
        plan(1, "cell-3", "cell-0", "cell-2", "cell-1"), w.cells.values(), CONFIG, None, 0
    )
    assert todo.drain == ("cell-0", "cell-2")  # cell-3 is already leaving: not replaced
    assert todo.checked.rejections == ()
    gone = actions(plan(1, "cell-9", "cell-1"), w.cells.values(), CONFIG, None, 0)
    assert gone.drain == ("cell-1",)  # no stand-in for the missing cell-9
    assert [v.rejection for v in gone.checked.rejections] == [Rejection.VICTIM_GONE]
    assert actions(plan(3, "cell-0"), w.cells.values(), CONFIG, None, 0).drain == ()


def test_a_plan_without_victims_or_physical_limit_is_checked_as_with_every_cells_fact() -> None:
    # the actuator skips the per-cell facts then; the check must answer exactly as with them
    states = (CellState.READY, CellState.BOOTING, CellState.DRAINING, CellState.FAILED)
    w = world(*states, CellState.READY)
    facts = [
        CellFact(c.name, live=c.state in (CellState.BOOTING, CellState.READY))
        for c in w.cells.values()
    ]
    for target in range(0, 9):
        todo = actions(plan(target), w.cells.values(), CONFIG, None, 5.0)
        bounds = Bounds(CONFIG.min_replicas, CONFIG.max_replicas, None, None, 2)
        assert todo.checked == check_plan(Plan(target, ()), facts, bounds, 5.0)
        live = 3  # two Ready, one Booting
        assert todo.create == max(0, min(target, CONFIG.max_replicas) - live)


def test_a_cancelled_spare_that_took_a_pod_is_kept_as_the_provisioner_keeps_it() -> None:
    # A cancel of two spares, carried out after its execution lag: cell-1's boot ended
    # meanwhile and a waiting pod was placed on it (VictimInUse, no stand-in); cell-2 goes.
    w = world(CellState.READY, CellState.READY, CellState.BOOTING)
    pod = TracePod("ns/p", 0.0, 60.0, GPUAsk())
    w.cells["cell-1"].pods[pod.key] = Running(pod, "cell-1", (0,), 0.0, 60.0, 0)
    cancel = Decision(
        1,
        Reason.SPARES_CANCELLED,
        "",
        PolicyMemory(),
        ("cell-2", "cell-1"),
        empty_victims=("cell-2", "cell-1"),
    )
    todo = actions(cancel, w.cells.values(), CONFIG, None, 0.0)
    assert todo.drain == ("cell-2",)
    (verdict,) = todo.checked.rejections
    assert (verdict.rejection, verdict.cell) == (Rejection.VICTIM_IN_USE, "cell-1")
    # the same victims chosen by a scale-down (cells below the threshold) drain as planned
    down = actions(plan(1, "cell-2", "cell-1"), w.cells.values(), CONFIG, None, 0.0)
    assert down.drain == ("cell-2", "cell-1") and down.checked.rejections == ()
