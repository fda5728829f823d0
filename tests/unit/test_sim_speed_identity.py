"""The simulator's speed-ups change nothing: memoised paths give what the plain rules give.

Why this file exists: packing memoises per-usage facts and HAMi placement (by value and by the
usage tuple's identity), and the world keeps Ready cells in HAMi's node order between changes
(issue 14, simulator speed). Each is checked here against the rule it replaces, on random
inputs, so a stale memo or a missed invalidation fails a test instead of shifting a benchmark.
"""

from __future__ import annotations

import random

import pytest

from autoscaler.policy import packing
from autoscaler.policy.fit import place_asks
from autoscaler.policy.packing import cell_utilisation, pack
from autoscaler.policy.types import CellShape, CellState, CellView, GPUAsk, GPUUsage, PendingPod
from simulations.simulator.engine import hami
from simulations.simulator.engine.world import Pending, Running, SimCell, World
from simulations.simulator.traces import TracePod

ASKS = (
    GPUAsk(memory_percent=100, cores_percent=100),
    GPUAsk(memory_percent=30, cores_percent=30),
    GPUAsk(memory_percent=50, cores_percent=20),
    GPUAsk(gpu_count=2, memory_percent=100, cores_percent=100),
    GPUAsk(memory_mib=4096),
)


def _clear_memos() -> None:
    packing._facts.cache_clear()
    packing._place.cache_clear()
    packing._facts_of.entries.clear()
    packing._row_of.entries.clear()


def _random_cells(rng: random.Random, shape: CellShape, count: int) -> tuple[CellView, ...]:
    cells = []
    for i in range(count):
        state = rng.choice((CellState.READY, CellState.READY, CellState.BOOTING))
        gpus: tuple[GPUUsage, ...] = tuple(GPUUsage() for _ in range(shape.gpus))
        for _ in range(rng.randint(0, 4)):
            after, reason = place_asks((rng.choice(ASKS),), gpus, shape)
            gpus = after if reason is None else gpus
        usage = gpus if state is CellState.READY else ()
        cells.append(CellView(f"c{i}", i, state, 0.0, gpus=usage))
    return tuple(cells)


@pytest.mark.parametrize("seed", range(6))
def test_pack_with_memos_equals_pack_from_scratch_and_the_plain_rules(seed: int) -> None:
    rng = random.Random(seed)
    shape = CellShape(gpus=rng.choice((1, 4, 8)))
    cells = _random_cells(rng, shape, rng.randint(0, 12))
    pods = [PendingPod(f"p{i}", rng.choice(ASKS), float(i)) for i in range(rng.randint(1, 30))]
    warm = [pack(pods, cells, shape) for _ in range(3)][-1]  # memos filled by earlier calls
    _clear_memos()
    cold = pack(pods, cells, shape)
    assert warm == cold
    assert warm.utilisation == {n: cell_utilisation(g, shape) for n, g in warm.usage.items()}
    assert warm.cells_used() == sum(1 for u in warm.usage.values() if any(g.slots for g in u))


def test_facts_by_identity_never_answer_for_another_usage() -> None:
    shape = CellShape(gpus=2)
    empty = (GPUUsage(), GPUUsage())
    full = (GPUUsage(24576, 100, 1), GPUUsage(24576, 100, 1))
    assert packing._facts_of(empty, shape) == (0.0, 24576, False)
    assert packing._facts_of(full, shape) == (1.0, 0, True)
    other_shape = CellShape(gpus=2, memory_mib=49152)
    assert packing._facts_of(full, other_shape)[1] == 24576


def _brute_find(world: World, ask: GPUAsk) -> tuple[SimCell, tuple[int, ...]] | None:
    """HAMi's node choice as a plain scan: best score (binpack high, spread low), then index."""
    sign = -1.0 if world.node_policy == hami.BINPACK else 1.0
    best = None
    for cell in world.cells.values():
        if cell.state is not CellState.READY:
            continue
        chosen = hami.choose_gpus(cell.gpus, world.shape, ask, world.gpu_policy)
        if chosen is None:
            continue
        key = (sign * hami.node_score(cell.gpus, world.shape), cell.index)
        if best is None or key < best[0]:
            best = (key, cell, chosen)
    return None if best is None else (best[1], best[2])


@pytest.mark.parametrize("node_policy", [hami.BINPACK, hami.SPREAD])
def test_find_cell_keeps_hami_node_order_through_every_change(node_policy: str) -> None:
    rng = random.Random(7)
    shape = CellShape(gpus=4)
    world = World(shape, node_policy, hami.SPREAD)
    running: list[Running] = []
    for step in range(400):
        roll = rng.random()
        if roll < 0.1:
            world.add_cell(float(step), rng.choice((CellState.READY, CellState.BOOTING)))
        elif roll < 0.15 and world.cells:
            cell = world.cells[rng.choice(sorted(world.cells))]
            world.set_state(cell, rng.choice(list(CellState)), float(step))
        elif roll < 0.18 and world.cells:
            empty = [n for n, c in sorted(world.cells.items()) if not c.pods]
            if empty:
                world.remove_cell(rng.choice(empty))
        elif roll < 0.35 and running:
            gone = running.pop(rng.randrange(len(running)))
            if gone.cell in world.cells:
                world.unbind(gone)
        ask = rng.choice(ASKS)
        expected = _brute_find(world, ask)
        found = world.find_cell(ask)
        assert (found is None) == (expected is None), step
        if found is None or expected is None:
            continue
        assert (found[0].name, found[1]) == (expected[0].name, expected[1]), step
        if roll >= 0.35:
            pod = TracePod(f"p{step}", float(step), 60.0, ask)
            world.enqueue(pod, float(step), 60.0)
            entry: Pending = world.pending[pod.key]
            running.append(world.bind(entry, found[0], found[1], float(step), step))
