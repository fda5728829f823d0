"""``cell_index`` answers what a pass over every cell answers, through every kind of change.

Why this file exists: ``decide`` reads counts, packing bins, projected emptiness and scale-down
candidates from an index kept between calls and updated only for the views that changed
(issue 14, simulator speed). A missed update would shift a decision silently, so each answer
is compared here with the plain rule on random pools moved on by random changes: pods landing
and leaving, cells booting, becoming Ready, draining, failing, appearing and going, plus the
odd inputs (a view twice, two cells with one name, a cell named like a new one).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from autoscaler.policy import cell_index
from autoscaler.policy.cell_index import CellIndex, index_of
from autoscaler.policy.fit import place_asks
from autoscaler.policy.packing import pack, pack_bins
from autoscaler.policy.scale_down import candidates, is_empty
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    PendingPod,
)
from tests.unit.test_sim_speed_identity import ASKS

LIVE = (CellState.READY, CellState.BOOTING)


def _loaded(
    rng: random.Random, shape: CellShape
) -> tuple[tuple[GPUUsage, ...], tuple[tuple[GPUAsk, ...], ...]]:
    gpus: tuple[GPUUsage, ...] = tuple(GPUUsage() for _ in range(shape.gpus))
    asks: list[tuple[GPUAsk, ...]] = []
    for _ in range(rng.randint(0, 3 * shape.gpus)):
        ask = rng.choice(ASKS)
        after, reason = place_asks((ask,), gpus, shape)
        if reason is None:
            gpus, asks = after, [*asks, (ask,)]
    return gpus, tuple(asks)


def _cell(rng: random.Random, shape: CellShape, index: int, name: str) -> CellView:
    state = rng.choice((CellState.READY, CellState.READY, CellState.BOOTING, CellState.DRAINING))
    gpus, asks = _loaded(rng, shape)
    if state is CellState.BOOTING:
        gpus, asks = (), ()
    return CellView(name, index, state, 0.0, gpus=gpus, pods=len(asks), pod_asks=asks)


def _moved_on(rng: random.Random, shape: CellShape, cells: list[CellView], step: int) -> None:
    """One random change, as the world makes them: new views only for cells that changed."""
    roll = rng.random()
    if roll < 0.15 or not cells:
        cells.append(_cell(rng, shape, 100 + step, f"c{100 + step}"))
    elif roll < 0.25:
        cells.pop(rng.randrange(len(cells)))
    elif roll < 0.4:
        i = rng.randrange(len(cells))
        state = rng.choice(list(CellState))
        gpus = cells[i].gpus if state is not CellState.BOOTING else ()
        cells[i] = replace(cells[i], state=state, gpus=gpus)
    else:
        i = rng.randrange(len(cells))
        gpus, asks = _loaded(rng, shape)
        if cells[i].state is not CellState.BOOTING:
            cells[i] = replace(cells[i], gpus=gpus, pods=len(asks), pod_asks=asks)


def _pods(rng: random.Random, count: int) -> list[PendingPod]:
    return [PendingPod(f"p{i}", rng.choice(ASKS), float(i)) for i in range(count)]


def _check(index: CellIndex, cells: tuple[CellView, ...], pods: list[PendingPod]) -> None:
    """Every answer of ``index`` against the plain pass over ``cells``."""
    shape, threshold = index.shape, index.threshold
    for state in CellState:
        assert index.count(state) == sum(1 for c in cells if c.state == state)
    busy = sum(1 for c in cells if c.state == CellState.DRAINING and not is_empty(c, c.gpus))
    assert index.draining_busy() == busy
    excluded = {pods[0].key: frozenset(c.name for c in cells[:2])} if pods else {}
    packing = pack_bins(pods, index.bins, shape, excluded=excluded)
    plain = pack(pods, cells, shape, excluded=excluded)
    assert packing == plain
    assert list(packing.usage) == list(plain.usage)  # same order: gang.booked_cells reads it
    live_empty = sum(
        1 for c in cells if c.state in LIVE and is_empty(c, plain.usage.get(c.name, ()))
    )
    assert index.empty_after(packing) == live_empty
    below = candidates(cells, plain.utilisation, threshold)
    assert index.below(packing) == below
    empty_below = sum(1 for c in below if is_empty(c, plain.usage.get(c.name, ())))
    assert index.empty_among(below, packing) == empty_below


@pytest.mark.parametrize("seed", range(8))
def test_index_kept_between_calls_answers_like_a_pass_over_every_cell(seed: int) -> None:
    rng = random.Random(seed)
    shape = CellShape(gpus=rng.choice((1, 4, 8)), slots=rng.choice((1, 2, 10)))
    threshold = rng.choice((0.0, 0.5, 0.9))
    cells = [_cell(rng, shape, i, f"c{i}") for i in range(rng.randint(0, 15))]
    for step in range(120):
        _moved_on(rng, shape, cells, step)
        observed = tuple(cells)
        index = index_of(observed, shape, threshold)
        assert index.cells is observed
        _check(index, observed, _pods(rng, rng.choice((0, 0, 1, 3, 12))))
    assert any(index.exact for index in cell_index._recent)


def test_an_unchanged_tuple_gets_its_own_index_back_and_a_changed_one_is_derived() -> None:
    rng = random.Random(3)
    shape = CellShape(gpus=4)
    cells = tuple(_cell(rng, shape, i, f"d{i}") for i in range(20))
    first = index_of(cells, shape, 0.5)
    assert index_of(cells, shape, 0.5) is first
    moved = (*cells[:5], replace(cells[5], gpus=_loaded(rng, shape)[0]), *cells[6:])
    second = index_of(moved, shape, 0.5)
    assert second.exact
    shared = [i for i in first.facts if i in second.facts]
    assert len(shared) == 19 and all(first.facts[i] is second.facts[i] for i in shared)


@pytest.mark.parametrize(
    "odd",
    ["same view twice", "two cells, one name", "a cell named like a new one"],
)
def test_odd_pools_answer_like_the_plain_pass(odd: str) -> None:
    rng = random.Random(11)
    shape = CellShape(gpus=2)
    cells = [_cell(rng, shape, i, f"e{i}") for i in range(10)]
    index_of(tuple(cells), shape, 0.5)
    if odd == "same view twice":
        cells.append(cells[3])
    elif odd == "two cells, one name":
        cells.append(replace(cells[4], index=40, gpus=_loaded(rng, shape)[0]))
    else:
        cells.append(CellView("new-0", 41, CellState.READY, 0.0, gpus=_loaded(rng, shape)[0]))
    observed = tuple(cells)
    index = index_of(observed, shape, 0.5)
    assert index.exact is (odd == "a cell named like a new one")
    for count in (0, 1, 6, 20):
        _check(index, observed, _pods(rng, count))
