"""The observed state of a GPUCellPool: counts, capacity, per-cell rows, the last decision.

Why this module exists: status is the operator's public explanation of itself. Every field the
original published (reference §1.2) keeps its name and meaning, so dashboards and scripts keep
working; we add ``selector`` (so the scale subresource serves a label selector to HPA-style
tools) and ``lastDecision`` (the answer to "why did it scale?" in ``kubectl get``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field

from gpucellpool.api.base import NAME_MAX, KubeModel, Timestamp
from gpucellpool.api.conditions import Condition, find_condition

MAX_CELLS = 10000
MAX_PLAN_REJECTIONS = 256  # status.planRejections holds the first ones (a plan can name more)
MAX_POLICY_MEMORY_CHARS = 262144  # status.policyMemory: the autoscaler trims its samples to fit
CellName = Annotated[str, Field(max_length=NAME_MAX)]
ATOMIC = ConfigDict(json_schema_extra={"x-kubernetes-map-type": "atomic"})
"""For a status object one writer always sends whole: the apiserver then tracks it as one
managed-fields entry instead of one per field (every write of the pool pays for the size of
``metadata.managedFields``), and a forced apply replaces it whole."""


class CellPhase(StrEnum):
    PENDING = "Pending"
    ALLOCATING_GPU = "AllocatingGPU"
    GUEST_PROVISIONING = "GuestProvisioning"
    BOOTING = "Booting"
    JOINING = "Joining"
    AWAITING_GPU_CAPACITY = "AwaitingGPUCapacity"
    READY = "Ready"
    DRAINING = "Draining"
    DELETING = "Deleting"
    FAILED = "Failed"


PRE_GPU_PHASES: frozenset[CellPhase] = frozenset({CellPhase.PENDING, CellPhase.ALLOCATING_GPU})
"""Phases before the guest holds its GPU: the physical ledger still counts that GPU as free
(the provisioner and the autoscaler both subtract these cells from status.physicalCapacity)."""


class CellStatus(KubeModel):
    """One cell's row."""

    name: str = Field(max_length=NAME_MAX)
    """Cell name, <pool>-<index>; also the guest, Machine and Node name."""
    index: int = Field(ge=0)
    """Cell index (lowest free non-negative integer at creation)."""
    phase: CellPhase
    """Lifecycle phase."""
    guest_uid: str | None = Field(default=None, alias="guestUID")
    """UID of the outer object (the incarnation)."""
    host_node: str | None = None
    """Infrastructure node holding the physical GPU."""
    devices: list[str] | None = None
    """PCI addresses of the cell's GPUs."""
    node_name: str | None = None
    """Workload Node name, once it exists."""
    node_ready: bool | None = None
    """Whether the workload Node is Ready."""
    capacity_devices: int | None = None
    """GPUs HAMi advertises on the Node."""
    message: str | None = None
    """Human-readable detail of the phase."""
    reason: str | None = None
    """Machine-readable cause (kept on Failed tombstones)."""
    failure_count: int | None = Field(default=None, ge=0)
    """Failures at this index (survives replacement)."""
    ready_once: bool | None = None
    """This incarnation has been Ready at least once."""
    template_hash: str | None = None
    """Hash of the guestTemplate the cell was built from."""
    last_transition_time: Timestamp | None = None
    """When the phase last changed."""
    creation_time: Timestamp | None = None
    """When this incarnation's outer object (SwiftGuest or Machine) was created. The autoscaler
    orders Booting cells by it: hedged spare boots are cancelled newest first, keeping the
    boots that have run longest (lastTransitionTime moves with every boot phase)."""


class Demand(KubeModel):
    """The last demand read by the autoscaler: written only when autoscaling is on and the
    pending pods could be read (a failed read keeps the previous value)."""

    model_config = ATOMIC

    pending_requests: int = 0
    """Pending GPU pods counted for this pool (its demand selection), including those no fresh
    cell could host."""
    satisfiable_by_one_cell: int = 0
    """Of those, the pods one fresh cell of this pool could host (the cell shape, the Node
    labels and taints)."""
    last_observed: Timestamp | None = None
    """When demand was read."""


class CellDeviceShape(KubeModel):
    """Per-GPU shape learned from a Ready cell's HAMi capacity, written by the provisioner.
    Never cleared, so a pool at minReplicas 0 can scale up from zero cells; it moves when a
    Ready cell reports another shape (e.g. a guestTemplate with another GPU model). The
    autoscaler packs pending pods into cells of this shape (see the CellShapeKnown condition)."""

    model_config = ATOMIC

    model: str | None = None
    """GPU model name, as HAMi reports it."""
    memory_mib: int | None = Field(default=None, alias="memoryMiB")
    """GPU memory per device in MiB."""
    core_percent: int | None = None
    """Compute per device in HAMi core percent."""
    last_observed: Timestamp | None = None
    """When this shape was read from a Ready cell (unchanged while the shape stays the same)."""


