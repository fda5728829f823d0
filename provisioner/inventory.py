"""Reading capacity: KubeSwift's physical GPU ledger (pre-flight) and HAMi room on Ready cells.

Why this module exists: the membership plan must not create more cells than there are free
physical GPUs. Native pools read the cluster-scoped ``SwiftGPUNode`` objects; DRA pools read
``ResourceSlices`` and ``ResourceClaims`` (resource.k8s.io/v1). A missing API (404) or any read
failure is "unknown" (None), which never blocks creation and is reported as such. The HAMi
side reads each Ready cell's Node registration and its GPU pods (``fsm.capacity`` judges).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.spec import GPUBackend
from gpucellpool.api.status import CellPhase, CellStatus
from provisioner.fsm.capacity import CellCapacity, allocated, capacity_condition, register_devices
from provisioner.fsm.inventory import dra_free, native_free
from provisioner.fsm.observations import HAMI_REGISTER_ANNOTATION
from provisioner.kube import KINDS, Kind, KubeApi, KubeError
from provisioner.workload import gpu_pods_on_node

SWIFT_GPU_NODE = Kind("gpu.kubeswift.io/v1alpha1", "SwiftGPUNode", "swiftgpunodes", False)
RESOURCE_SLICE = Kind("resource.k8s.io/v1", "ResourceSlice", "resourceslices", False)
RESOURCE_CLAIM = Kind("resource.k8s.io/v1", "ResourceClaim", "resourceclaims")
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"


async def free_physical_gpus(infra: KubeApi, pool: GPUCellPool) -> int | None:
    """Free physical GPUs cluster-wide for this pool's backend, or None when unknown."""
    try:
        if pool.spec.cell.gpu.backend is GPUBackend.NATIVE:
            return native_free(await infra.list(SWIFT_GPU_NODE))
        slices = await infra.list(RESOURCE_SLICE)
        claims = await infra.list(RESOURCE_CLAIM) if slices else []
        return dra_free(slices, claims)
    except KubeError:
        return None


async def _cell_capacity(workload: KubeApi, node_name: str) -> CellCapacity:
    try:
        node = await workload.get(KINDS["Node"], None, node_name)
        annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
        devices = register_devices(annotations.get(HAMI_REGISTER_ANNOTATION))
        mem, cores = allocated(await gpu_pods_on_node(workload, node_name), ALLOCATED_ANNOTATION)
    except KubeError:
        return CellCapacity(None)
    return CellCapacity(devices, mem, cores)


async def capacity_available(
    workload: KubeApi | None, rows: Iterable[CellStatus], desired: int
) -> tuple[str, str, str]:
    """The ``CapacityAvailable`` condition from the Ready cells' HAMi records."""
    ready = [r for r in rows if r.phase is CellPhase.READY]
    if workload is None and ready:
        return "Unknown", "Unknown", "workload cluster unreachable"
    cells = [await _cell_capacity(workload, r.node_name or r.name) for r in ready if workload]
    return capacity_condition(cells, desired)
