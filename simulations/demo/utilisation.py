"""The twin run's mean utilisation, computed the way the simulator computes it.

Why this module exists: every column of the demo's report must be measured for every row, and
the twin row's ``util`` was a constant 0. The simulator integrates, over Ready cells, the
largest of (memory, cores, slots) allocated per cell; here the same figure comes from what the
recorder saw: when each pod was bound to which cell and when it ended (its HAMi ask from the
trace), against the Ready-cell count over time. Pure: values in, a number out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from autoscaler.policy.types import CellShape, GPUAsk

# (seconds, +1 bind / -1 end, ask)
_Event = tuple[float, int, GPUAsk]


def _share(totals: tuple[float, float, float], shape: CellShape) -> float:
    memory, cores, slots = totals
    gpus = max(1, shape.gpus)
    return min(
        1.0,
        max(
            memory / (shape.memory_mib * gpus),
            cores / (shape.cores_percent * gpus),
            slots / (shape.slots * gpus),
        ),
    )


def _cell_util_seconds(events: list[_Event], shape: CellShape, end: float) -> float:
    """The integral of one cell's utilisation over time."""
    memory = cores = slots = 0.0
    total, last = 0.0, 0.0
    for stamp, sign, ask in sorted(events, key=lambda e: (e[0], e[1])):
        at = min(stamp, end)
        total += _share((memory, cores, slots), shape) * max(0.0, at - last)
        last = at
        memory += sign * ask.memory_on(shape.memory_mib) * ask.gpu_count
        cores += sign * min(ask.cores_percent, 100) * ask.gpu_count
        slots += sign * ask.gpu_count
    return total + _share((memory, cores, slots), shape) * max(0.0, end - last)


def ready_cell_seconds(ready: Sequence[tuple[float, int]], end: float) -> float:
    """The integral of a (seconds, Ready cells) step function up to ``end``."""
    total = 0.0
    for (at, count), (nxt, _) in zip(ready, [*ready[1:], (end, 0)], strict=False):
        total += count * max(0.0, min(nxt, end) - at)
    return total


def mean_utilisation(
    bindings: Iterable[tuple[str, float, float | None, GPUAsk | None]],
    ready: Sequence[tuple[float, int]],
    shape: CellShape,
    end: float,
) -> float:
    """Time-weighted mean over Ready cells of allocated share; ``bindings`` are (cell, bound,
    ended or None while running, ask). 0 when no cell was ever Ready."""
    per_cell: dict[str, list[_Event]] = defaultdict(list)
    for cell, bound, ended, ask in bindings:
        if ask is None or not cell:
            continue
        per_cell[cell].append((bound, 1, ask))
        per_cell[cell].append((end if ended is None else ended, -1, ask))
    ready_seconds = ready_cell_seconds(ready, end)
    if ready_seconds <= 0:
        return 0.0
    used = sum(_cell_util_seconds(events, shape, end) for events in per_cell.values())
    return min(1.0, used / ready_seconds)
