"""Reading capacity: KubeSwift's physical GPU ledger (pre-flight) and HAMi room on Ready cells.

Why this module exists: the membership plan must not create more cells than there are free
physical GPUs. Native pools read the cluster-scoped ``SwiftGPUNode`` objects; DRA pools read
``ResourceSlices`` and ``ResourceClaims`` (resource.k8s.io/v1). A missing API (404) or any read
failure is "unknown" (None), which never blocks creation and is reported as such. The HAMi
side reads each Ready cell's Node registration and its GPU pods (``fsm.capacity`` judges,
``fsm.pool_capacity`` turns the same readings into ``status.workloadCapacity``).

A read that *failed* (the apiserver answered with an error or not at all) is counted on the
pool's ``gpucell_capacity_scrape_errors_total`` (``inventory`` / ``capacity``); an API that is
not served (404), a Node without a HAMi registration or an unreachable workload cluster is a
state the conditions report, not a failed read, so it is not counted (as in the earlier
implementation, which counted capacity read failures but not provider health).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.spec import GPUBackend
from gpucellpool.api.status import CellPhase, CellStatus, WorkloadCapacity
from provisioner.fsm.capacity import CellCapacity, capacity_condition, cell_capacity
from provisioner.fsm.inventory import dra_free, native_free
from provisioner.fsm.observations import HAMI_REGISTER_ANNOTATION
from provisioner.fsm.pool_capacity import workload_capacity
from provisioner.kube import KINDS, Kind, KubeApi, KubeError, NotFound
from provisioner.metrics_port import (
    NULL_RECORDER,
    SCRAPE_CAPACITY,
    SCRAPE_INVENTORY,
    ProvisionerRecorder,
)
from provisioner.workload import gpu_pods_on_node

SWIFT_GPU_NODE = Kind("gpu.kubeswift.io/v1alpha1", "SwiftGPUNode", "swiftgpunodes", False)
RESOURCE_SLICE = Kind("resource.k8s.io/v1", "ResourceSlice", "resourceslices", False)
RESOURCE_CLAIM = Kind("resource.k8s.io/v1", "ResourceClaim", "resourceclaims")
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"


async def free_physical_gpus(
    infra: KubeApi, pool: GPUCellPool, recorder: ProvisionerRecorder = NULL_RECORDER
) -> int | None:
    """Free physical GPUs cluster-wide for this pool's backend, or None when unknown."""
    try:
        if pool.spec.cell.gpu.backend is GPUBackend.NATIVE:
            return native_free(await infra.list(SWIFT_GPU_NODE))
        slices = await infra.list(RESOURCE_SLICE)
        claims = await infra.list(RESOURCE_CLAIM) if slices else []
        return dra_free(slices, claims)
    except NotFound:
        return None  # the ledger's API is not served: unknown, not a failed read
    except KubeError:
        recorder.scrape_error(SCRAPE_INVENTORY)
        return None


@dataclass(frozen=True, slots=True)
class HamiReading:
    """``condition``: ``CapacityAvailable``; ``capacity``: ``status.workloadCapacity`` of this
    pass, None when it could not be read (the stored one is kept)."""

    condition: tuple[str, str, str]
    capacity: WorkloadCapacity | None


async def _cell_capacity(workload: KubeApi, node_name: str) -> CellCapacity | None:
    """None: the Node or its pods could not be read."""
    try:
        node = await workload.get(KINDS["Node"], None, node_name)
        pods = await gpu_pods_on_node(workload, node_name)
    except KubeError:
        return None
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    return cell_capacity(annotations.get(HAMI_REGISTER_ANNOTATION), pods, ALLOCATED_ANNOTATION)


async def read_capacity(
    workload: KubeApi | None,
    pool: GPUCellPool,
    rows: Iterable[CellStatus],
    desired: int,
    now: float,
    recorder: ProvisionerRecorder = NULL_RECORDER,
) -> HamiReading:
    """HAMi capacity of the Ready cells: the condition and the status object."""
    ready = [r for r in rows if r.phase is CellPhase.READY]
    if workload is None and ready:
        return HamiReading(("Unknown", "Unknown", "workload cluster unreachable"), None)
    read = [await _cell_capacity(workload, r.node_name or r.name) for r in ready if workload]
    if any(c is None for c in read):
        recorder.scrape_error(SCRAPE_CAPACITY)
    cells = [c if c is not None else CellCapacity(None) for c in read]
    hami = pool.spec.capacity.hami
    mode = hami.mode if hami is not None else "DevicePlugin"
    return HamiReading(capacity_condition(cells, desired), workload_capacity(cells, mode, now))
