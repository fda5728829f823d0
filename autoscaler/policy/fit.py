"""Pool fit: could a *fresh* cell of this pool ever host a pending pod?

Why this module exists: demand is pool-scoped (ARCHITECTURE §3). A pod whose nodeSelector,
required node affinity or untolerated taints rule out this pool's Nodes, or whose HAMi ask is
bigger than one cell, must never make the pool grow, and must never block its scale-down.
The per-GPU check (``gpu_fit``) is also what packing uses, so both speak HAMi's rules
(hami-facts §3.1) and HAMi's reason strings.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.policy.types import (
    CellShape,
    GPUAsk,
    GPUUsage,
    NodeSelectorRequirement,
    NodeTemplate,
    PendingPod,
    PlacementConstraints,
    Taint,
    Toleration,
)

# Reason strings. The first group echoes HAMi (pkg/device/common/common.go); the second is ours.
CARD_SLOTS_EXHAUSTED = "CardTimeSlicingExhausted"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
EXCLUSIVE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_COMPUTE_EXHAUSTED = "CardComputeUnitsExhausted"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT = "AllocatedCardsInsufficientRequest"
NODE_SELECTOR_MISMATCH = "NodeSelectorMismatch"
NODE_AFFINITY_MISMATCH = "NodeAffinityMismatch"
TAINT_NOT_TOLERATED = "TaintNotTolerated"
FITS = "Fits"

HARD_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class FitResult:
    ok: bool
    reason: str
    message: str


def gpu_fit(ask: GPUAsk, used: GPUUsage, shape: CellShape) -> str | None:
    """HAMi's per-GPU Fit for one container ask on one GPU: None if it fits, else the reason.

    Checks run in HAMi's order: slot, memory, cores, exclusive (cores == 100 on a GPU whose
    devcore is 100 needs the GPU unused), then a cores == 0 ask on a GPU whose cores are full.
    """
    if used.slots >= shape.slots:
        return CARD_SLOTS_EXHAUSTED
    if shape.memory_mib - used.memory_mib < ask.memory_on(shape.memory_mib):
        return CARD_INSUFFICIENT_MEMORY
    cores = min(ask.cores_percent, 100)
    if shape.cores_percent - used.cores_percent < cores:
        return CARD_INSUFFICIENT_CORE
    if cores == 100 and shape.cores_percent == 100 and used.slots > 0:
        return EXCLUSIVE_CONFLICT
    if cores == 0 and used.cores_percent >= shape.cores_percent:
        return CARD_COMPUTE_EXHAUSTED
    return None


def add_ask(used: GPUUsage, ask: GPUAsk, shape: CellShape) -> GPUUsage:
    """Usage of a GPU after one container's ask lands on it."""
    return GPUUsage(
        used.memory_mib + ask.memory_on(shape.memory_mib),
        used.cores_percent + min(ask.cores_percent, 100),
        used.slots + 1,
    )


def _compare_int(value: str, values: tuple[str, ...], greater: bool) -> bool:
    if len(values) != 1:
        return False
    try:
        have, want = int(value), int(values[0])
    except ValueError:
        return False
    return have > want if greater else have < want


def _label_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One node-selector requirement against a label set (Kubernetes semantics)."""
    present = req.key in labels
    value = labels.get(req.key, "")
    checks = {
        "In": lambda: present and value in req.values,
        "NotIn": lambda: not present or value not in req.values,
        "Exists": lambda: present,
        "DoesNotExist": lambda: not present,
        "Gt": lambda: present and _compare_int(value, req.values, greater=True),
        "Lt": lambda: present and _compare_int(value, req.values, greater=False),
    }
    check = checks.get(req.operator)
    return bool(check()) if check is not None else False


def _tolerates(tol: Toleration, taint: Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.operator == "Exists":
        return not tol.key or tol.key == taint.key
    return tol.key == taint.key and tol.value == taint.value


def constraints_fit(constraints: PlacementConstraints, template: NodeTemplate) -> FitResult:
    """nodeSelector, required node affinity and taints of the pool's Node template."""
    labels = template.labels
    for key, want in constraints.node_selector.items():
        if labels.get(key) != want:
            have = labels.get(key, "<absent>")
            msg = f"nodeSelector {key}={want} but the pool's Nodes carry {key}={have}"
            return FitResult(False, NODE_SELECTOR_MISMATCH, msg)
    terms = constraints.required_terms
    if terms and not any(all(_label_matches(r, labels) for r in term) for term in terms):
        msg = f"none of {len(terms)} required node-affinity term(s) matches the pool's labels"
        return FitResult(False, NODE_AFFINITY_MISMATCH, msg)
    for taint in template.taints:
        if taint.effect not in HARD_TAINT_EFFECTS:
            continue
        if not any(_tolerates(t, taint) for t in constraints.tolerations):
            msg = f"taint {taint.key}={taint.value}:{taint.effect} is not tolerated"
            return FitResult(False, TAINT_NOT_TOLERATED, msg)
    return FitResult(True, FITS, "constraints match the pool's Node template")


