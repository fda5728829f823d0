"""Reading capacity: KubeSwift's physical GPU ledger (pre-flight) and HAMi room on Ready cells.

Why this module exists: the membership plan must not create more cells than there are free
physical GPUs. Native pools read the cluster-scoped ``SwiftGPUNode`` objects; DRA pools read
``ResourceSlices`` and ``ResourceClaims`` (resource.k8s.io/v1). A missing API (404) or any read
failure is "unknown" (None), which never blocks creation and is reported as such. The HAMi
side reads each Ready cell's Node registration and its GPU pods (``fsm.capacity`` judges,
``fsm.pool_capacity`` turns the same readings into ``status.workloadCapacity``) - in HAMi's
DRA mode the ResourceSlices and ResourceClaims instead (``fsm.dra_capacity``) - and, over every
joined cell, HAMi's health for ``CapacityProviderReady`` (``fsm.provider_health``).

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
from provisioner.fsm.dra_capacity import DraReading, dra_cell_capacity, dra_registration, read_dra
from provisioner.fsm.inventory import dra_free, native_free
from provisioner.fsm.observations import HAMI_REGISTER_ANNOTATION
from provisioner.fsm.pool_capacity import workload_capacity
from provisioner.fsm.provider_health import (
    DraCluster,
    NodeRegistration,
    Registration,
    annotation_registration,
    provider_condition,
)
from provisioner.fsm.vocabulary import CellReason
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
DEVICE_CLASS = KINDS["DeviceClass"]
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
REGISTRATION_GRACE_SHARE = 0.5
"""``HAMiNotDetected`` after this share of ``capacity.readyTimeout``: a warning while the cell
still has the rest of its budget (the cell fails with ``GPUNotAdvertised`` at the end of it)."""


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
    pass, None when it could not be read (the stored one is kept); ``provider``:
    ``CapacityProviderReady``, None when not judged (workload cluster unreachable)."""

    condition: tuple[str, str, str]
    capacity: WorkloadCapacity | None
    provider: tuple[str, str, str] | None = None


def _is_dra(pool: GPUCellPool) -> bool:
    return pool.spec.capacity.hami is not None and pool.spec.capacity.hami.mode == "DRA"


def _joined(rows: Iterable[CellStatus]) -> list[CellStatus]:
    """Cells whose Node joined and is Ready: HAMi should register there (also a cell that
    failed for want of it, while its Node is still there)."""
    return [
        r
        for r in rows
        if r.phase is CellPhase.READY
        or (r.phase is CellPhase.AWAITING_GPU_CAPACITY and r.node_ready)
        or (_gave_up(r) and r.node_ready)
    ]


def _gave_up(row: CellStatus) -> bool:
    return row.phase is CellPhase.FAILED and row.reason == CellReason.GPU_NOT_ADVERTISED


async def _node_reading(
    workload: KubeApi, row: CellStatus, dra: DraReading | None
) -> tuple[CellCapacity | None, Registration, str]:
    """A joined cell's capacity (None: unreadable) and what HAMi registered on its Node."""
    name = row.node_name or row.name
    try:
        node = await workload.get(KINDS["Node"], None, name)
        pods = await gpu_pods_on_node(workload, name) if dra is None else []
    except KubeError:
        return None, Registration.MISSING, ""
    if dra is not None:
        return dra_cell_capacity(dra, name), *dra_registration(dra, name)
    register = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(
        HAMI_REGISTER_ANNOTATION
    )
    registration = annotation_registration(register)
    return cell_capacity(register, pods, ALLOCATED_ANNOTATION), registration, ""


async def _dra_cluster(
    workload: KubeApi, device_class: str, recorder: ProvisionerRecorder
) -> tuple[DraReading | None, DraCluster]:
    """HAMi's slices and claims, and whether the DRA API and the DeviceClass are there."""
    try:
        slices = await workload.list(RESOURCE_SLICE)
        claims = await workload.list(RESOURCE_CLAIM)
        present = await workload.get(DEVICE_CLASS, None, device_class) is not None
    except NotFound:
        return None, DraCluster(False, device_class, None)
    except KubeError:
        recorder.scrape_error(SCRAPE_CAPACITY)
        return None, DraCluster(None, device_class, None)
    return read_dra(slices, claims, device_class), DraCluster(True, device_class, present)


async def read_capacity(
    workload: KubeApi | None,
    pool: GPUCellPool,
    rows: Iterable[CellStatus],
    desired: int,
    now: float,
    recorder: ProvisionerRecorder = NULL_RECORDER,
) -> HamiReading:
    """HAMi capacity of the Ready cells (the condition and the status object) and the
    provider's health over every joined cell."""
    rows = list(rows)
    ready = [r for r in rows if r.phase is CellPhase.READY]
    if workload is None:
        if ready:
            return HamiReading(("Unknown", "Unknown", "workload cluster unreachable"), None)
        return HamiReading(capacity_condition([], desired), workload_capacity([], _mode(pool), now))
    hami = pool.spec.capacity.hami
    dra, cluster = None, None
    if hami is not None and _is_dra(pool):
        dra, cluster = await _dra_cluster(workload, hami.device_class_name or "", recorder)
    joined = {r.name: (r, await _node_reading(workload, r, dra)) for r in _joined(rows)}
    unreadable = cluster is not None and dra is None  # DRA objects not read (counted above)
    read = [None if unreadable else joined[r.name][1][0] for r in ready]
    if not unreadable and any(c is None for c in read):
        recorder.scrape_error(SCRAPE_CAPACITY)
    cells = [c if c is not None else CellCapacity(None) for c in read]
    nodes = [
        NodeRegistration(r.node_name or r.name, reg, _since(r, now), why)
        for r, (_, reg, why) in joined.values()
    ]
    grace = pool.spec.capacity.ready_timeout.seconds * REGISTRATION_GRACE_SHARE
    provider = provider_condition(nodes, now, grace, cluster)
    capacity = workload_capacity(cells, _mode(pool), now)
    return HamiReading(capacity_condition(cells, desired), capacity, provider)


def _mode(pool: GPUCellPool) -> str:
    return "DRA" if _is_dra(pool) else "DevicePlugin"


def _since(row: CellStatus, now: float) -> float:
    """Since when the cell's Node has waited for HAMi (a cell that gave up: long enough)."""
    if _gave_up(row):
        return float("-inf")
    return row.last_transition_time.timestamp() if row.last_transition_time else now
