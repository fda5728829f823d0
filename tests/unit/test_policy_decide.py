"""decide: one scenario per Reason code, memory updates, Shadow mode."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.policy_config import (
    Mode,
    PolicyConfig,
    RatePolicy,
    RatePolicyType,
    ScalingRules,
)
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    MetricsHealth,
    NodeTemplate,
    Observation,
    PendingPod,
    PlacementConstraints,
    PolicyMemory,
)

SHAPE = CellShape(gpus=1, memory_mib=24000, cores_percent=100, slots=10)
CONFIG = PolicyConfig(
    min_replicas=0,
    max_replicas=10,
    shape=SHAPE,
    node_template=NodeTemplate(labels={"gpu": "on"}),
    max_cells_in_flight=5,
    boot_hedge_fraction=0.0,  # exact needs here; spare boots: test_policy_hedge.py
)
NOW = 10_000.0


def pods(n: int, memory_mib: int = 12000) -> tuple[PendingPod, ...]:
    return tuple(PendingPod(f"ns/p{i}", GPUAsk(1, memory_mib), NOW - 5) for i in range(n))


def ready(name: str, index: int, memory_mib: int = 0, pods: int = 0) -> CellView:
    usage = GPUUsage(memory_mib, 0, pods)
    return CellView(name, index, CellState.READY, 0.0, gpus=(usage,), pods=pods, ready_at=0.0)


def booting(name: str, index: int) -> CellView:
    return CellView(name, index, CellState.BOOTING, NOW - 60)


def run(
    pending: tuple[PendingPod, ...] = (),
    cells: tuple[CellView, ...] = (),
    memory: PolicyMemory | None = None,
    config: PolicyConfig = CONFIG,
    **obs: object,
) -> Decision:
    observation = Observation(pending, cells, **obs)  # type: ignore[arg-type]
    return decide(observation, memory or PolicyMemory(), config, NOW)


IDLE_A = PolicyMemory(idle_since={"a": 0.0})
BUSY_B = ready("b", 1, 21600, 3)  # 90 % memory


def test_scaled_up_at_once_by_the_packed_backlog() -> None:
    d = run(pods(5))  # 2 per cell -> 3 cells, not 1 per decision and not 5
    assert (d.reason, d.desired_replicas, d.cells_needed, d.pending_asks) == (
        Reason.SCALED_UP,
        3,
        3,
        5,
    )
    assert d.memory.last_scale_up_at == NOW
    assert d.memory.scale_events == ((NOW, 3),)
    assert "5 pending" in d.message and "0 -> 3" in d.message


def test_pending_pods_fill_ready_then_booting_capacity_first() -> None:
    cells = (ready("a", 0, 12000, 1), booting("b", 1))
    d = run(pods(5), cells)  # 1 fits a, 2 fit b, 2 need one new cell
    assert (d.reason, d.desired_replicas, d.cells_needed) == (Reason.SCALED_UP, 3, 1)


def test_scaled_down_idle_cell_after_window() -> None:
    d = run(cells=(ready("a", 0), BUSY_B), memory=IDLE_A)
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.SCALED_DOWN, 1, ("a",))
    assert d.memory.last_scale_down_at == NOW
    assert d.memory.scale_events == ((NOW, -1),)


def test_spares_cancelled_with_the_hedge_is_not_a_scale_down() -> None:
    # hedged boots (test_policy_hedge.py): nothing waits for the two empty boots any more
    hedged = replace(CONFIG, boot_hedge_fraction=0.75)
    cells = (BUSY_B, booting("c", 2), booting("d", 3))
    d = run(cells=cells, memory=PolicyMemory(boots_proven=True), config=hedged)
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.SPARES_CANCELLED, 1, ("d", "c"))
    assert d.memory.last_scale_down_at is None
    assert d.memory.scale_events == ((NOW, -2),)


def test_scale_down_repacks_a_lightly_used_cell() -> None:
    cells = (ready("a", 0, 4800, 1), ready("b", 1, 12000, 2))  # 20 % and 50 %
    d = run(cells=cells, memory=PolicyMemory(idle_since={"a": 0.0, "b": 0.0}))
    assert (d.reason, d.victims) == (Reason.SCALED_DOWN, ("a",))
    assert d.empty_victims == ()  # a drain re-homes its pods: not a bet the pod voids


def test_victims_cheapest_first_and_budget_bounds_busy_ones() -> None:
    cells = (ready("a", 0, 2400, 1), ready("c", 2), ready("d", 3), ready("e", 4, 19200, 2))
    mem = PolicyMemory(idle_since={"a": 0.0, "c": 0.0, "d": 0.0})
    d = run(cells=cells, memory=mem)
    # empty cells first, newest (highest index) first; then a, whose pod re-packs onto e
    assert d.victims == ("d", "c", "a")
    assert d.empty_victims == ("d", "c")  # kept by the provisioner if a pod lands on them
    assert d.desired_replicas == 1
    busy_drain = CellView("z", 9, CellState.DRAINING, 0.0, gpus=(GPUUsage(1, 0, 1),), pods=1)
    d = run(cells=(*cells, busy_drain), memory=mem)
    assert d.victims == ("d", "c")  # the budget (1) is spent by z: a waits


def test_no_idle_cell_when_pods_cannot_be_repacked() -> None:
    cells = (ready("a", 0, 9600, 1), BUSY_B)  # a at 40 %; its 9600 MiB fit nowhere else
    d = run(cells=cells, memory=IDLE_A)
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.NO_IDLE_CELL, 2, ())


def test_no_idle_cell_when_every_cell_is_busy() -> None:
    d = run(cells=(BUSY_B,))
    assert (d.reason, d.desired_replicas) == (Reason.NO_IDLE_CELL, 1)


def test_prewarmed_from_a_rising_forecast() -> None:
    cells = tuple(ready(f"c{i}", i, 21600, 3) for i in range(5))
    samples = tuple((NOW - 60.0 * k, 5.0 - k) for k in range(4, 0, -1))  # 1, 2, 3, 4 cells
    cfg = replace(CONFIG, prewarm=True, boot_seconds=300.0)
    d = run(cells=cells, memory=PolicyMemory(demand_samples=samples), config=cfg)
    assert d.reason == Reason.PREWARMED
    assert d.forecast_cells == pytest.approx(10.0)
    assert d.desired_replicas == 10
    without = run(cells=cells, memory=PolicyMemory(demand_samples=samples))
    assert without.desired_replicas == 5
    assert without.forecast_cells is None


def test_prewarm_forecast_keeps_idle_cells_but_never_removes() -> None:
    cells = (ready("a", 0), BUSY_B)
    # a steady 2 cells, then one quiet sample: Theil-Sen keeps the level at 2
    samples = tuple((NOW - 60.0 * k, 2.0) for k in range(5, 0, -1))
    cfg = replace(CONFIG, prewarm=True)
    d = run(cells=cells, memory=replace(IDLE_A, demand_samples=samples), config=cfg)
    assert (d.reason, d.desired_replicas) == (Reason.PREWARMED, 2)


def test_headroom_adds_an_empty_cell_and_keeps_it() -> None:
    cfg = replace(CONFIG, headroom_cells=1)
    d = run(cells=(BUSY_B,), config=cfg)
    assert (d.reason, d.desired_replicas) == (Reason.HEADROOM, 2)
    kept = run(cells=(ready("a", 0), BUSY_B), memory=IDLE_A, config=cfg)
    assert (kept.reason, kept.desired_replicas) == (Reason.HEADROOM, 2)


def test_stabilizing_up_window_takes_the_lowest_recommendation() -> None:
    cfg = replace(CONFIG, scale_up=ScalingRules(60.0))
    mem = PolicyMemory(recommendations=((NOW - 30, 0),))
    d = run(pods(2), memory=mem, config=cfg)
    assert (d.reason, d.desired_replicas) == (Reason.STABILIZING, 0)
    later = run(pods(2), memory=PolicyMemory(recommendations=((NOW - 90, 0),)), config=cfg)
    assert later.desired_replicas == 1


def test_stabilizing_down_window_and_idle_time() -> None:
    mem = replace(IDLE_A, recommendations=((NOW - 100, 2),))
    d = run(cells=(ready("a", 0), BUSY_B), memory=mem)
    assert (d.reason, d.desired_replicas) == (Reason.STABILIZING, 2)
    recent = PolicyMemory(idle_since={"a": NOW - 100})
    d = run(cells=(ready("a", 0), BUSY_B), memory=recent)
    assert (d.reason, d.desired_replicas) == (Reason.STABILIZING, 2)
    assert d.memory.idle_since == {"a": NOW - 100}


def test_rate_limited_scale_up_and_down() -> None:
    up = ScalingRules(0.0, (RatePolicy(RatePolicyType.CELLS, 1, 60.0),))
    d = run(pods(6), config=replace(CONFIG, scale_up=up))
    assert (d.reason, d.desired_replicas) == (Reason.RATE_LIMITED, 1)
    down = ScalingRules(600.0, (RatePolicy(RatePolicyType.PERCENT, 50, 600.0),))
    mem = replace(IDLE_A, scale_events=((NOW - 10, -1),))
    d = run(cells=(ready("a", 0), BUSY_B), memory=mem, config=replace(CONFIG, scale_down=down))
    # 50 % of the 3 cells at the period's start rounds up to 2, one already removed -> 1 left
    assert d.reason == Reason.SCALED_DOWN
    mem = replace(IDLE_A, scale_events=((NOW - 10, -2),))
    d = run(cells=(ready("a", 0), BUSY_B), memory=mem, config=replace(CONFIG, scale_down=down))
    assert (d.reason, d.desired_replicas) == (Reason.RATE_LIMITED, 2)


def test_at_max_replicas() -> None:
    d = run(pods(10), config=replace(CONFIG, max_replicas=2))
    assert (d.reason, d.desired_replicas, d.cells_needed) == (Reason.AT_MAX_REPLICAS, 2, 5)


def test_at_min_replicas() -> None:
    d = run(cells=(ready("a", 0),), memory=IDLE_A, config=replace(CONFIG, min_replicas=1))
    assert (d.reason, d.desired_replicas) == (Reason.AT_MIN_REPLICAS, 1)


def test_below_min_replicas_is_raised_even_past_in_flight() -> None:
    d = run(config=replace(CONFIG, min_replicas=3, max_cells_in_flight=1))
    assert (d.reason, d.desired_replicas) == (Reason.BELOW_MIN_REPLICAS, 3)


def test_in_flight_limit_counts_booting_cells() -> None:
    cells = (booting("x", 0), booting("y", 1))
    d = run(pods(10), cells, config=replace(CONFIG, max_cells_in_flight=2))
    assert (d.reason, d.desired_replicas, d.cells_needed) == (Reason.IN_FLIGHT_LIMIT, 2, 3)
    assert "2 booting of 2" in d.message


def test_insufficient_physical_gpu() -> None:
    d = run(pods(6), free_physical_gpus=1)
    assert (d.reason, d.desired_replicas) == (Reason.INSUFFICIENT_PHYSICAL_GPU, 1)
    d = run(pods(6), free_physical_gpus=0)
    assert (d.reason, d.desired_replicas) == (Reason.INSUFFICIENT_PHYSICAL_GPU, 0)


def test_demand_unsatisfiable_pods_never_count_nor_block_scale_down() -> None:
    wrong = PendingPod("ns/w", GPUAsk(1, 1000), NOW, PlacementConstraints({"gpu": "off"}))
    too_big = PendingPod("ns/b", GPUAsk(2, 1000), NOW)
    d = run((wrong, too_big))
    assert (d.reason, d.desired_replicas, d.pending_asks) == (Reason.DEMAND_UNSATISFIABLE, 0, 0)
    assert {u.reason for u in d.unschedulable} == {"NodeSelectorMismatch", "NodeInsufficientDevice"}
    d = run((wrong,), cells=(ready("a", 0), BUSY_B), memory=IDLE_A)
    assert (d.reason, d.victims) == (Reason.SCALED_DOWN, ("a",))


def test_demand_satisfied_by_booting_capacity() -> None:
    d = run(pods(2), cells=(booting("x", 0),))
    assert (d.reason, d.desired_replicas, d.cells_needed) == (Reason.DEMAND_SATISFIED, 1, 0)


def test_metrics_stale_freezes_scale_down_but_not_scale_up() -> None:
    stale = MetricsHealth(fresh=False, age_seconds=900, detail="no samples for 900s")
    d = run(cells=(ready("a", 0), BUSY_B), memory=IDLE_A, metrics=stale)
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.METRICS_STALE, 2, ())
    assert d.memory.idle_since == {}  # the idle window restarts once metrics are back
    up = run(pods(2), cells=(BUSY_B,), metrics=stale)
    assert (up.reason, up.desired_replicas) == (Reason.SCALED_UP, 2)


def test_scale_down_disabled() -> None:
    cfg = replace(CONFIG, scale_down_enabled=False)
    d = run(cells=(ready("a", 0), BUSY_B), memory=IDLE_A, config=cfg)
    assert (d.reason, d.desired_replicas) == (Reason.SCALE_DOWN_DISABLED, 2)


def test_scale_down_delayed_after_scale_up() -> None:
    mem = replace(IDLE_A, last_scale_up_at=NOW - 100)
    d = run(cells=(ready("a", 0), BUSY_B), memory=mem)
    assert (d.reason, d.desired_replicas) == (Reason.SCALE_DOWN_DELAYED, 2)


def test_disruption_budget_counts_draining_cells_with_pods() -> None:
    busy_drain = CellView("z", 5, CellState.DRAINING, 0.0, gpus=(GPUUsage(100, 0, 1),), pods=1)
    light = ready("a", 0, 2400, 1)  # 10 %: would go, but its eviction needs budget
    roomy = ready("c", 2, 4800, 1)
    mem = PolicyMemory(idle_since={"a": 0.0, "c": 0.0})
    d = run(cells=(light, roomy, BUSY_B, busy_drain), memory=mem)
    assert (d.reason, d.desired_replicas) == (Reason.DISRUPTION_BUDGET, 3)
    # an empty cell disrupts nothing: it goes even while the budget is spent
    empty = ready("e", 3)
    mem = PolicyMemory(idle_since={"a": 0.0, "c": 0.0, "e": 0.0})
    d = run(cells=(light, roomy, BUSY_B, empty, busy_drain), memory=mem)
    assert (d.reason, d.victims) == (Reason.SCALED_DOWN, ("e",))
    # a Draining cell with nothing left on it does not spend the budget
    done = CellView("y", 6, CellState.DRAINING, 0.0)
    d = run(cells=(light, roomy, BUSY_B, done), memory=PolicyMemory(idle_since={"a": 0.0}))
    assert (d.reason, d.victims) == (Reason.SCALED_DOWN, ("a",))


def test_workload_cluster_unreachable_holds() -> None:
    d = run(pods(4), cells=(ready("a", 0), BUSY_B), memory=IDLE_A, workload_cluster_reachable=False)
    assert (d.reason, d.desired_replicas, d.victims) == (
        Reason.WORKLOAD_CLUSTER_UNREACHABLE,
        2,
        (),
    )
    floor = run(config=replace(CONFIG, min_replicas=1), workload_cluster_reachable=False)
    assert (floor.reason, floor.desired_replicas) == (Reason.BELOW_MIN_REPLICAS, 1)


def test_idle() -> None:
    d = run()
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.IDLE, 0, ())
    assert d.act


def test_shadow_mode_same_decision_not_acted() -> None:
    active = run(pods(5))
    shadow = run(pods(5), config=replace(CONFIG, mode=Mode.SHADOW))
    assert shadow.act is False
    assert replace(shadow, act=True) == active


def test_every_reason_is_covered_by_this_file() -> None:
    source = Path(__file__).read_text()
    missing = [r.name for r in Reason if f"Reason.{r.name}" not in source.replace("r.name", "")]
    assert missing == []


def test_memory_is_trimmed_and_bounded() -> None:
    old = tuple((NOW - 5000 + k, 1) for k in range(10))
    mem = PolicyMemory(recommendations=old, scale_events=((NOW - 9000, 2),))
    d = run(memory=mem)
    assert d.memory.recommendations == ((NOW, 0),)
    assert d.memory.scale_events == ()


def test_floor_is_not_paced_by_the_up_window() -> None:
    # found by hypothesis: a low recommendation in the up window must not hold a pool below min
    cfg = replace(CONFIG, min_replicas=1, scale_up=ScalingRules(60.0), max_cells_in_flight=0)
    d = run(memory=PolicyMemory(recommendations=((NOW - 1, 0),)), config=cfg)
    assert (d.reason, d.desired_replicas) == (Reason.BELOW_MIN_REPLICAS, 1)


def test_pod_stuck_despite_free_ready_capacity_gets_one_new_cell() -> None:
    old_pod = (PendingPod("ns/old", GPUAsk(1, 12000), NOW - 900),)
    cells = (ready("a", 0, 12000, 1),)  # half free since t=0, yet HAMi did not place the pod
    d = run(old_pod, cells)
    assert (d.reason, d.desired_replicas, d.cells_needed) == (Reason.SCALED_UP, 2, 1)
    assert "1 pending too long" in d.message
    newer = (*cells, replace(ready("n", 1), ready_at=NOW - 60))
    d = run(old_pod, newer)  # a cell that became Ready after the pod arrived still counts
    assert (d.reason, d.desired_replicas) == (Reason.DEMAND_SATISFIED, 2)
    off = run(old_pod, cells, config=replace(CONFIG, stuck_pending_seconds=0.0))
    assert off.reason == Reason.DEMAND_SATISFIED


def test_pods_on_draining_cells_get_capacity_before_eviction() -> None:
    draining = CellView("z", 5, CellState.DRAINING, 0.0, gpus=(GPUUsage(20000, 0, 2),), pods=2)
    assert run(cells=(BUSY_B, draining)).reason == Reason.NO_IDLE_CELL  # WaitForIdle: stay put
    evicting = replace(CONFIG, rehome_draining_pods=True)
    d = run(cells=(BUSY_B, draining), config=evicting)
    assert (d.reason, d.desired_replicas, d.cells_needed, d.pending_asks) == (
        Reason.SCALED_UP,
        2,
        1,
        0,
    )
    assert "re-home" in d.message
    roomy = run(cells=(ready("a", 0, 0, 0), BUSY_B, draining), memory=IDLE_A, config=evicting)
    assert (roomy.desired_replicas, roomy.victims) == (2, ())  # a now hosts them: not removable


def test_cell_shape_unknown_refuses_growth_above_the_floor_only() -> None:
    unknown = replace(CONFIG, shape_known=False)
    d = run(pods(3), config=unknown)  # a brand-new pool at minReplicas 0 (the original's rule)
    assert (d.reason, d.desired_replicas, d.cells_needed) == (Reason.CELL_SHAPE_UNKNOWN, 0, 2)
    assert "no cell shape known" in d.message
    assert d.memory.last_scale_up_at is None and d.memory.scale_events == ()
    floor = run(pods(3), config=replace(unknown, min_replicas=1))  # the floor is still kept
    assert (floor.reason, floor.desired_replicas) == (Reason.BELOW_MIN_REPLICAS, 1)
    known = run(pods(3))
    assert (known.reason, known.desired_replicas) == (Reason.SCALED_UP, 2)
