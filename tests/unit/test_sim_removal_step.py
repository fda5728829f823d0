"""Removals one after another (``SimConfig.removal_step_seconds``): the twin's KubeSwift
releases a deleted guest's GPU under one ledger lock, so a plan's cancels and retirements leave
one after another, and a second plan's removals wait behind the first's. At 0 every removal
ends at its own time, as before."""

from __future__ import annotations

import pytest

from simulations.simulator.engine import SimConfig, simulate
from simulations.simulator.traces import TracePod
from tests.unit.test_sim_engine import WHOLE, Scripted
from tests.unit.test_sim_exec_lag import lagged

PODS = (TracePod("p", 0.0, 2000.0, WHOLE),)  # keeps cell-0 busy and the run going


def drops(cells: tuple[tuple[float, int], ...], after: float) -> list[tuple[float, int]]:
    """Each time the cell count fell after ``after``, with the count it fell to."""
    out, last = [], None
    for time, count in cells:
        if last is not None and count < last and time > after:
            out.append((time, count))
        last = count
    return out


def retire(
    steps: list[tuple[float, int, tuple[str, ...]]], **config: object
) -> list[tuple[float, int]]:
    result = simulate(PODS, Scripted(steps), lagged(0.0, drain_seconds=5.0, **config))
    return drops(result.cells, 100.0)


def test_a_batch_of_retirements_leaves_one_cell_per_step() -> None:
    steps = [(0.0, 5, ()), (400.0, 1, ("cell-1", "cell-2", "cell-3", "cell-4"))]
    assert retire(steps) == [(405.0, 1)]  # all four at the drain's end
    assert retire(steps, removal_step_seconds=2.0) == [
        (405.0, 4),
        (407.0, 3),
        (409.0, 2),
        (411.0, 1),
    ]


def test_a_second_plan_waits_behind_the_first() -> None:
    steps = [
        (0.0, 5, ()),
        (400.0, 3, ("cell-1", "cell-2")),
        (410.0, 1, ("cell-1", "cell-2", "cell-3", "cell-4")),
    ]
    # the second plan's cells are due at 415; the first's left at 405 and 413 (step 8)
    assert retire(steps, removal_step_seconds=8.0) == [
        (405.0, 4),
        (413.0, 3),
        (421.0, 2),
        (429.0, 1),
    ]
    # a step shorter than the gap between the plans leaves the second one untouched
    assert retire(steps, removal_step_seconds=1.0) == [
        (405.0, 4),
        (406.0, 3),
        (415.0, 2),
        (416.0, 1),
    ]


def test_cancelled_boots_queue_even_when_a_cancel_is_immediate() -> None:
    steps = [(0.0, 1, ()), (100.0, 4, ()), (120.0, 1, ("cell-1", "cell-2", "cell-3"))]
    for step, left in ((0.0, [(120.0, 1)]), (3.0, [(120.0, 3), (123.0, 2), (126.0, 1)])):
        result = simulate(PODS, Scripted(steps), lagged(0.0, removal_step_seconds=step))
        assert drops(result.cells, 110.0) == left  # still booting at 120 (boots take 50 s)


def test_a_negative_step_is_refused() -> None:
    with pytest.raises(ValueError, match="removal_step_seconds"):
        SimConfig(removal_step_seconds=-0.5)
