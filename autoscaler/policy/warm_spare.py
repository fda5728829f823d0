"""Warm spare: an empty cell kept while lone pods keep arriving at a pool that shares GPUs.

Why this module exists: a pod that arrives when every cell is full waits a whole boot, and on
traces of lone arrivals (one pod every few minutes, most of them finding no room) that is most
of the tail wait. ``headroomCells`` keeps empty cells at all times, which makes an idle pool pay
for a cell around the clock and never scale to zero. The warm spare keeps them only while the
pool's recent growth says a spare will be taken: a pod that takes the spare makes the pool grow
again (the spare is replaced), which keeps the spare for the next arrival; once that stops
for ``warm_spare_seconds`` the spare is an ordinary idle cell and leaves after the scale-down
window.

Which growth counts (``warm_spare_lone_arrivals`` > 0, the default): scale-ups less than a boot
apart are one growth episode; an episode counts when the spare would have absorbed it (it
needed at most ``warm_spare_cells`` new cells for its pods: a lone arrival, not a burst whose
pods mostly wait for boots anyway) and the pool shared GPUs when it grew (a pending pod asked
part of a GPU, or a GPU held two pods or a fractional one). Sharing is where packing saves
against a whole-GPU view of demand: Cluster Autoscaler starts a cell for a fractional pod that
HAMi then co-locates elsewhere, and so keeps empty cells that catch the next lone arrival
without asking for them. The spare spends part of that saving on the same tail; a pool of
whole-GPU pods has no such saving and keeps none. The spare is kept while ``lone_arrivals``
such episodes ended within ``warm_spare_seconds`` (docs/autoscaling.md, session 19). With
``warm_spare_lone_arrivals`` 0 any growth keeps it (the session-17 rule).

Pure: the pool's memory, config, the time (and, when it grows, its cells and pending pods) in,
the empty cells to keep and the episodes to remember out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    GrowthEpisode,
    PendingPod,
    PolicyMemory,
)

_HOLDING = (CellState.READY, CellState.DRAINING)  # cells whose usage is pods running there


def warm_until(memory: PolicyMemory, config: PolicyConfig) -> float | None:
    """When the warm spare lapses; None when the pool keeps none (disabled, it never grew, or
    too few lone arrivals are remembered)."""
    if config.warm_spare_cells <= 0 or memory.last_scale_up_at is None:
        return None
    needed = config.warm_spare_lone_arrivals
    if needed <= 0:
        return memory.last_scale_up_at + config.warm_spare_seconds
    lone = [
        end
        for _, end, cells, shared in memory.growth_episodes
        if shared and cells <= config.warm_spare_cells
    ]
    if len(lone) < needed:
        return None
    return lone[-needed] + config.warm_spare_seconds


def headroom_cells(memory: PolicyMemory, config: PolicyConfig, now: float) -> int:
    """Empty cells the pool keeps now: ``headroom_cells``, raised to ``warm_spare_cells``
    while the warm spare holds (``warm_until``)."""
    until = warm_until(memory, config)
    if until is None or now >= until:
        return config.headroom_cells
    return max(config.headroom_cells, config.warm_spare_cells)


def records_growth(config: PolicyConfig) -> bool:
    """Whether scale-ups are remembered as growth episodes (only the lone-arrival rule reads
    them)."""
    return config.warm_spare_cells > 0 and config.warm_spare_lone_arrivals > 0


def grown(
    episodes: tuple[GrowthEpisode, ...],
    config: PolicyConfig,
    now: float,
    new_cells: int,
    shares: bool,
) -> tuple[GrowthEpisode, ...]:
    """The episodes after a scale-up at ``now`` whose pending pods need ``new_cells`` new
    cells, in a pool that ``shares`` GPUs: it extends the newest episode when that one last
    grew less than a boot (``boot_seconds``) ago, else it starts one. Episodes that ended
    ``warm_spare_seconds`` ago or more are dropped."""
    kept = tuple(e for e in episodes if now - e[1] < config.warm_spare_seconds)
    if kept and now - kept[-1][1] < config.boot_seconds:
        first, _, most, shared = kept[-1]
        return (*kept[:-1], (first, now, max(most, new_cells), shared and shares))
    return (*kept, (now, now, new_cells, shares))


def partial_ask(ask: GPUAsk, shape: CellShape) -> bool:
    """``ask`` leaves room on its GPU for another pod: one GPU, less than its memory and
    fewer than all its cores."""
    return (
        ask.gpu_count == 1
        and ask.memory_on(shape.memory_mib) < shape.memory_mib
        and ask.cores_percent < shape.cores_percent
    )


def shared_gpu(usage: GPUUsage, shape: CellShape) -> bool:
    """A GPU that holds two pods or more, or one pod taking less than the whole GPU."""
    if usage.slots >= 2:
        return True
    partial = usage.memory_mib < shape.memory_mib and usage.cores_percent < shape.cores_percent
    return usage.slots == 1 and partial


def pool_shares(cells: Sequence[CellView], pending: Iterable[PendingPod], shape: CellShape) -> bool:
    """Whether the pool shares GPUs now: a pending pod asks part of a GPU, or a GPU of a Ready
    or Draining cell is ``shared_gpu``."""
    if any(partial_ask(ask, shape) for pod in pending for ask in pod.asks()):
        return True
    return any(shared_gpu(gpu, shape) for c in cells if c.state in _HOLDING for gpu in c.gpus)
