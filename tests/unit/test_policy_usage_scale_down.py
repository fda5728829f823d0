"""scaleDownOn: Usage in the pure policy: an allocated but measured-idle cell is drained.

An idle cell (``Observation.idle_cells``) is a scale-down candidate whatever its allocation,
needs no re-pack of its idle pods, still waits out the stabilisation window and still spends
the disruption budget; with Allocation mode (or stale metrics) the same cell stays.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUUsage,
    MetricsHealth,
    Observation,
    PolicyMemory,
)

SHAPE = CellShape(gpus=1, memory_mib=24000, cores_percent=100, slots=10)
ALLOCATION = PolicyConfig(min_replicas=0, max_replicas=10, shape=SHAPE)
USAGE = replace(ALLOCATION, scale_down_on_usage=True)
NOW = 10_000.0


def full(name: str, index: int) -> CellView:
    """A cell 90 % allocated: never a candidate by allocation, and its pods fit nowhere."""
    usage = GPUUsage(21600, 90, 3)
    return CellView(name, index, CellState.READY, 0.0, gpus=(usage,), pods=3, ready_at=0.0)


def run(
    config: PolicyConfig,
    cells: tuple[CellView, ...],
    idle: frozenset[str],
    memory: PolicyMemory | None = None,
    fresh: bool = True,
) -> Decision:
    health = MetricsHealth(fresh, 0.0, "ok" if fresh else "stale")
    obs = Observation((), cells, metrics=health, idle_cells=idle)
    return decide(obs, memory or PolicyMemory(), config, NOW)


CELLS = (full("a", 0), full("b", 1))
WAITED = PolicyMemory(idle_since={"a": 0.0})


def test_usage_mode_drains_an_allocated_idle_cell_after_the_window() -> None:
    d = run(USAGE, CELLS, frozenset({"a"}), WAITED)
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.SCALED_DOWN, 1, ("a",))


def test_allocation_mode_keeps_the_same_cell() -> None:
    d = run(ALLOCATION, CELLS, frozenset({"a"}), WAITED)
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.NO_IDLE_CELL, 2, ())


def test_usage_idle_cell_still_waits_the_stabilisation_window() -> None:
    d = run(USAGE, CELLS, frozenset({"a"}))
    assert (d.reason, d.desired_replicas) == (Reason.STABILIZING, 2)
    assert d.memory.idle_since == {"a": NOW}  # the window starts now


def test_stale_metrics_freeze_usage_scale_down() -> None:
    d = run(USAGE, CELLS, frozenset({"a"}), WAITED, fresh=False)
    assert (d.reason, d.desired_replicas) == (Reason.METRICS_STALE, 2)


def test_idle_cells_spend_the_disruption_budget() -> None:
    both = PolicyMemory(idle_since={"a": 0.0, "b": 0.0})
    d = run(USAGE, CELLS, frozenset({"a", "b"}), both)
    assert d.victims == ("b",)  # budget 1: one busy cell at a time (newest first)
    two = replace(USAGE, disruption_budget=2)
    assert set(run(two, CELLS, frozenset({"a", "b"}), both).victims) == {"a", "b"}
    draining = CellView("z", 9, CellState.DRAINING, 0.0, gpus=(GPUUsage(1, 0, 1),), pods=1)
    d = run(USAGE, (*CELLS, draining), frozenset({"a", "b"}), both)
    assert (d.reason, d.victims) == (Reason.DISRUPTION_BUDGET, ())


def test_idle_pods_of_a_draining_cell_need_no_new_home() -> None:
    evict = replace(USAGE, rehome_draining_pods=True)
    draining = replace(full("a", 0), state=CellState.DRAINING)
    cells = (draining, full("b", 1))
    assert run(evict, cells, frozenset({"a"})).desired_replicas == 1  # no new cell for them
    assert run(evict, cells, frozenset()).reason is Reason.SCALED_UP  # busy pods are re-homed


@given(st.sets(st.sampled_from(["a", "b", "c"])), st.booleans())
def test_only_idle_or_allocation_candidates_become_victims(idle: set[str], usage: bool) -> None:
    cells = (full("a", 0), full("b", 1), full("c", 2))
    memory = PolicyMemory(idle_since={"a": 0.0, "b": 0.0, "c": 0.0})
    config = replace(USAGE if usage else ALLOCATION, disruption_budget=3)
    d = run(config, cells, frozenset(idle), memory)
    assert set(d.victims) <= (idle if usage else set())