def place_asks(
    asks: Sequence[GPUAsk], gpus: Sequence[GPUUsage], shape: CellShape
) -> tuple[tuple[GPUUsage, ...], str | None]:
    """Place a pod's container asks one after another on one cell's GPUs.

    Each container takes ``gpu_count`` distinct GPUs, least-used first (HAMi's default
    ``spread`` GPU policy). Returns the new per-GPU usage and None, or the unchanged usage and
    the reason of the first container that does not fit.
    """
    current = list(gpus)
    for ask in asks:
        if ask.gpu_count > len(current):
            return tuple(gpus), NODE_INSUFFICIENT_DEVICE
        reasons = [gpu_fit(ask, used, shape) for used in current]
        fitting = [i for i, r in enumerate(reasons) if r is None]
        if len(fitting) < ask.gpu_count:
            if fitting:
                return tuple(gpus), ALLOCATED_CARDS_INSUFFICIENT
            return tuple(gpus), next(r for r in reasons if r is not None)
        fitting.sort(key=lambda i: (_gpu_score(current[i], shape), i))
        for i in fitting[: ask.gpu_count]:
            current[i] = add_ask(current[i], ask, shape)
    return tuple(current), None


def _gpu_score(used: GPUUsage, shape: CellShape) -> float:
    """HAMi's GPU score before placement (equal weights); spread takes the lowest first."""
    return (
        used.slots / shape.slots
        + used.cores_percent / max(shape.cores_percent, 1)
        + used.memory_mib / max(shape.memory_mib, 1)
    )


@functools.lru_cache(maxsize=4096)
def resources_fit(asks: tuple[GPUAsk, ...], shape: CellShape) -> FitResult:
    """Whether the asks fit one empty cell of ``shape``, with HAMi's reason when not.

    Memoised: ``decide`` asks it of every pending pod on every call, over a few distinct asks.
    """
    empty = tuple(GPUUsage() for _ in range(shape.gpus))
    for ask in asks:
        if ask.gpu_count > shape.gpus:
            msg = f"asks {ask.gpu_count} GPUs per container; a cell has {shape.gpus}"
            return FitResult(False, NODE_INSUFFICIENT_DEVICE, msg)
    _, reason = place_asks(asks, empty, shape)
    if reason is None:
        return FitResult(True, FITS, "fits one empty cell")
    worst = max(asks, key=lambda a: (a.memory_on(shape.memory_mib), a.cores_percent))
    msg = (
        f"{reason}: container asks {worst.memory_on(shape.memory_mib)} MiB and "
        f"{worst.cores_percent}% cores per GPU; a cell's GPU has {shape.memory_mib} MiB, "
        f"{shape.cores_percent}% cores and {shape.slots} slots ({shape.gpus} GPU(s))"
    )
    return FitResult(False, reason, msg)


def fits_fresh_cell(pod: PendingPod, shape: CellShape, template: NodeTemplate) -> FitResult:
    """Pool fit: constraints first (a new cell cannot change labels), then HAMi resources."""
    result = constraints_fit(pod.constraints, template)
    if not result.ok:
        return result
    return resources_fit(pod.asks(), shape)
