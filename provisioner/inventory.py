"""Reading KubeSwift's physical GPU ledger for the pre-flight (``fsm.inventory`` does the math).

Why this module exists: the membership plan must not create more cells than there are free
physical GPUs. Native pools read the cluster-scoped ``SwiftGPUNode`` objects; DRA pools read
``ResourceSlices`` and ``ResourceClaims`` (resource.k8s.io/v1). A missing API (404) or any read
failure is "unknown" (None), which never blocks creation and is reported as such.
"""

from __future__ import annotations

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.spec import GPUBackend
from provisioner.fsm.inventory import dra_free, native_free
from provisioner.kube import Kind, KubeApi, KubeError

SWIFT_GPU_NODE = Kind("gpu.kubeswift.io/v1alpha1", "SwiftGPUNode", "swiftgpunodes", False)
RESOURCE_SLICE = Kind("resource.k8s.io/v1", "ResourceSlice", "resourceslices", False)
RESOURCE_CLAIM = Kind("resource.k8s.io/v1", "ResourceClaim", "resourceclaims")


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
