"""Carry out a decision on the simulated world with the provisioner's own plan check.

Why this module exists: the simulator and the twin must differ only in timing. The live
provisioner does not act on a decision as it stands: it checks the plan against its fresh state
(``provisioner.fsm.plan_check``: target within the spec's bounds, victims still live and not in
drain back-off, new cells within the free physical GPUs) and executes what was accepted by
``provisioner.fsm.plan_execute``, as membership does for an autoscaled pool - create up to the
target within the checked physical limit; drain the accepted victims (a Booting one is a
cancelled boot) in the plan's order, at most down to the target, with no other cell standing
in for a rejected one. This module calls the same pure check and execution rule with the
simulated world's facts, so a plan the provisioner would trim is trimmed here too, for the
same reason.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autoscaler.policy.decision import Decision
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellState
from provisioner.fsm.plan_check import (
    Bounds,
    CellFact,
    CheckedPlan,
    Plan,
    accepted_as_is,
    check_plan,
)
from provisioner.fsm.plan_execute import LiveCell, creatable, removals
from simulations.simulator.engine.world import SimCell

LIVE = (CellState.BOOTING, CellState.READY)
_STATE = operator.attrgetter("state")


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
    free GPUs are ``physical_gpus`` less every cell's, draining ones included. A simulated
    cell is never in drain back-off nor waiting for its GPU, so the check reads the cells
    only to judge named victims and the physical limit; a plan with neither (most of a
    replay's decisions) is checked without building a fact per cell (the same answer,
    tests/unit/test_sim_actuator.py). A plan within the spec's bounds that names no victim,
    with no physical limit, is accepted as it stands by the check's own first rule
    (``plan_check.accepted_as_is``; tests/unit/test_sim_actuator_fast_path.py).
    """
    all_cells = list(cells)
    live = sum(map(LIVE.__contains__, map(_STATE, all_cells)))
    per_cell = max(config.shape.gpus, 1)
    free = None if physical_gpus is None else max(physical_gpus - len(all_cells) * per_cell, 0)
    plan = Plan(decision.desired_replicas, decision.victims, None, decision.empty_victims)
    bounds = Bounds(config.min_replicas, config.max_replicas, None, free, per_cell)
    # most decisions: accepted as they stand, no cell read (none is ever in drain back-off)
    checked = accepted_as_is(plan, (), bounds, now)
    if checked is None:
        facts = _facts(all_cells) if decision.victims or free is not None else ()
        checked = check_plan(plan, facts, bounds, now)
    if checked.target >= live:
        return Actions(creatable(checked, checked.target - live), (), checked)
    in_service = [LiveCell(c.name, c.index) for c in all_cells if c.state in LIVE]
    return Actions(0, removals(checked, in_service), checked)


def unchanged(
    decision: Decision, live: int, config: PolicyConfig, physical_gpus: int | None
) -> bool:
    """Whether ``actions`` would create and drain nothing for ``decision`` on a world with
    ``live`` Booting or Ready cells, known without reading the cells: a plan naming no victim,
    with no physical limit and its target within the spec's bounds, is accepted as it stands
    (``plan_check.accepted_as_is``), and a target equal to the live count creates nothing
    and removes nothing. Most non-repeated decisions of a replay keep the count
    (tests/unit/test_sim_actuator_fast_path.py compares this with ``actions``)."""
    target = decision.desired_replicas
    return (
        target == live
        and not decision.victims
        and physical_gpus is None
        and config.min_replicas <= target <= max(config.max_replicas, config.min_replicas)
    )


def _facts(cells: Sequence[SimCell]) -> list[CellFact]:
    """The plan check's view of the simulated cells (a pod placed on a cell runs on it)."""
    return [CellFact(c.name, live=c.state in LIVE, runs_pods=bool(c.pods)) for c in cells]
