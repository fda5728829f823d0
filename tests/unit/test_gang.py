"""Gang plans: check-capacity on Ready+Booting cells, atomic scale-up of all cells or none."""

from __future__ import annotations

import pytest

from autoscaler.policy import gang
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    NodeTemplate,
    PendingPod,
    PlacementConstraints,
)

SHAPE = CellShape(gpus=2, memory_mib=24000, cores_percent=100, slots=4)
TEMPLATE = NodeTemplate(labels={"pool": "a"})
ROOMY = gang.Headroom(max_new_cells=10)


def pod_set(count: int, memory_mib: int = 12000, gpus: int = 1, key: str = "ns/t") -> gang.PodSet:
    return gang.PodSet(PendingPod(key, GPUAsk(gpus, memory_mib, None, 0), 0.0), count)


def ready(name: str, *gpus: GPUUsage) -> CellView:
    return CellView(name, 0, CellState.READY, 0.0, gpus=gpus)


def booting(name: str) -> CellView:
    return CellView(name, 1, CellState.BOOTING, 0.0)


def test_members_are_keyed_per_pod_set() -> None:
    pods = gang.members([pod_set(2, key="ns/a"), pod_set(1, key="ns/b")])
    assert [p.key for p in pods] == ["ns/a#0", "ns/a#1", "ns/b#0"]


def test_fits_ready_and_booting_cells_now() -> None:
    # one Ready cell with one GPU half used (room for 3 halves) + one Booting cell (4 halves)
    cells = (ready("r", GPUUsage(12000, 0, 1), GPUUsage()), booting("b"))
    plan = gang.plan_gang([pod_set(7)], cells, SHAPE, TEMPLATE, ROOMY)
    assert plan.fits_now and plan.cells_to_add == 0
    assert plan.reason == gang.FITS_NOW and plan.members == 7


def test_atomic_adds_every_cell_the_gang_needs() -> None:
    cells = (ready("r", GPUUsage(24000, 0, 1), GPUUsage()),)  # room for 2 halves
    plan = gang.plan_gang([pod_set(8)], cells, SHAPE, TEMPLATE, ROOMY)
    # 8 halves: 2 on r, 6 more need 2 new cells (4 halves per cell)
    assert not plan.fits_now
    assert (plan.cells_to_add, plan.cells_needed, plan.reason) == (2, 2, gang.SCALE_UP)


@pytest.mark.parametrize(
    ("room", "reason"),
    [
        (gang.Headroom(max_new_cells=1), gang.AT_MAX_REPLICAS),
        (gang.Headroom(10, physical_gpu_cells=1), gang.INSUFFICIENT_PHYSICAL_GPU),
        (gang.Headroom(10, None, in_flight_cells=1), gang.IN_FLIGHT_LIMIT),
        (gang.Headroom(10, rate_cells=1), gang.RATE_LIMITED),
        (gang.Headroom(10, shape_known=False), gang.CELL_SHAPE_UNKNOWN),
    ],
)
def test_short_headroom_adds_nothing(room: gang.Headroom, reason: str) -> None:
    plan = gang.plan_gang([pod_set(8)], (), SHAPE, TEMPLATE, room)
    assert plan.cells_to_add == 0 and not plan.fits_now
    assert plan.reason == reason and plan.cells_needed == 2
    assert "need 2 new cell(s)" in plan.message and "adding none" in plan.message


def test_exact_headroom_is_enough() -> None:
    plan = gang.plan_gang([pod_set(8)], (), SHAPE, TEMPLATE, gang.Headroom(2, 4, 2))
    assert plan.cells_to_add == 2 and plan.reason == gang.SCALE_UP


def test_a_member_that_fits_no_cell_adds_nothing() -> None:
    too_big = pod_set(1, gpus=4, key="ns/big")
    plan = gang.plan_gang([pod_set(2), too_big], (), SHAPE, TEMPLATE, ROOMY)
    assert (plan.cells_to_add, plan.reason) == (0, gang.MEMBER_UNFIT)
    assert "ns/big" in plan.message and "NodeInsufficientDevice" in plan.message