class PhysicalCapacity(KubeModel):
    """Outer (infrastructure) GPU capacity; written by the provisioner every pass."""

    model_config = ATOMIC

    gpus: int = 0
    """PCI devices on this pool's cells."""
    free_gpus_in_cluster: int | None = Field(
        default=None, alias="freeGPUsInCluster", json_schema_extra={"nullable": True}
    )
    """Free physical GPUs in the infrastructure cluster, from the SwiftGPUNode ledger (Native)
    or ResourceSlices minus allocated ResourceClaims (DRA); null or absent: unknown."""
    model: str | None = None
    """GPU model as HAMi reports it (the first workloadCapacity.byModel entry)."""


class ResourceTotals(KubeModel):
    """Totals of one resource as Kubernetes quantities (memory in bytes, compute in percent)."""

    total: str | None = None
    """Capacity advertised."""
    allocated: str | None = None
    """Capacity allocated to pods."""
    available: str | None = None
    """Capacity still free."""


class ModelCapacity(KubeModel):
    """Capacity of one GPU model."""

    model: str = Field(max_length=NAME_MAX)
    """GPU model name."""
    devices: int = 0
    """Devices of this model."""
    memory: ResourceTotals | None = None
    """Memory totals."""
    compute: ResourceTotals | None = None
    """Compute totals."""


class WorkloadCapacity(KubeModel):
    """Inner (HAMi) capacity of the pool's Ready cells; retained unchanged on a failed read."""

    model_config = ATOMIC

    provider: str | None = None
    """Capacity provider (HAMi)."""
    mode: str | None = None
    """HAMi mode (DevicePlugin or DRA)."""
    gpu_devices: int = 0
    """Healthy devices HAMi advertises on the pool's Ready cells."""
    homogeneous: bool | None = None
    """All devices are the same model."""
    gpu_memory: ResourceTotals | None = None
    """Memory totals (bytes)."""
    gpu_compute: ResourceTotals | None = None
    """Compute totals (percent; only when homogeneous)."""
    by_model: list[ModelCapacity] | None = Field(default=None, max_length=64)
    """Per-model breakdown."""
    last_observed: Timestamp | None = None
    """When capacity was read."""


class Utilization(KubeModel):
    """Measured GPU use of the pool's Ready cells (HAMi's monitor via spec.autoscaling.prometheus),
    as opposed to allocation; written by the autoscaler only when the reading is fresh."""

    model_config = ATOMIC

    gpu_utilization_percent: int | None = Field(default=None, ge=0, le=100)
    """Mean of hami_host_gpu_utilization_ratio over the GPUs read (0-100, rounded)."""
    gpus: int = Field(default=0, ge=0)
    """GPUs the mean is taken over."""
    pods: int = Field(default=0, ge=0)
    """GPU pods on Ready cells that the monitor reports."""
    idle_pods: int = Field(default=0, ge=0)
    """Of those, pods none of whose containers launched a GPU kernel within
    spec.autoscaling.usageIdleWindow."""
    idle_cells: list[CellName] | None = Field(default=None, max_length=MAX_CELLS)
    """Ready or Draining cells whose every pod is idle (with scaleDownOn Usage the Ready ones
    are scale-down candidates, and the Draining ones' pods are not re-homed)."""
    last_observed: Timestamp | None = None
    """When the reading was taken."""


class LastDecision(KubeModel):
    """The autoscaler's most recent decision, including "do nothing"."""

    model_config = ATOMIC

    reason: str = Field(max_length=128)
    """Machine-readable reason (e.g. ScaledUp, Stabilizing, Idle)."""
    message: str = Field(default="", max_length=4096)
    """Human-readable explanation."""
    time: Timestamp | None = None
    """When the decision was made."""
    desired_replicas: int = 0
    """Target cell count."""
    act: bool = True
    """False when the decision was only published (Shadow mode)."""
    cells_needed: int = 0
    """Cells the packed backlog needs beyond free and booting capacity."""
    pending_asks: int = 0
    """Pending pods that counted for this pool."""
    victims: list[CellName] | None = Field(default=None, max_length=MAX_CELLS)
    """On a scale-down: the cells chosen to leave, cheapest to drain first (the provisioner
    drains these rather than the highest indexes)."""
    empty_victims: list[CellName] | None = Field(default=None, max_length=MAX_CELLS)
    """Of the victims, those chosen while they ran no pod (spare boots cancelled, unused spares
    retired, empty idle cells scaled down): the provisioner keeps such a victim if a pod runs on
    it by the time it acts (plan rejection VictimInUse) instead of stranding or evicting that
    pod."""


