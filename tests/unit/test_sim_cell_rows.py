"""The world's per-cell rows are what a full pass over its cells gives, after every change.

Why this file exists: the world keeps the cells' views and the Ready cells' utilisation in
lists patched only where a cell changed (``engine.cell_rows``), and the placement memo keeps
HAMi's GPU choices per usage, shared by the cells holding an equal one (issue 14, simulator
speed). A missed or misplaced patch would hand the policy a wrong cell or shift the
utilisation integral; here every step of a random history of adds, state changes, binds,
unbinds and removals is compared with the plain rules, exactly (the same floats, added in the
same order).
"""

from __future__ import annotations

import itertools
import random

import pytest

from autoscaler.policy.types import CellShape, CellState, GPUAsk
from simulations.simulator.engine import hami
from simulations.simulator.engine.cell_rows import CellRows
from simulations.simulator.engine.world import Running, World
from simulations.simulator.traces import TracePod
from tests.unit.test_sim_speed_identity import _brute_find

TOKENS = itertools.count()
ASKS = (
    GPUAsk(memory_percent=100, cores_percent=100),
    GPUAsk(memory_percent=30, cores_percent=30),
    GPUAsk(gpu_count=2, memory_percent=50, cores_percent=20),
    GPUAsk(memory_mib=4096),
)


def _plain_views(world: World) -> tuple[object, ...]:
    return tuple(c.view() for c in world.cells.values() if c.state is not CellState.FAILED)


def _plain_utilisation(world: World) -> tuple[float, int]:
    ready = [c for c in world.cells.values() if c.state is CellState.READY]
    return sum([hami.utilisation(c.gpus, world.shape) for c in ready]), len(ready)


def _step(world: World, rng: random.Random, step: int, running: list[Running]) -> None:
    roll = rng.random()
    if roll < 0.12:
        world.add_cell(float(step), rng.choice((CellState.READY, CellState.BOOTING)))
    elif roll < 0.2 and world.cells:
        cell = world.cells[rng.choice(sorted(world.cells))]
        world.set_state(cell, rng.choice(list(CellState)), float(step))
    elif roll < 0.25 and world.cells:
        empty = [n for n, c in sorted(world.cells.items()) if not c.pods]
        if empty:
            world.remove_cell(rng.choice(empty))
    elif roll < 0.45 and running:
        gone = running.pop(rng.randrange(len(running)))
        if gone.cell in world.cells:
            world.unbind(gone)
    else:
        ask = rng.choice(ASKS)
        found = world.find_cell(ask)
        assert (found is None) == (_brute_find(world, ask) is None), step
        if found is not None:
            token = next(TOKENS)
            pod = TracePod(f"p{step}-{token}", float(step), 60.0, ask)
            world.enqueue(pod, float(step), 60.0)
            running.append(world.bind(world.pending[pod.key], *found, float(step), token))


@pytest.mark.parametrize("seed", range(4))
def test_views_and_utilisation_match_a_full_pass_after_every_change(seed: int) -> None:
    rng = random.Random(seed)
    world = World(CellShape(gpus=4), hami.BINPACK, hami.SPREAD)
    running: list[Running] = []
    ready_seen = 0
    for step in range(600):
        for _ in range(rng.randint(1, 3)):  # several changes between two looks, sometimes
            _step(world, rng, step, running)
        assert world.observation(None).cells == _plain_views(world), step
        assert world.utilisation_sum() == _plain_utilisation(world), step
        ready_seen = max(ready_seen, world.utilisation_sum()[1])
    assert ready_seen >= 5  # the history really grew a pool


class _Cell:
    def __init__(self, index: int, value: int | None) -> None:
        self.index, self.value = index, value


def test_rows_insert_replace_and_drop_in_index_order() -> None:
    rows: CellRows[_Cell, int] = CellRows(lambda c: c.value)
    cells = {i: _Cell(i, i * 10) for i in (5, 1, 3)}
    for cell in cells.values():
        rows.changed(cell)
    assert rows.values() == [10, 30, 50]
    cells[3].value = None  # no row any more (a Failed view, a cell not Ready)
    cells[1].value = 11
    rows.changed(cells[3])
    rows.changed(cells[1])
    rows.changed(_Cell(4, 40))
    assert rows.values() == [11, 40, 50]
    rows.changed(cells[5], present=False)
    cells[3].value = 33
    rows.changed(cells[3])
    assert rows.values() == [11, 33, 40]
