"""Carry out a decision on the simulated world with the provisioner's own plan check.

Why this module exists: the simulator and the twin must differ only in timing. The live
provisioner does not act on a decision as it stands: it checks the plan against its fresh state
(``provisioner.fsm.plan_check``: target within the spec's bounds, victims still live and not in
drain back-off, new cells within the free physical GPUs) and executes what was accepted with
membership's rules for an autoscaled pool - create up to the target within the checked physical
limit; drain the accepted victims in the plan's order, at most down to the target, with no
other cell standing in for a rejected one. This module calls the same pure check with the
simulated world's facts and applies the same rules, so a plan the provisioner would trim is
trimmed here too, for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autoscaler.policy.types import CellState, Decision, PolicyConfig
from provisioner.fsm.plan_check import Bounds, CellFact, CheckedPlan, Plan, check_plan
from simulations.engine.world import SimCell

LIVE = (CellState.BOOTING, CellState.READY)


@dataclass(frozen=True, slots=True)
class Actions:
    """What to do now: ``create`` new cells, ``drain`` these live cells (in order)."""

    create: int
    drain: tuple[str, ...]
    checked: CheckedPlan


def actions(
    decision: Decision,
    cells: Iterable[SimCell],
    config: PolicyConfig,
    physical_gpus: int | None,
    now: float,
) -> Actions:
    """The plan of ``decision`` checked against ``cells`` and executed as membership would.

    Every simulated cell holds its GPUs from creation until it is gone (no pre-GPU phase), so the
    free GPUs are ``physical_gpus`` less every cell's, draining ones included.
    """
    all_cells = list(cells)
    live = [c.name for c in all_cells if c.state in LIVE]
    facts = [CellFact(c.name, live=c.state in LIVE) for c in all_cells]
    per_cell = max(config.shape.gpus, 1)
    free = None if physical_gpus is None else max(physical_gpus - len(all_cells) * per_cell, 0)
    bounds = Bounds(config.min_replicas, config.max_replicas, None, free, per_cell)
    checked = check_plan(Plan(decision.desired_replicas, decision.victims), facts, bounds, now)
    wanted = checked.target - len(live)
    if wanted > 0:
        limit = wanted if checked.create_limit is None else min(wanted, checked.create_limit)
        return Actions(limit, (), checked)
    excess = len(live) - checked.target - len(checked.held)
    return Actions(0, checked.victims[: max(excess, 0)], checked)
