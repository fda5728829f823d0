"""The fidelity measures on hand-made step functions (simulations.simulator.fidelity)."""

from __future__ import annotations

import math

import pytest

from simulations.simulator.fidelity import (
    MAX_CELL_HOURS_ERROR,
    MIN_WITHIN_FRACTION,
    cell_hours,
    compare,
    criterion,
    normalise,
    value_at,
)


def test_identical_timelines_agree_everywhere() -> None:
    line = [(0.0, 0.0), (10.0, 3.0), (50.0, 1.0)]
    got = compare(line, line, 0.0, 100.0)
    assert got.within_fraction == 1.0 and got.max_gap_cells == 0.0
    assert got.cell_hours_a == got.cell_hours_b == pytest.approx((40 * 3 + 50 * 1) / 3600)
    assert got.cell_hours_ratio == 1.0 and got.passes()


def test_share_of_time_outside_the_tolerance() -> None:
    twin = [(0.0, 0.0), (10.0, 5.0)]
    sim = [(0.0, 0.0), (10.0, 3.0), (30.0, 5.0)]  # 2 cells apart during [10, 30)
    got = compare(twin, sim, 0.0, 100.0)
    assert got.within_fraction == pytest.approx(0.8)
    assert got.max_gap_cells == 2.0
    assert not got.passes()
    assert compare(twin, sim, 0.0, 100.0, tolerance=2.0).within_fraction == 1.0


def test_one_cell_apart_is_within_tolerance_but_costs() -> None:
    got = compare([(0.0, 11.0)], [(0.0, 10.0)], 0.0, 3600.0)
    assert got.within_fraction == 1.0
    assert got.cell_hours_ratio == pytest.approx(1.1)
    assert not got.passes()  # 10 % more cell-hours


def test_horizon_clips_and_zero_before_first_point() -> None:
    line = [(5.0, 2.0), (15.0, 4.0)]
    assert value_at(line, 4.9) == 0.0 and value_at(line, 5.0) == 2.0 and value_at(line, 99) == 4.0
    assert cell_hours(line, 10.0, 20.0) == pytest.approx((5 * 2 + 5 * 4) / 3600)


def test_normalise_sorts_keeps_last_at_an_instant_and_drops_repeats() -> None:
    assert normalise([(2.0, 1.0), (1.0, 1.0), (1.0, 3.0), (3.0, 3.0)]) == [
        (1.0, 3.0),
        (2.0, 1.0),
        (3.0, 3.0),
    ]


def test_empty_reference_and_empty_horizon() -> None:
    got = compare([(0.0, 1.0)], [], 0.0, 10.0)
    assert math.isnan(got.cell_hours_ratio) and got.within_fraction == 1.0
    with pytest.raises(ValueError):
        compare([], [], 5.0, 5.0)


def test_the_acceptance_is_98_percent_within_one_cell_and_cell_hours_within_2_percent() -> None:
    """Issue 13's bar: 97 % of the time within +/-1 cell fails, 98.5 % passes; cell-hours
    2.5 % apart fail, 1 % pass (the earlier 95 % / 5 % bar passed all four)."""
    assert (MIN_WITHIN_FRACTION, MAX_CELL_HOURS_ERROR) == (0.98, 0.02)
    assert criterion() == ">= 98 % within +/-1 cell and cell-hours within 2 %"
    sim = [(0.0, 100.0)]
    apart = [(0.0, 100.0), (985.0, 102.0)]  # 2 cells apart for the last 15 of 1,000 s
    assert compare(apart, sim, 0.0, 1000.0).passes()  # 98.5 %, cell-hours 1.0003
    assert not compare([(0.0, 100.0), (970.0, 102.0)], sim, 0.0, 1000.0).passes()  # 97 %
    assert compare([(0.0, 101.0)], sim, 0.0, 1000.0).passes()  # always within, 1.01
    assert not compare([(0.0, 41.0)], [(0.0, 40.0)], 0.0, 1000.0).passes()  # within, 1.025
