"""The pool's ``status.physicalCapacity`` and ``status.workloadCapacity`` from one pass's readings.

Why this module exists: the two capacity objects are part of the status the earlier
implementation published (reference §1.2), and its printer columns (``GPUs``, ``GPUMemFree``),
dashboards and our metrics read them. Their meaning is kept:

* ``physicalCapacity``: ``gpus`` is the sum of PCI devices on this pool's cells (Failed
  tombstones hold none); ``freeGPUsInCluster`` the cluster-wide free count of the physical
  ledger (absent: unknown); ``model`` - as in the earlier implementation - the first model of
  the inner (HAMi) reading, since the outer ledger names no model.
* ``workloadCapacity``: HAMi's view of the Ready cells - devices, memory (bytes) and compute
  (percent; only when every device is alike) as total / allocated / available quantities, a
  per-model breakdown and when it was read. A failed read (a Ready cell's Node, pods or
  registration unreadable, or the workload cluster unreachable) returns None: the stored
  object is kept unchanged, never replaced by zeros. No Ready cell is a reading: all zero.

``replacing`` turns a model into a merge-patch value that *replaces* the stored object (a JSON
merge patch merges nested objects, so a key left out would otherwise survive from the last
write: a stale ``gpuCompute`` after the pool became heterogeneous, a stale free count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpucellpool.api.base import KubeModel
from gpucellpool.api.status import (
    CellStatus,
    ModelCapacity,
    PhysicalCapacity,
    ResourceTotals,
    WorkloadCapacity,
)
from provisioner.fsm.capacity import CellCapacity, Device, homogeneous
from provisioner.fsm.rows import to_time

MIB = 2**20
PROVIDER = "HAMi"
MAX_MODELS = 64  # WorkloadCapacity.by_model max_length
_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", MIB))


def bytes_quantity(n_bytes: int) -> str:
    """Bytes as a Kubernetes quantity in canonical binary-SI form (``8Gi``, ``23028Mi``)."""
    for suffix, unit in _BINARY_SUFFIXES:
        if n_bytes and n_bytes % unit == 0:
            return f"{n_bytes // unit}{suffix}"
    if n_bytes and n_bytes % 1024 == 0:
        return f"{n_bytes // 1024}Ki"
    return str(n_bytes)


def quantity_bytes(quantity: str | None) -> int | None:
    """The inverse of ``bytes_quantity`` (a plain integer or a binary-SI suffix, as written
    there and for compute percent); None for anything else."""
    text = (quantity or "").strip()
    for suffix, unit in (*_BINARY_SUFFIXES, ("Ki", 1024)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], unit
            break
    else:
        scale = 1
    return int(text) * scale if text.isdigit() else None


def _totals(total: int, used: int, unit: Callable[[int], str]) -> ResourceTotals:
    return ResourceTotals(
        total=unit(total), allocated=unit(used), available=unit(max(0, total - used))
    )


def _memory(total_mib: int, used_mib: int) -> ResourceTotals:
    return _totals(total_mib * MIB, used_mib * MIB, bytes_quantity)


def _compute(total_cores: int, used_cores: int) -> ResourceTotals:
    return _totals(total_cores, used_cores, str)


def _by_model(cells: Sequence[CellCapacity]) -> list[ModelCapacity]:
    """Per model: its devices and what HAMi allocated on them (joined by GPU UUID)."""
    devices: dict[str, list[Device]] = {}
    model_of: dict[str, str] = {}
    for cell in cells:
        for d in cell.devices or ():
            devices.setdefault(d.model, []).append(d)
            model_of[d.uuid] = d.model
    used: dict[str, tuple[int, int]] = {}
    for cell in cells:
        for uuid, mem, cores in cell.allocations:
            if uuid in model_of:
                m, c = used.get(model_of[uuid], (0, 0))
                used[model_of[uuid]] = (m + mem, c + cores)
    out = []
    for model in sorted(devices)[:MAX_MODELS]:
        ds, (mem, cores) = devices[model], used.get(model, (0, 0))
        out.append(
            ModelCapacity(
                model=model,
                devices=len(ds),
                memory=_memory(sum(d.memory_mib for d in ds), mem),
                compute=_compute(sum(d.cores for d in ds), cores),
            )
        )
    return out


def workload_capacity(
    cells: Sequence[CellCapacity], mode: str, now_s: float
) -> WorkloadCapacity | None:
    """HAMi capacity of the Ready cells; None when a cell could not be read (keep the stored
    one). The shell does not call this while the workload cluster is unreachable."""
    if any(c.devices is None for c in cells):
        return None
    devices = [d for c in cells for d in c.devices or ()]
    alike = homogeneous(devices)
    total_cores = sum(d.cores for d in devices)
    used_cores = sum(c.used_cores for c in cells)
    return WorkloadCapacity(
        provider=PROVIDER,
        mode=mode,
        gpu_devices=len(devices),
        homogeneous=alike,
        gpu_memory=_memory(
            sum(d.memory_mib for d in devices), sum(c.used_memory_mib for c in cells)
        ),
        gpu_compute=_compute(total_cores, used_cores) if alike else None,
        by_model=_by_model(cells),
        last_observed=to_time(now_s),
    )


def physical_capacity(
    rows: Iterable[CellStatus], free_gpus: int | None, inner: WorkloadCapacity | None
) -> PhysicalCapacity:
    """``inner``: the workload capacity the status will carry (this pass's or the kept one)."""
    models = (inner.by_model or []) if inner is not None else []
    return PhysicalCapacity(
        gpus=sum(len(r.devices or ()) for r in rows),
        free_gpus_in_cluster=free_gpus,
        model=models[0].model if models else None,
    )


def replacing(model: KubeModel) -> dict[str, Any]:
    """``model`` as a merge-patch value that replaces the stored object: every unset field is
    sent as null (deleted), nested objects likewise; lists are replaced whole anyway."""
    out = model.to_api()
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        value = getattr(model, name)
        if value is None:
            out[key] = None
        elif isinstance(value, KubeModel):
            out[key] = replacing(value)
    return out
