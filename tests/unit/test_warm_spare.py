"""The warm spare (``autoscaler.policy.warm_spare``) with ``warm_spare_lone_arrivals`` 0 (the
session-17 rule): a pool that grew within the last ``warm_spare_seconds`` keeps
``warm_spare_cells`` empty cells, so the next lone pod finds a Ready cell instead of waiting a
boot; a pool that has been quiet longer keeps none and scales to its floor, as without the
knob. The default rule (lone arrivals in a sharing pool) is in test_warm_spare_lone.py."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.policy import warm_spare
from autoscaler.policy.config import validate_config
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    Observation,
    PendingPod,
    PolicyMemory,
)

NOW = 100_000.0
CONFIG = PolicyConfig(
    max_replicas=50,
    shape=CellShape(gpus=1),
    warm_spare_cells=1,
    warm_spare_seconds=1800.0,
    warm_spare_lone_arrivals=0,
)
GIB = 1024


def _full(i: int) -> CellView:
    gpus = (GPUUsage(24 * GIB, 0, 1),)
    return CellView(f"c{i}", i, CellState.READY, 0.0, gpus=gpus, pods=1, ready_at=0.0)


def _empty(i: int) -> CellView:
    return CellView(f"c{i}", i, CellState.READY, 0.0, ready_at=0.0)


def _grew(seconds_ago: float, **fields: object) -> PolicyMemory:
    return PolicyMemory(last_scale_up_at=NOW - seconds_ago, boots_proven=True, **fields)  # type: ignore[arg-type]


def test_the_spare_is_kept_only_within_its_seconds_of_the_last_scale_up() -> None:
    assert warm_spare.headroom_cells(_grew(1799.0), CONFIG, NOW) == 1
    assert warm_spare.headroom_cells(_grew(1800.0), CONFIG, NOW) == 0
    assert warm_spare.headroom_cells(PolicyMemory(), CONFIG, NOW) == 0  # never grew
    off = replace(CONFIG, warm_spare_cells=0)
    assert warm_spare.headroom_cells(_grew(10.0), off, NOW) == 0
    assert warm_spare.warm_until(_grew(10.0), off) is None
    # headroomCells stays the floor, the warm spare only raises it
    more = replace(CONFIG, headroom_cells=2)
    assert warm_spare.headroom_cells(_grew(10.0), more, NOW) == 2
    assert warm_spare.headroom_cells(_grew(1e6), more, NOW) == 2


def test_a_pod_that_takes_the_spare_starts_its_replacement() -> None:
    """Three full cells, the pool grew 5 minutes ago: one empty cell is started, reason
    Headroom; without the knob the pool holds."""
    obs = Observation((), (_full(0), _full(1), _full(2)))
    d = decide(obs, _grew(300.0), CONFIG, NOW)
    assert (d.reason, d.desired_replicas) == (Reason.HEADROOM, 4)
    assert "warm spare asks 1 (the pool grew within the last 1800s)" in d.message
    off = decide(obs, _grew(300.0), replace(CONFIG, warm_spare_cells=0), NOW)
    assert off.desired_replicas == 3


def test_an_idle_spare_stays_while_warm_and_goes_once_the_pool_is_quiet() -> None:
    """The empty cell has been idle for longer than the scale-down window: while the pool
    grew within the warm seconds it is kept as headroom; after them it is scaled down."""
    obs = Observation((), (_full(0), _empty(1)))
    memory = {"idle_since": {"c1": NOW - 1200.0}, "recommendations": ((NOW - 700.0, 2),)}
    warm = decide(obs, _grew(1000.0, **memory), CONFIG, NOW)
    assert (warm.reason, warm.desired_replicas) == (Reason.HEADROOM, 2)
    assert warm.steady is not None and warm.steady.until == NOW + 800.0  # when it lapses
    quiet = decide(obs, _grew(1900.0, **memory), CONFIG, NOW)
    assert (quiet.desired_replicas, quiet.victims) == (1, ("c1",))


def test_a_quiet_pool_still_scales_to_zero() -> None:
    obs = Observation((), (_empty(0),))
    memory = _grew(4000.0, idle_since={"c0": NOW - 3000.0})
    d = decide(obs, memory, CONFIG, NOW)
    assert (d.desired_replicas, d.victims) == (0, ("c0",))


def test_a_pending_pod_gets_its_cell_and_the_spare_after_it() -> None:
    """A lone pod on a full pool that grew a minute ago: its own cell and the spare start in
    one wave (the spare would otherwise be started only once the pod took a Ready cell)."""
    pod = PendingPod("ns/p", GPUAsk(1, 20 * GIB, 0), NOW - 5.0)
    d = decide(Observation((pod,), (_full(0),)), _grew(60.0), CONFIG, NOW)
    assert (d.reason, d.desired_replicas, d.cells_needed) == (Reason.SCALED_UP, 3, 1)


def test_negative_knobs_are_refused() -> None:
    bad = replace(CONFIG, warm_spare_cells=-1, warm_spare_seconds=-5.0, warm_spare_lone_arrivals=-1)
    errors = validate_config(bad)
    assert "warm_spare_cells must be >= 0" in errors
    assert "warm_spare_seconds must be >= 0" in errors
    assert "warm_spare_lone_arrivals must be >= 0" in errors
