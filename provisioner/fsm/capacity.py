"""The pool's ``CapacityAvailable`` condition: is there HAMi room left on its Ready cells?

Why this module exists: ``Ready`` says the cells exist; a user also wants to see at a glance
that they are full. Pool-wide (not per cell), from HAMi's own records: each Ready cell's
``hami.io/node-nvidia-register`` (healthy devices: memory MiB and cores) and the
``hami.io/vgpu-devices-allocated`` annotation of the pods bound to it (``uuid,type,mem,cores``
per container device). Reasons as in the earlier implementation: ``CapacityFree``,
``Saturated`` (memory or compute fully allocated), ``Heterogeneous`` (devices differ: judged on
memory only), ``Unknown`` (a Ready cell unreadable, or no device advertised), ``ScaledToZero``.
The same readings (``CellCapacity``, with each device's model and each allocation's GPU UUID)
are the numbers of ``status.workloadCapacity`` (``pool_capacity``), so the condition and the
status never disagree about what HAMi has.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_LEGACY_UUID, _LEGACY_MEM, _LEGACY_CORES, _LEGACY_TYPE, _LEGACY_HEALTH = 0, 2, 3, 4, 6


@dataclass(frozen=True, slots=True)
class Device:
    """One healthy GPU HAMi registered on a Node."""

    memory_mib: int
    cores: int  # HAMi core percent, 100 per GPU at coreScaling 1
    model: str = ""  # HAMi's ``type`` (the NVML name, maybe prefixed ``NVIDIA-``)
    uuid: str = ""

    @property
    def shape(self) -> tuple[str, int, int]:
        return self.model, self.memory_mib, self.cores


@dataclass(frozen=True, slots=True)
class CellCapacity:
    """One Ready cell: its healthy GPUs (None = unreadable) and what HAMi allocated on it.

    ``allocations``: (GPU UUID, memory MiB, cores) per container device of its live pods."""

    devices: tuple[Device, ...] | None
    used_memory_mib: int = 0
    used_cores: int = 0
    allocations: tuple[tuple[str, int, int], ...] = ()


def register_devices(annotation: str | None) -> tuple[Device, ...] | None:
    """Healthy devices of ``hami.io/node-nvidia-register`` (JSON from v2.8, else legacy)."""
    text = (annotation or "").strip()
    if not text:
        return None
    try:
        if text.startswith("["):
            items = json.loads(text)
            return tuple(
                Device(
                    int(d["devmem"]),
                    int(d["devcore"]),
                    str(d.get("type", "")),
                    str(d.get("id", "")),
                )
                for d in items
                if isinstance(d, Mapping) and d.get("health") is True
            )
        fields = [r.split(",") for r in text.split(":") if r.strip()]
        return tuple(
            Device(int(f[_LEGACY_MEM]), int(f[_LEGACY_CORES]), f[_LEGACY_TYPE], f[_LEGACY_UUID])
            for f in fields
            if f[_LEGACY_HEALTH].strip() == "true"
        )
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def allocations(
    pods: Iterable[Mapping[str, Any]], annotation: str
) -> tuple[tuple[str, int, int], ...]:
    """(GPU UUID, memory MiB, cores) of every container device HAMi gave the non-terminal pods."""
    found: list[tuple[str, int, int]] = []
    for pod in pods:
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        plan = ((pod.get("metadata") or {}).get("annotations") or {}).get(annotation) or ""
        for container in str(plan).split(";"):
            for device in container.split(":"):
                f = device.strip().split(",")
                if len(f) >= 4 and f[0] and f[2].isdigit() and f[3].isdigit():
                    found.append((f[0], int(f[2]), int(f[3])))
    return tuple(found)


def allocated(pods: Iterable[Mapping[str, Any]], annotation: str) -> tuple[int, int]:
    """(memory MiB, cores) HAMi allocated to the non-terminal pods."""
    found = allocations(pods, annotation)
    return sum(a[1] for a in found), sum(a[2] for a in found)


def cell_capacity(
    register: str | None, pods: Iterable[Mapping[str, Any]], annotation: str
) -> CellCapacity:
    """One Ready cell from its Node's register annotation and the GPU pods bound to it."""
    found = allocations(pods, annotation)
    used_mem, used_cores = sum(a[1] for a in found), sum(a[2] for a in found)
    return CellCapacity(register_devices(register), used_mem, used_cores, found)


def homogeneous(devices: Iterable[Device]) -> bool:
    """All devices the same model, memory and cores (vacuously true for none)."""
    return len({d.shape for d in devices}) <= 1


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
    total_mem = sum(d.memory_mib for d in devices)
    total_cores = sum(d.cores for d in devices)
    used_mem = sum(c.used_memory_mib for c in cells)
    used_cores = sum(c.used_cores for c in cells)
    mixed = not homogeneous(devices)
    msg = f"{used_mem}/{total_mem} MiB, {used_cores}/{total_cores}% cores allocated"
    if used_mem >= total_mem or (not mixed and used_cores >= total_cores):
        return "False", "Saturated", msg
    return "True", "Heterogeneous" if mixed else "CapacityFree", msg
