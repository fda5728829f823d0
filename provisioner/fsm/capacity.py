"""The pool's ``CapacityAvailable`` condition: is there HAMi room left on its Ready cells?

Why this module exists: ``Ready`` says the cells exist; a user also wants to see at a glance
that they are full. Pool-wide (not per cell), from HAMi's own records: each Ready cell's
``hami.io/node-nvidia-register`` (healthy devices: memory MiB and cores) and the
``hami.io/vgpu-devices-allocated`` annotation of the pods bound to it (``uuid,type,mem,cores``
per container device). Reasons as in the earlier implementation: ``CapacityFree``,
``Saturated`` (memory or compute fully allocated), ``Heterogeneous`` (devices differ: judged on
memory only), ``Unknown`` (a Ready cell unreadable, or no device advertised), ``ScaledToZero``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_LEGACY_MEM, _LEGACY_CORES, _LEGACY_HEALTH = 2, 3, 6


@dataclass(frozen=True, slots=True)
class CellCapacity:
    """One Ready cell: ``devices`` (memory MiB, cores %) per healthy GPU, None = unreadable."""

    devices: tuple[tuple[int, int], ...] | None
    used_memory_mib: int = 0
    used_cores: int = 0


def register_devices(annotation: str | None) -> tuple[tuple[int, int], ...] | None:
    """Healthy devices of ``hami.io/node-nvidia-register`` (JSON from v2.8, else legacy)."""
    text = (annotation or "").strip()
    if not text:
        return None
    try:
        if text.startswith("["):
            items = json.loads(text)
            return tuple(
                (int(d["devmem"]), int(d["devcore"]))
                for d in items
                if isinstance(d, Mapping) and d.get("health") is True
            )
        fields = [r.split(",") for r in text.split(":") if r.strip()]
        return tuple(
            (int(f[_LEGACY_MEM]), int(f[_LEGACY_CORES]))
            for f in fields
            if f[_LEGACY_HEALTH].strip() == "true"
        )
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def allocated(pods: Iterable[Mapping[str, Any]], annotation: str) -> tuple[int, int]:
    """(memory MiB, cores) HAMi allocated to the non-terminal pods."""
    mem = cores = 0
    for pod in pods:
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        plan = ((pod.get("metadata") or {}).get("annotations") or {}).get(annotation) or ""
        for container in str(plan).split(";"):
            for device in container.split(":"):
                f = device.strip().split(",")
                if len(f) >= 4 and f[0] and f[2].isdigit() and f[3].isdigit():
                    mem, cores = mem + int(f[2]), cores + int(f[3])
    return mem, cores


def capacity_condition(cells: Sequence[CellCapacity], desired: int) -> tuple[str, str, str]:
    """(status, reason, message) of ``CapacityAvailable`` over the pool's Ready cells."""
    if not cells:
        if desired == 0:
            return "False", "ScaledToZero", "the pool has no cell"
        return "Unknown", "Unknown", "no Ready cell yet"
    if any(c.devices is None for c in cells):
        return "Unknown", "Unknown", "HAMi registration of a Ready cell unreadable"
    devices = [d for c in cells for d in c.devices or ()]
    if not devices:
        return "Unknown", "Unknown", "HAMi advertises no healthy device"
    total_mem, total_cores = sum(d[0] for d in devices), sum(d[1] for d in devices)
    used_mem = sum(c.used_memory_mib for c in cells)
    used_cores = sum(c.used_cores for c in cells)
    mixed = len(set(devices)) > 1
    msg = f"{used_mem}/{total_mem} MiB, {used_cores}/{total_cores}% cores allocated"
    if used_mem >= total_mem or (not mixed and used_cores >= total_cores):
        return "False", "Saturated", msg
    return "True", "Heterogeneous" if mixed else "CapacityFree", msg