def test_a_member_whose_selector_rules_out_the_pool_adds_nothing() -> None:
    elsewhere = PlacementConstraints(node_selector={"pool": "b"})
    ps = gang.PodSet(PendingPod("ns/t", GPUAsk(1, 1000), 0.0, elsewhere), 1)
    plan = gang.plan_gang([ps], (booting("b"),), SHAPE, TEMPLATE, ROOMY)
    assert plan.reason == gang.MEMBER_UNFIT and not plan.fits_now
    assert "NodeSelectorMismatch" in plan.message


def test_draining_and_failed_cells_are_no_capacity() -> None:
    cells = (
        CellView("d", 0, CellState.DRAINING, 0.0, gpus=(GPUUsage(), GPUUsage())),
        CellView("f", 1, CellState.FAILED, 0.0),
    )
    plan = gang.plan_gang([pod_set(2)], cells, SHAPE, TEMPLATE, ROOMY)
    assert (plan.fits_now, plan.cells_to_add) == (False, 1)


def test_booked_capacity_is_not_offered_twice() -> None:
    cells = (booting("b"),)  # 4 halves
    booked = gang.members([pod_set(4, key="ns/other")])
    plan = gang.plan_gang([pod_set(2)], cells, SHAPE, TEMPLATE, ROOMY, booked)
    assert (plan.fits_now, plan.cells_to_add) == (False, 1)
    alone = gang.plan_gang([pod_set(2)], cells, SHAPE, TEMPLATE, ROOMY)
    assert alone.fits_now


def test_booked_beyond_live_cells_counts_as_promised_cells() -> None:
    # other gang needs 1 new cell with 2 halves free after it: our 2 halves fit there
    booked = gang.members([pod_set(6, key="ns/other")])
    plan = gang.plan_gang([pod_set(2)], (booting("b"),), SHAPE, TEMPLATE, ROOMY, booked)
    assert plan.fits_now


def test_empty_gang_fits_trivially() -> None:
    plan = gang.plan_gang([pod_set(0)], (), SHAPE, TEMPLATE, gang.Headroom(0))
    assert plan.fits_now and plan.reason == gang.EMPTY_GANG


def test_headroom_uses_the_decide_bounds() -> None:
    cells = (booting("b1"), booting("b2"))
    unproven = gang.headroom(5, cells, 3, free_physical_gpus=5, gpus_per_cell=2)
    assert unproven == gang.Headroom(3, 2, 1)
    proven = gang.headroom(5, (*cells, ready("r")), 3, None, 2)
    assert proven == gang.Headroom(2, None, None)
    remembered = gang.headroom(5, cells, 3, boots_proven=True)
    assert remembered.in_flight_cells is None


def test_more_cells_than_max_replicas_even_when_empty_is_permanent() -> None:
    # 12 halves need 3 empty cells; max 2 can never hold the gang
    plan = gang.plan_gang([pod_set(12)], (), SHAPE, TEMPLATE, gang.Headroom(2), max_replicas=2)
    assert plan.permanent and plan.reason == gang.AT_MAX_REPLICAS and plan.cells_to_add == 0
    assert "need 3 cell(s) even on an empty pool; max replicas is 2" in plan.message


def test_short_while_cells_are_busy_is_not_permanent() -> None:
    busy = (ready("r", GPUUsage(24000, 0, 1), GPUUsage(24000, 0, 1)),)
    plan = gang.plan_gang([pod_set(8)], busy, SHAPE, TEMPLATE, gang.Headroom(1), max_replicas=2)
    assert plan.reason == gang.AT_MAX_REPLICAS and not plan.permanent


def test_a_member_that_fits_no_cell_is_permanent() -> None:
    plan = gang.plan_gang([pod_set(1, gpus=4)], (), SHAPE, TEMPLATE, ROOMY)
    assert plan.permanent


def test_cells_promised_to_older_requests_count_against_every_bound() -> None:
    booked = gang.members([pod_set(8, key="ns/older")])  # 2 new cells beyond none
    assert gang.promised_cells((), booked, SHAPE) == 2
    room = gang.less(gang.Headroom(3, physical_gpu_cells=5, in_flight_cells=2, rate_cells=None), 2)
    assert room == gang.Headroom(1, physical_gpu_cells=3, in_flight_cells=0, rate_cells=None)
    plan = gang.plan_gang([pod_set(8)], (), SHAPE, TEMPLATE, room, booked)
    assert (plan.cells_to_add, plan.cells_needed) == (0, 2)
