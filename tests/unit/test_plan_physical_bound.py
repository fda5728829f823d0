"""The plan's physical bound: the live loop hands ``decide`` the free physical GPUs (issue 13).

What these prove: the free count comes from the provisioner's ledger reading in the cached pool
status (``physicalCapacity.freeGPUsInCluster``), less the GPUs of this pool's cells that have
not taken theirs yet (pre-GPU rows) and of cells asked for but not created (placeholders), in
GPUs per cell; unknown stays unknown (no bound). The live loop's decision is bounded by it with
the reason ``InsufficientPhysicalGPU`` (before, the loop passed None and only the provisioner
applied the bound), and a pool held by that bound decides again as soon as the provisioner
publishes more free GPUs, not at the next resync.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from autoscaler.loop import Autoscaler, LoopSettings
from autoscaler.observe import free_gpus_for_new_cells, plan_feedback, with_requested
from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.types import CellState, CellView, PolicyMemory
from gpucellpool.api.pool import GPUCellPool
from tests.unit.test_loop_fakes import (
    FakeWorkload,
    FakeWriter,
    VirtualClock,
    pending_pod,
    pool_manifest,
    with_cells,
)

JSON = dict[str, Any]
A = ("ns", "a")
SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0, resync_s=3600.0)


def with_free(raw: JSON, free: int | None) -> JSON:
    status = dict(raw.get("status") or {})
    status["physicalCapacity"] = {"gpus": 0, "freeGPUsInCluster": free}
    return {**raw, "status": status}


ROWS = [
    {"name": "a-0", "index": 0, "phase": "Ready"},
    {"name": "a-1", "index": 1, "phase": "Pending"},  # no GPU taken yet
    {"name": "a-2", "index": 2, "phase": "AllocatingGPU"},  # no GPU taken yet
    {"name": "a-3", "index": 3, "phase": "Booting"},  # holds its GPU: not in the free count
]


def _cells(pool: GPUCellPool) -> tuple[CellView, ...]:
    return tuple(CellView(r.name, r.index, CellState.BOOTING, 0.0) for r in pool.status.cells or [])


@pytest.mark.parametrize(
    ("free", "gpus_per_cell", "requested", "expected"),
    [
        (None, 1, 4, None),  # unknown ledger: no bound
        (10, 1, 4, 8),  # two pre-GPU rows
        (10, 2, 4, 6),  # ... of two GPUs each
        (10, 1, 6, 6),  # and two placeholders asked for but not created
        (3, 2, 4, 0),  # never negative
    ],
)
def test_free_gpus_for_new_cells(
    free: int | None, gpus_per_cell: int, requested: int, expected: int | None
) -> None:
    pool = GPUCellPool.model_validate(with_free(with_cells(pool_manifest("a"), ROWS), free))
    cells = with_requested(_cells(pool), requested, 0.0)
    assert free_gpus_for_new_cells(pool, cells, gpus_per_cell) == expected


def test_no_physical_capacity_is_unknown() -> None:
    pool = GPUCellPool.model_validate(with_cells(pool_manifest("a"), ROWS))
    assert free_gpus_for_new_cells(pool, _cells(pool), 1) is None


def test_plan_feedback_only_for_a_pool_it_held() -> None:
    held = Decision(1, Reason.INSUFFICIENT_PHYSICAL_GPU, "", PolicyMemory())
    other = Decision(1, Reason.SCALED_UP, "", PolicyMemory())
    before = {"physicalCapacity": {"freeGPUsInCluster": 0}}
    after = {"physicalCapacity": {"freeGPUsInCluster": 2}}
    assert plan_feedback(held, before, after)
    assert not plan_feedback(held, after, before)  # fewer: nothing to gain
    assert not plan_feedback(other, before, after)
    assert not plan_feedback(None, before, after)
    assert not plan_feedback(held, before, {"physicalCapacity": {"x": 1}})


@pytest.fixture
async def scaler() -> AsyncIterator[tuple[Autoscaler, FakeWorkload, VirtualClock]]:
    clock, workload = VirtualClock(), FakeWorkload()
    autoscaler = Autoscaler(workload, FakeWriter(), clock, settings=SETTINGS)
    yield autoscaler, workload, clock
    await autoscaler.close()


async def test_live_decision_is_bounded_by_free_physical_gpus(
    scaler: tuple[Autoscaler, FakeWorkload, VirtualClock],
) -> None:
    autoscaler, workload, clock = scaler
    for i in range(5):  # 20000 MiB each: one pod per 24 GiB cell
        workload.pods[f"p{i}"] = pending_pod(f"p{i}", mem_mib=20000)
    autoscaler.pool_event("ADDED", with_free(pool_manifest("a"), 2))
    await clock.advance(0.2)
    decision = autoscaler.pools[A].last_decision
    assert decision is not None
    assert decision.desired_replicas == 2
    assert decision.reason is Reason.INSUFFICIENT_PHYSICAL_GPU
    assert "2 free physical GPU(s)" in decision.message
    # A new ledger reading (another pool let GPUs go): 5 free, 2 of them for the 2 cells asked
    # for and not created yet. Nothing else changed: only the lifted bound wakes the pool.
    writer = autoscaler.writer
    assert isinstance(writer, FakeWriter)
    published = {**pool_manifest("a"), "status": writer.for_pool("a")[-1]["status"]}
    decided = autoscaler.pools[A].decisions
    autoscaler.pool_event("MODIFIED", with_free(published, 5))
    await clock.advance(0.2)
    assert autoscaler.pools[A].decisions == decided + 1  # woken by the new reading
    decision = autoscaler.pools[A].last_decision
    assert decision is not None and decision.desired_replicas == 5
    assert decision.reason is Reason.SCALED_UP
