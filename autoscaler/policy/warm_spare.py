"""Warm spare: an empty cell kept while a pool is busy growing, none once it goes quiet.

Why this module exists: a pod that arrives when every cell is full waits a whole boot, and on
traces of lone arrivals (one pod every few minutes, most of them finding no room) that is most
of the tail wait. ``headroomCells`` keeps empty cells at all times, which makes an idle pool pay
for a cell around the clock and never scale to zero. The warm spare keeps them only while the
pool has grown recently: a pod that takes the spare makes the pool grow again (the spare is
replaced), which keeps the spare for the next arrival; after ``warm_spare_seconds`` without
growth the spare is an ordinary idle cell and leaves after the scale-down window.

Pure: the pool's memory, config and the time in, the empty cells to keep out.
"""

from __future__ import annotations

from autoscaler.policy.types import PolicyConfig, PolicyMemory


def warm_until(memory: PolicyMemory, config: PolicyConfig) -> float | None:
    """When the warm spare lapses (the last scale-up + ``warm_spare_seconds``); None when the
    pool keeps none (disabled, or it never grew)."""
    if config.warm_spare_cells <= 0 or memory.last_scale_up_at is None:
        return None
    return memory.last_scale_up_at + config.warm_spare_seconds


def headroom_cells(memory: PolicyMemory, config: PolicyConfig, now: float) -> int:
    """Empty cells the pool keeps now: ``headroom_cells``, raised to ``warm_spare_cells``
    while the pool grew within the last ``warm_spare_seconds``."""
    until = warm_until(memory, config)
    if until is None or now >= until:
        return config.headroom_cells
    return max(config.headroom_cells, config.warm_spare_cells)
