"""Physical GPU pre-flight: how many VFIO GPUs KubeSwift could still hand to a new cell.

Why this module exists: creating a cell when no physical GPU is free only produces a guest stuck
in scheduling (and, after the ready timeout, a Failed cell and a replacement loop). The shell
reads KubeSwift's ledger and this module turns it into one number, or None when it cannot be
known (unknown never blocks creation; it is reported):

* Native backend: cluster-scoped ``SwiftGPUNode`` objects; a node counts only with
  ``status.vfioReady`` true; free = its ``status.gpus[]`` entries not ``allocated``;
* DRA backend: ``ResourceSlices`` of driver ``gpu.kubeswift.io`` (usable unless the device
  attribute ``vfioReady`` is false) minus the devices named by allocated ``ResourceClaims`` of
  that driver; unknown when the driver publishes no slice.

The number is cluster-wide, as in the earlier implementation (not reserved per pool). The
``PhysicalGPUsAvailable`` condition is False only when nothing is free AND a cell is waiting for
a GPU or creation stalled on it; True (``FreeDevices``) otherwise; Unknown when unreadable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

DRA_DRIVER = "gpu.kubeswift.io"


def native_free(nodes: Iterable[Mapping[str, Any]]) -> int:
    free = 0
    for node in nodes:
        status = node.get("status") or {}
        if status.get("vfioReady") is not True:
            continue
        free += sum(1 for gpu in status.get("gpus") or [] if not gpu.get("allocated"))
    return free


def _usable(device: Mapping[str, Any]) -> bool:
    attrs = device.get("attributes") or {}
    ready = attrs.get("vfioReady") or attrs.get(f"{DRA_DRIVER}/vfioReady") or {}
    return ready.get("bool") is not False


def dra_free(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]]
) -> int | None:
    usable: set[tuple[str, str]] = set()
    published = False
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != DRA_DRIVER:
            continue
        published = True
        pool = str((spec.get("pool") or {}).get("name", ""))
        usable |= {(pool, str(d.get("name"))) for d in spec.get("devices") or [] if _usable(d)}
    if not published:
        return None
    allocated: set[tuple[str, str]] = set()
    for claim in claims:
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        for res in results.get("results") or []:
            if res.get("driver") == DRA_DRIVER:
                allocated.add((str(res.get("pool", "")), str(res.get("device", ""))))
    return max(len(usable - allocated), 0)


@dataclass(frozen=True, slots=True)
class PhysicalCondition:
    status: str  # "True", "False" or "Unknown"
    reason: str
    message: str


def physical_condition(free: int | None, waiting_for_gpu: int, stalled: bool) -> PhysicalCondition:
    """``waiting_for_gpu``: cells Pending / AllocatingGPU; ``stalled``: membership stalled on
    InsufficientPhysicalGPU this pass."""
    if free is None:
        return PhysicalCondition("Unknown", "Unknown", "physical GPU inventory unreadable")
    if free == 0 and (waiting_for_gpu > 0 or stalled):
        msg = f"no free physical GPU; {waiting_for_gpu} cell(s) waiting for one"
        return PhysicalCondition("False", "InsufficientPhysicalGPU", msg)
    return PhysicalCondition("True", "FreeDevices", f"{free} free physical GPU(s)")
