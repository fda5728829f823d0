"""Status conditions in the metav1.Condition shape, and the names this operator uses.

Why this module exists: conditions are how ``kubectl describe`` answers "why?". Their shape is
the upstream metav1.Condition (so generic tooling such as ``kubectl wait --for=condition``
works) and their type and reason names are part of the API: the original operator's names are
kept, ours are added, and everything that sets a condition takes the names from here.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from gpucellpool.api.base import KubeModel, Timestamp


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionType(StrEnum):
    """Condition types on a GPUCellPool (the original's set, then ours)."""

    READY = "Ready"
    """Provisioner: every desired cell is Ready (False while unreachable or while the capacity
    provider is not ready, with that reason)."""
    WORKLOAD_CLUSTER_REACHABLE = "WorkloadClusterReachable"
    """Provisioner: the workload cluster answered with the pool's kubeconfig Secret (reasons
    Connected, CredentialInvalid, Forbidden, Unreachable)."""
    CAPACITY_PROVIDER_READY = "CapacityProviderReady"
    """Provisioner: HAMi registers the cells' GPUs (reasons below)."""
    PHYSICAL_GPUS_AVAILABLE = "PhysicalGPUsAvailable"
    """Provisioner: the infrastructure cluster has free physical GPUs for the cells being
    created (False: InsufficientPhysicalGPU)."""
    CAPACITY_AVAILABLE = "CapacityAvailable"
    """Provisioner: HAMi room is left on the Ready cells (CapacityFree, Saturated,
    Heterogeneous, ScaledToZero, Unknown)."""
    PROGRESSING = "Progressing"
    """Provisioner: cells are being created or drained; False with the stall reason when
    membership cannot go on (e.g. InsufficientPhysicalGPU, EvictionBlocked)."""
    SCALING_ACTIVE = "ScalingActive"
    """Autoscaler: demand was readable; the reason is the last decision's (ScaledUp, Stabilizing,
    AtMaxReplicas, ...). Present only when autoscaling is enabled."""
    UPDATED = "Updated"
    """Provisioner: every non-draining cell runs the current guestTemplate (AllCellsCurrent,
    TemplateChanged, RollingUpdate, UpdateBlocked)."""
    CELL_DRAIN_REQUESTED = "CellDrainRequested"
    """Provisioner: True while an infrastructure Node hosting a cell is cordoned or drained
    (those cells are drained and replaced elsewhere, within the disruption budget)."""
    METRICS_AVAILABLE = "MetricsAvailable"
    """Ours (autoscaler): Prometheus allocation and measured use are fresh (False freezes
    usage-driven scale-down; NotConfigured without spec.autoscaling.prometheus)."""
    DEGRADED = "Degraded"
    """Ours (provisioner): the stored pool breaks an admission rule, so the provisioner
    launches nothing."""
    CELL_SHAPE_KNOWN = "CellShapeKnown"
    """Ours (autoscaler): where the cell shape the autoscaler packs with comes from. True with
    reason Learned (a Ready cell's HAMi capacity), Remembered (status.cellDeviceShape, no cell
    Ready) or Declared (spec.autoscaling.cellShape, no cell has reported one); False with reason
    CellShapeUnknown (none of those: no cell is added above minReplicas)."""


class CapacityProviderReason(StrEnum):
    """Reasons of ``CapacityProviderReady`` (the original's five, plus AwaitingRegistration)."""

    HAMI_DETECTED = "HAMiDetected"
    """HAMi registered devices on a Ready cell Node (annotation, or DRA ResourceSlice)."""
    HAMI_NOT_DETECTED = "HAMiNotDetected"
    """A Ready cell Node has carried no HAMi registration for longer than the grace."""
    REGISTRATION_UNPARSEABLE = "RegistrationUnparseable"
    """A cell Node's HAMi registration (annotation or slice devices) cannot be read."""
    DRA_FEATURE_GATE_MISSING = "DRAFeatureGateMissing"
    """DRA mode: the workload cluster does not serve resource.k8s.io/v1."""
    DRA_DEVICE_CLASS_MISSING = "DRADeviceClassMissing"
    """DRA mode: the pool's HAMi DeviceClass does not exist in the workload cluster."""
    AWAITING_REGISTRATION = "AwaitingRegistration"
    """Ours (status Unknown): no Ready cell Node yet, or one still inside the grace."""


class CellShapeReason(StrEnum):
    """Reasons of ``CellShapeKnown``: where the cell shape the autoscaler packs with came from,
    first that applies (``autoscaler.policy.config.choose_shape``)."""

    LEARNED = "Learned"
    """A cell is Ready: the shape its HAMi capacity gave (status.cellDeviceShape)."""
    REMEMBERED = "Remembered"
    """No cell is Ready: the last shape a cell gave (status.cellDeviceShape, never cleared)."""
    DECLARED = "Declared"
    """No cell has ever given one: spec.autoscaling.cellShape."""
    UNKNOWN = "CellShapeUnknown"
    """None of those (status False): no cell is added above minReplicas."""


class Condition(KubeModel):
    """One observation of an aspect of the pool (metav1.Condition)."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    """Type of condition in CamelCase, e.g. Ready or ScalingActive."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation the condition was set from."""
    last_transition_time: Timestamp
    """When the status last changed (not when the reason or message last changed)."""
    reason: str = Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    """Machine-readable CamelCase reason for the last transition."""
    message: str = Field(default="", max_length=32768)
    """Human-readable detail."""


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    """The condition of the given type, or None."""
    return next((c for c in conditions if c.type == type_), None)