class PlanStep(StrEnum):
    """The step of the autoscaler's plan a rejection is about."""

    TARGET = "Target"
    REMOVE = "Remove"
    CREATE = "Create"


class PlanRejection(KubeModel):
    """One step of the autoscaler's published plan (desiredReplicas, lastDecision.victims) that
    the provisioner did not carry out as planned, and why. Written by the provisioner on each
    pass that checks the plan against fresh state; the autoscaler's next decision reads it (a
    rejected victim is not chosen again before retryAfter)."""

    step: PlanStep
    """Target (the count is outside the spec's bounds: clamped), Remove (a victim) or Create
    (cells the free physical GPUs cannot hold)."""
    cell: CellName | None = None
    """The victim a Remove rejection is about."""
    reason: str = Field(max_length=128)
    """Machine-readable reason: VictimGone, VictimInDrainBackoff, VictimInUse,
    PhysicalGPUExceeded, TargetOutOfBounds or StaleGeneration."""
    message: str = Field(default="", max_length=1024)
    """Human-readable detail."""
    retry_after: Timestamp | None = None
    """When the step may be accepted again (the end of a drain back-off), if known."""


class GPUCellPoolStatus(KubeModel):
    """Observed state of a GPUCellPool."""

    observed_generation: int | None = None
    """The .metadata.generation this status reflects."""
    replicas: int = 0
    """Rows in cells[] (includes Failed tombstones and Draining cells); the scale status."""
    selector: str | None = Field(default=None, max_length=1024)
    """Label selector of this pool's cell Nodes, served by the scale subresource."""
    ready_cells: int = 0
    """Cells in phase Ready."""
    creating_cells: int = 0
    """Cells neither Ready, Failed nor Draining."""
    draining_cells: int = 0
    """Cells being drained."""
    failed_cells: int = 0
    """Cells in phase Failed."""
    desired_replicas: int = 0
    """Output of the scaling decision (spec.replicas when autoscaling is off)."""
    demand: Demand | None = None
    """Last demand read (autoscaler)."""
    cell_device_shape: CellDeviceShape | None = None
    """Remembered per-GPU shape of this pool's cells (provisioner; never cleared)."""
    last_scale_up_time: Timestamp | None = None
    """When the pool last scaled up (autoscaler)."""
    last_scale_down_time: Timestamp | None = None
    """When the pool last removed cells that served (autoscaler; hedged spares given up do not
    count)."""
    demand_free_since: Timestamp | None = None
    """Since when no pending pod has counted for this pool (autoscaler): set the first pass
    demand reads none, cleared when any reappears. Informational: scale-down follows the
    autoscaler's own windows (scaleDown stabilisation, idle time per cell)."""
    physical_capacity: PhysicalCapacity | None = None
    """Outer GPU capacity."""
    workload_capacity: WorkloadCapacity | None = None
    """Inner HAMi capacity."""
    utilization: Utilization | None = None
    """Measured GPU use (only when spec.autoscaling.prometheus is set); see MetricsAvailable."""
    cells: list[CellStatus] | None = Field(
        default=None,
        max_length=MAX_CELLS,
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    """Per-cell rows, one per cell (names unique), ordered by index; the provisioner writes
    the list whole (atomic)."""
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Conditions, keyed by type."""
    last_decision: LastDecision | None = None
    """The autoscaler's most recent decision."""
    policy_memory: str | None = Field(default=None, max_length=MAX_POLICY_MEMORY_CHARS)
    """The autoscaler's memory between decisions, encoded (when and by how much the pool last
    scaled, its recent recommendations, idle times and demand samples), written with its status
    so a restarted or newly elected autoscaler resumes where the last one stopped (autoscaler;
    replaces the earlier ``autoscaler.cells.kubeswift.io/policy-memory`` annotation, still read
    when this is absent). Internal: not meant to be read or edited by hand."""
    plan_rejections: list[PlanRejection] | None = Field(
        default=None, max_length=MAX_PLAN_REJECTIONS
    )
    """Steps of the autoscaler's plan the provisioner rejected on its last check (provisioner;
    empty when the whole plan was accepted or the pool is not autoscaled). A cell in drain
    back-off stays listed (Remove, VictimInDrainBackoff) until its retryAfter, whether or not
    the current plan names it, so the autoscaler does not choose it again meanwhile."""

    def condition(self, type_: str) -> Condition | None:
        """The condition of the given type, or None."""
        return find_condition(self.conditions or [], type_)
