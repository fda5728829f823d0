"""HAMi's placement of one pod onto the simulated cells (the world, not the policy).

Why this module exists: the simulated pool must accept and refuse pods exactly where HAMi
would, or every policy is judged against the wrong world. The per-GPU filter is the policy's
own ``autoscaler.policy.fit.gpu_fit`` (HAMi v2.10 ``Fit``: slots, memory, cores, the exclusive
100-core rule, cores-exhausted; hami-facts §3.1), so world and policy cannot disagree on what
fits. What is added here is what only the world does: HAMi's GPU choice (``spread`` = least-used
GPU first, ``binpack`` = most-used) and node choice (score ``10 x (slots used/slots + cores
used/cores + memory used/memory)`` before the pod; ``binpack`` takes the highest, ``spread`` the
lowest; ties go to the lowest cell index where HAMi's are arbitrary), hami-facts §6.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableSequence, Sequence

from autoscaler.policy.fit import add_ask, gpu_fit
from autoscaler.policy.packing import cell_utilisation, pack
from autoscaler.policy.types import CellShape, GPUAsk, GPUUsage, PendingPod

BINPACK = "binpack"
SPREAD = "spread"
EMPTY = GPUUsage()


def _gpu_score(gpu: GPUUsage, shape: CellShape, memory_mib: int, cores_percent: int) -> float:
    return 10.0 * (
        (gpu.slots + 1) / shape.slots
        + (gpu.cores_percent + cores_percent) / shape.cores_percent
        + (gpu.memory_mib + memory_mib) / shape.memory_mib
    )


def choose_gpus(
    gpus: Sequence[GPUUsage], shape: CellShape, ask: GPUAsk, gpu_policy: str = SPREAD
) -> tuple[int, ...] | None:
    """Indices of the GPUs HAMi would give ``ask`` on this cell, or None when it does not fit."""
    fitting = [i for i, gpu in enumerate(gpus) if gpu_fit(ask, gpu, shape) is None]
    if len(fitting) < ask.gpu_count:
        return None
    if len(fitting) == ask.gpu_count:
        return tuple(fitting)
    memory = ask.memory_on(shape.memory_mib)
    cores = min(ask.cores_percent, 100)
    sign = -1.0 if gpu_policy == BINPACK else 1.0
    fitting.sort(key=lambda i: (sign * _gpu_score(gpus[i], shape, memory, cores), i))
    return tuple(sorted(fitting[: ask.gpu_count]))


def node_score(gpus: Sequence[GPUUsage], shape: CellShape) -> float:
    """HAMi's default node score (0-30) from usage before the incoming pod."""
    count = len(gpus)
    if count == 0:
        return 0.0
    slots = sum(g.slots for g in gpus) / (shape.slots * count)
    cores = sum(g.cores_percent for g in gpus) / (shape.cores_percent * count)
    memory = sum(g.memory_mib for g in gpus) / (shape.memory_mib * count)
    return 10.0 * (slots + cores + memory)


def utilisation(gpus: Sequence[GPUUsage], shape: CellShape) -> float:
    """Max over (memory, cores, slots) of the cell's allocated share (the policy's arithmetic)."""
    return cell_utilisation(gpus, shape)


def allocate(
    gpus: MutableSequence[GPUUsage], shape: CellShape, ask: GPUAsk, indices: Iterable[int]
) -> None:
    """Book ``ask`` on the chosen GPUs."""
    for i in indices:
        gpus[i] = add_ask(gpus[i], ask, shape)


def release(
    gpus: MutableSequence[GPUUsage], shape: CellShape, ask: GPUAsk, indices: Iterable[int]
) -> None:
    """Give back what ``allocate`` booked."""
    memory = ask.memory_on(shape.memory_mib)
    cores = min(ask.cores_percent, 100)
    for i in indices:
        gpu = gpus[i]
        gpus[i] = GPUUsage(gpu.memory_mib - memory, gpu.cores_percent - cores, gpu.slots - 1)


def fits_fresh_cell(ask: GPUAsk, shape: CellShape) -> bool:
    """Could an empty cell of ``shape`` ever host ``ask``?"""
    return ask.gpu_count <= shape.gpus and choose_gpus([EMPTY] * shape.gpus, shape, ask) is not None


def pack_count(asks: Iterable[GPUAsk], shape: CellShape) -> int:
    """Cells of ``shape`` the asks pack into from scratch, by the policy's own packing.

    Used for the oracle and the "demand in cells" timeline, never to decide anything.
    """
    pods = [PendingPod(key=str(i), ask=ask, first_seen=0.0) for i, ask in enumerate(asks)]
    return pack(pods, (), shape).new_cells if pods else 0
