"""Packing: tier order, HAMi per-GPU limits, heuristics, and a no-overcommit property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.policy.packing import (
    ARRIVAL,
    BEST_FIT,
    FIRST_FIT,
    HEURISTICS,
    cell_utilisation,
    lower_bound_cells,
    pack,
)
from autoscaler.policy.types import CellShape, CellState, CellView, GPUAsk, GPUUsage, PendingPod

SHAPE = CellShape(gpus=1, memory_mib=24000, cores_percent=100, slots=4)


def pod(key: str, ask: GPUAsk, t: float = 0.0, containers: tuple[GPUAsk, ...] = ()) -> PendingPod:
    return PendingPod(key, ask, t, container_asks=containers)


def ready(name: str, index: int, *gpus: GPUUsage) -> CellView:
    return CellView(name, index, CellState.READY, 0.0, gpus=gpus)


def booting(name: str, index: int) -> CellView:
    return CellView(name, index, CellState.BOOTING, 0.0)


@pytest.mark.parametrize("heuristic", HEURISTICS)
def test_fills_ready_then_booting_then_new(heuristic: str) -> None:
    cells = (
        booting("b", 2),
        ready("r", 1, GPUUsage(12000, 0, 1)),
        CellView("d", 3, CellState.DRAINING, 0.0),
        CellView("f", 4, CellState.FAILED, 0.0),
    )
    pods = [pod(f"p{i}", GPUAsk(1, 12000), float(i)) for i in range(4)]
    result = pack(pods, cells, SHAPE, heuristic)
    where = dict(result.placements)
    assert sorted(where.values()) == ["b", "b", "new-0", "r"]
    assert result.new_cells == 1
    assert result.unplaced == ()
    assert set(result.usage) == {"r", "b", "new-0"}
    assert result.utilisation["r"] == 1.0
    assert result.cells_used() == 3


def test_slots_limit_and_exclusive_rule() -> None:
    # 4 slots per GPU: 5 tiny pods need 2 cells; an exclusive pod needs an unused GPU
    pods = [pod(f"p{i}", GPUAsk(1, 10), float(i)) for i in range(5)]
    pods.append(pod("x", GPUAsk(1, None, None, 100), 9.0))
    result = pack(pods, (ready("r", 0, GPUUsage(0, 0, 0)),), SHAPE, FIRST_FIT)
    assert result.new_cells == 2
    assert dict(result.placements)["x"] == "r"  # largest first takes the empty Ready GPU


def test_exclusive_pod_never_joins_a_used_gpu() -> None:
    cells = (ready("r", 0, GPUUsage(10, 0, 1)),)
    result = pack([pod("x", GPUAsk(1, 10, None, 100))], cells, SHAPE)
    assert dict(result.placements)["x"] == "new-0"


def test_multi_gpu_pod_needs_distinct_gpus_on_one_cell() -> None:
    shape = CellShape(gpus=2, memory_mib=1000, cores_percent=100, slots=4)
    cells = (ready("a", 0, GPUUsage(1000, 0, 1), GPUUsage()), ready("b", 1, GPUUsage(), GPUUsage()))
    result = pack([pod("p", GPUAsk(2, 500))], cells, shape)
    assert dict(result.placements)["p"] == "b"
    assert result.usage["b"] == (GPUUsage(500, 0, 1), GPUUsage(500, 0, 1))


def test_unplaceable_and_max_new_cells() -> None:
    pods = [pod("big", GPUAsk(2, 10)), pod("a", GPUAsk(1, 20000)), pod("b", GPUAsk(1, 20000))]
    result = pack(pods, (), SHAPE, max_new_cells=1)
    assert result.new_cells == 1
    assert set(result.unplaced) == {"big", "b"} or set(result.unplaced) == {"big", "a"}


def test_best_fit_beats_first_fit_on_a_crafted_case() -> None:
    # two Ready cells: best-fit puts the 6000 pod in the fuller cell, keeping room for 18000
    cells = (ready("a", 0, GPUUsage(6000, 0, 1)), ready("b", 1, GPUUsage(18000, 0, 1)))
    pods = [pod("m", GPUAsk(1, 6000), 0.0), pod("l", GPUAsk(1, 18000), 1.0)]
    assert pack(pods, cells, SHAPE, BEST_FIT).new_cells == 0
    assert pack(pods, cells, SHAPE, ARRIVAL).new_cells == 1


def test_lower_bound() -> None:
    assert lower_bound_cells([], SHAPE) == 0
    pods = [pod(f"p{i}", GPUAsk(1, 8000)) for i in range(7)]
    assert lower_bound_cells(pods, SHAPE) == 3
    assert lower_bound_cells([pod("x", GPUAsk(1, 10, None, 100))] * 2, SHAPE) == 2
    assert pack(pods, (), SHAPE).new_cells == 3


def test_cell_utilisation_is_max_over_resources() -> None:
    assert cell_utilisation((GPUUsage(2400, 90, 1),), SHAPE) == 0.9
    assert cell_utilisation((GPUUsage(0, 0, 3),), SHAPE) == 0.75


asks = st.builds(
    GPUAsk,
    gpu_count=st.integers(1, 3),
    memory_mib=st.one_of(st.none(), st.integers(1, 30000)),
    memory_percent=st.one_of(st.none(), st.integers(1, 100)),
    cores_percent=st.integers(0, 120),
)
shapes = st.builds(
    CellShape,
    gpus=st.integers(1, 4),
    memory_mib=st.sampled_from([16000, 24576, 81920]),
    cores_percent=st.sampled_from([100, 200]),
    slots=st.integers(1, 10),
)


@settings(max_examples=150, deadline=None)
@given(
    shape=shapes,
    pod_asks=st.lists(st.lists(asks, min_size=1, max_size=3), max_size=25),
    heuristic=st.sampled_from(HEURISTICS),
    used=st.lists(st.tuples(st.integers(0, 20000), st.integers(0, 100), st.integers(0, 5))),
)
def test_packing_never_overcommits(
    shape: CellShape, pod_asks: list[list[GPUAsk]], heuristic: str, used: list[tuple[int, ...]]
) -> None:
    cells = []
    for i, (mem, cores, slots) in enumerate(used[:4]):
        usage = GPUUsage(min(mem, shape.memory_mib), cores, min(slots, shape.slots))
        cells.append(ready(f"r{i}", i, *([usage] * shape.gpus)))
    pods = [pod(f"p{i}", a[0], float(i), tuple(a)) for i, a in enumerate(pod_asks)]
    result = pack(pods, cells, shape, heuristic)
    before = {c.name: c.gpus for c in cells}
    for name, gpus in result.usage.items():
        assert len(gpus) == shape.gpus
        for j, g in enumerate(gpus):
            base = before.get(name, (GPUUsage(),) * shape.gpus)[j]
            if g == base:
                continue  # untouched GPUs keep whatever they had
            assert g.memory_mib <= shape.memory_mib
            assert g.cores_percent <= shape.cores_percent
            assert g.slots <= shape.slots
    placed = {k for k, _ in result.placements}
    assert placed.isdisjoint(result.unplaced)
    assert len(placed) + len(result.unplaced) == len(pods)
