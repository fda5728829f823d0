"""Forecast methods, HPA-style windows and rate policies, and the scale-down re-pack helpers."""

from __future__ import annotations

import pytest

from autoscaler.policy.forecast import HOLT, THEIL_SEN, forecast_demand
from autoscaler.policy.limits import (
    add_sample,
    rate_allowance,
    stabilised_down,
    stabilised_up,
    trim,
)
from autoscaler.policy.policy_config import RatePolicy, RatePolicyType, ScalingRules
from autoscaler.policy.scale_down import VictimLimits, choose_victims, drain_order, pods_to_move
from autoscaler.policy.types import CellShape, CellState, CellView, GPUAsk, GPUUsage

RAMP = [(60.0 * k, 1.0 + k) for k in range(10)]  # +1 cell a minute, last at t=540 -> 10


@pytest.mark.parametrize("method", [THEIL_SEN, HOLT])
def test_too_little_history_gives_no_forecast(method: str) -> None:
    assert forecast_demand(RAMP[:2], 540.0, 300.0, method=method) is None
    assert forecast_demand(RAMP, 10_000.0, 300.0, 1800.0, method) is None  # all too old
    assert forecast_demand([(5.0, 1.0)] * 4, 5.0, 300.0, method=method) is None  # no time span


def test_theil_sen_extrapolates_a_ramp_and_ignores_a_spike() -> None:
    assert forecast_demand(RAMP, 540.0, 300.0) == pytest.approx(15.0)
    flat = [(60.0 * k, 3.0) for k in range(9)] + [(540.0, 20.0)]
    assert forecast_demand(flat, 540.0, 300.0) == pytest.approx(3.0)


def test_holt_follows_trend_and_level() -> None:
    rising = forecast_demand(RAMP, 540.0, 300.0, method=HOLT)
    assert rising is not None and 10.0 < rising <= 16.0
    steady = forecast_demand([(60.0 * k, 4.0) for k in range(6)], 300.0, 300.0, method=HOLT)
    assert steady == pytest.approx(4.0)


@pytest.mark.parametrize("method", [THEIL_SEN, HOLT])
def test_forecast_is_never_negative(method: str) -> None:
    falling = [(60.0 * k, 10.0 - 2 * k) for k in range(6)]
    assert forecast_demand(falling, 300.0, 600.0, method=method) == 0.0


def test_windows_take_lowest_up_and_highest_down() -> None:
    recs = ((100.0, 5), (150.0, 2), (190.0, 7))
    assert stabilised_up(recs, 200.0, ScalingRules(60.0), 6) == 2
    assert stabilised_up(recs, 200.0, ScalingRules(0.0), 6) == 6
    assert stabilised_down(recs, 200.0, ScalingRules(60.0), 1) == 7
    assert stabilised_down(recs, 200.0, ScalingRules(5.0), 1) == 1
    assert trim(recs, 200.0, 60.0) == ((150.0, 2), (190.0, 7))
    assert trim(recs, 200.0, 600.0, limit=1) == ((190.0, 7),)


def test_rate_allowance() -> None:
    cells = RatePolicy(RatePolicyType.CELLS, 4, 60.0)
    pct = RatePolicy(RatePolicyType.PERCENT, 100, 60.0)
    events = ((170.0, 3), (100.0, 5), (175.0, -1))
    assert rate_allowance(ScalingRules(0.0), events, 200.0, 6, +1) is None
    assert rate_allowance(ScalingRules(0.0, (cells,)), events, 200.0, 6, +1) == 1
    # 6 cells now, 3 added in the period: started at 3, 100 % of 3 = 3, all used
    assert rate_allowance(ScalingRules(0.0, (pct,)), events, 200.0, 6, +1) == 0
    assert rate_allowance(ScalingRules(0.0, (cells, pct)), events, 200.0, 6, +1) == 1
    assert rate_allowance(ScalingRules(0.0, (cells, pct), "Min"), events, 200.0, 6, +1) == 0
    assert rate_allowance(ScalingRules(0.0, (cells,), "Disabled"), (), 200.0, 6, +1) == 0
    assert rate_allowance(ScalingRules(0.0, (cells,)), events, 200.0, 6, -1) == 3


SHAPE = CellShape(gpus=1, memory_mib=1000, cores_percent=100, slots=4)


def cell(name: str, index: int, usage: GPUUsage, pods: int, **kw: object) -> CellView:
    return CellView(name, index, CellState.READY, 0.0, gpus=(usage,), pods=pods, **kw)  # type: ignore[arg-type]


def test_pods_to_move_blocks_and_exact_asks() -> None:
    blocks = pods_to_move(cell("a", 0, GPUUsage(300, 20, 3), 3), (GPUUsage(300, 20, 3),))
    assert len(blocks) == 1
    assert blocks[0].asks()[0] == GPUAsk(1, 300, None, 20)
    assert len(blocks[0].asks()) == 3  # one slot per pod that was on the GPU
    exact = cell("b", 1, GPUUsage(300, 0, 2), 2, pod_asks=((GPUAsk(1, 100),), (GPUAsk(1, 200),)))
    moved = pods_to_move(exact, exact.gpus)
    assert [p.asks() for p in moved] == [(GPUAsk(1, 100),), (GPUAsk(1, 200),)]


def test_choose_victims_pins_receivers_and_respects_limits() -> None:
    a = cell("a", 0, GPUUsage(400, 0, 1), 1)
    b = cell("b", 1, GPUUsage(400, 0, 1), 1)
    c = cell("c", 2, GPUUsage(0, 0, 0), 0)
    usage = {x.name: x.gpus for x in (a, b, c)}
    order = drain_order([a, b, c], {"a": 0.4, "b": 0.4, "c": 0.0})
    assert [x.name for x in order] == ["c", "b", "a"]
    choice = choose_victims(order, [a, b, c], usage, SHAPE, VictimLimits(3, 3, 1))
    # c is empty; b's pod moves to a (c is already a victim), which pins a
    assert choice.victims == ("c", "b")
    assert choose_victims(order, [a, b, c], usage, SHAPE, VictimLimits(3, 3, 0)).victims == ("b",)
    assert choose_victims(order, [a, b, c], usage, SHAPE, VictimLimits(1, 3, 1)).victims == ("c",)
    # the disruption budget binds cells with pods only
    no_budget = choose_victims(order, [a, b, c], usage, SHAPE, VictimLimits(3, 0, 1))
    assert (no_budget.victims, no_budget.over_budget) == (("c",), False)
    spent = choose_victims([a, b], [a, b, c], usage, SHAPE, VictimLimits(3, 0, 1))
    assert (spent.victims, spent.over_budget) == ((), True)
    full = cell("f", 3, GPUUsage(1000, 0, 1), 1)
    lonely = choose_victims(
        [a], [a, full], {"a": a.gpus, "f": full.gpus}, SHAPE, VictimLimits(1, 1, 1)
    )
    assert (lonely.victims, lonely.blocked) == ((), ("a",))


def test_add_sample_buckets_keep_the_peak_and_span_the_window() -> None:
    samples: tuple[tuple[float, float], ...] = ()
    for k in range(2000):  # 1 call per second for 2000 s, window 1200 s -> 10 s buckets
        samples = add_sample(samples, float(k), float(k % 7), 1200.0)
    assert 110 <= len(samples) <= 121
    assert samples[0][0] >= 2000 - 1 - 1200
    assert all(v == 6.0 for _, v in samples[:-1])  # every full bucket saw a 6
