"""``status.cellDeviceShape``: the per-GPU shape a Ready cell reported, remembered for good.

Why this module exists: the autoscaler packs pending pods into cells of a known shape, and a
pool scaled to zero has no cell to ask. The earlier implementation remembered the shape of the
last live reading in status and never cleared it, so ``minReplicas: 0`` stays recoverable
(reference §1.2, §3.3). The shape is read from the same value as ``status.workloadCapacity``
(``fsm.pool_capacity``: HAMi's registration in DevicePlugin mode, the cell's ResourceSlices in
DRA mode), never parsed again here: the first model with devices (by name, as ``byModel`` is
ordered), its memory and compute divided by its devices. It moves when the observed shape
changes (a guestTemplate repointed at another GPU model, once its cell is Ready); its
``lastObserved`` says when it was learned, and does not move while the shape stays the same.
"""

from __future__ import annotations

from gpucellpool.api.status import CellDeviceShape, WorkloadCapacity
from provisioner.fsm.pool_capacity import MIB, quantity_bytes


def observed_shape(workload: WorkloadCapacity | None) -> tuple[str, int, int] | None:
    """(model, memory MiB, core percent) per GPU of the first model with devices; None when
    nothing was read this pass, no device is advertised or its totals are unreadable."""
    if workload is None:
        return None
    for entry in workload.by_model or ():
        if entry.devices <= 0:
            continue
        memory = quantity_bytes(entry.memory.total if entry.memory else None)
        cores = quantity_bytes(entry.compute.total if entry.compute else None)
        if memory is None or cores is None:
            return None
        return entry.model, memory // MIB // entry.devices, cores // entry.devices
    return None


def device_shape(
    workload: WorkloadCapacity | None, previous: CellDeviceShape | None
) -> CellDeviceShape | None:
    """The shape to store: this pass's reading (stamped with its ``lastObserved``) when it
    differs from ``previous``, else ``previous`` unchanged (never cleared: no reading keeps it)."""
    seen = observed_shape(workload)
    if seen is None:
        return previous
    if previous is not None and (previous.model, previous.memory_mib, previous.core_percent) == (
        seen
    ):
        return previous
    model, memory_mib, core_percent = seen
    return CellDeviceShape(
        model=model or None,
        memory_mib=memory_mib,
        core_percent=core_percent,
        last_observed=workload.last_observed if workload is not None else None,
    )
