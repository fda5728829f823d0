"""A DRA-mode cell's HAMi capacity, in the same shape as the device-plugin annotation's.

Why this module exists: ``status.workloadCapacity``, ``CapacityAvailable``, the cell's
"GPU advertised" gate and the learned device shape are all computed from ``CellCapacity``
(``fsm.capacity``). In HAMi's DRA mode the same facts live in the cell Node's ResourceSlice
(devices with ``memory``/``cores`` capacities) and in the allocated ResourceClaims
(``autoscaler.policy.hami_dra`` reads both); this module maps them onto ``Device`` and
``CellCapacity`` so everything downstream is mode-agnostic, and says what HAMi left on each
Node for ``CapacityProviderReady`` (``fsm.provider_health``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.policy.hami_dra import (
    DraAllocation,
    DraDevice,
    claim_allocations,
    slice_devices,
)
from provisioner.fsm.capacity import CellCapacity, Device
from provisioner.fsm.provider_health import Registration


@dataclass(frozen=True, slots=True)
class DraReading:
    """One pass's reading of a workload cluster's HAMi slices and claims."""

    devices: Mapping[str, tuple[DraDevice, ...]]
    allocations: Mapping[str, tuple[DraAllocation, ...]]
    skipped: tuple[str, ...] = ()


def read_dra(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]], device_class: str
) -> DraReading:
    devices, skipped = slice_devices(slices)
    return DraReading(devices, claim_allocations(claims, devices, device_class), skipped)


def dra_cell_capacity(reading: DraReading, node: str) -> CellCapacity:
    """The Node's HAMi devices and what claims hold on them; devices None when no slice."""
    mine = reading.devices.get(node)
    if mine is None:
        return CellCapacity(None)
    uuid_of = {d.name: d.uuid for d in mine}
    held = tuple(
        (uuid_of.get(a.device, a.device), a.memory_mib, a.cores)
        for a in reading.allocations.get(node, ())
    )
    return CellCapacity(
        tuple(Device(d.memory_mib, d.cores, d.model, d.uuid) for d in mine),
        sum(a[1] for a in held),
        sum(a[2] for a in held),
        held,
    )


def dra_devices(slices: Iterable[Mapping[str, Any]], node: str) -> int | None:
    """HAMi devices the Node's slices publish (the cell's "GPU advertised" count); None: none."""
    devices = slice_devices(slices)[0].get(node)
    return len(devices) if devices else None


def dra_registration(reading: DraReading, node: str) -> tuple[Registration, str]:
    """What HAMi's kubelet plugin published for the Node, and why it cannot be read."""
    devices = reading.devices.get(node)
    if devices:
        return Registration.DETECTED, ""
    if devices is not None:
        why = next((s for s in reading.skipped if node in s), "no usable device")
        return Registration.UNPARSEABLE, why
    return Registration.MISSING, ""
