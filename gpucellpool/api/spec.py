"""The desired state of a GPUCellPool: what one cell is, how it joins, where it goes.

Why this module exists: these are the fields the original Go operator accepted, with its JSON
names, defaults, enums and meaning (reference §1.1), so that every manifest written for it
still means the same thing here. Cross-field rules that one object can check about itself are
CEL rules attached to the model they constrain; rules that need other objects live in the
admission webhook. The autoscaling block is in ``autoscaling.py``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field

from gpucellpool.api.autoscaling import INT32_MAX, AutoscalingSpec
from gpucellpool.api.base import (
    NAME_MAX,
    KubeModel,
    LocalObjectReference,
    Taint,
    cel,
    validations,
)
from gpucellpool.api.durations import Duration


class Provisioner(StrEnum):
    SWIFT_GUEST = "SwiftGuest"
    CLUSTER_API = "ClusterAPI"


class GPUBackend(StrEnum):
    DRA = "DRA"
    NATIVE = "Native"


class SpreadPolicy(StrEnum):
    PACK = "Pack"
    SPREAD = "Spread"


class DRAGPU(KubeModel):
    """KubeSwift DRA backend: the VFIO GPU comes from a ResourceClaim."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(has(self.resourceClaimTemplateName) && self.resourceClaimTemplateName != '')"
                " != (has(self.resourceClaimName) && self.resourceClaimName != '')",
                "exactly one of resourceClaimTemplateName and resourceClaimName must be set",
            )
        )
    )

    resource_claim_template_name: str | None = Field(default=None, max_length=NAME_MAX)
    """ResourceClaimTemplate that mints one claim per cell (recommended)."""
    resource_claim_name: str | None = Field(default=None, max_length=NAME_MAX)
    """One shared, pre-created ResourceClaim; only for single-cell pools."""
    request_name: str = Field(default="gpu", max_length=63)
    """Name of the device request inside the claim."""
    tier: Literal["pcie"] = "pcie"
    """GPU tier; only pcie is supported."""
    hugepages: Literal["", "1Gi", "2Mi"] = ""
    """Hugepage backing for guest memory ("" means none)."""


class NativeGPU(KubeModel):
    """KubeSwift Native backend: the GPU comes from a SwiftGPUProfile."""

    gpu_profile_ref: LocalObjectReference
    """The SwiftGPUProfile to allocate from."""


class GPUSpec(KubeModel):
    """How each cell gets its physical GPU."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.backend != 'DRA' || (has(self.dra) && !has(self.native))",
                "backend DRA requires dra and forbids native",
            ),
            cel(
                "self.backend != 'Native' || (has(self.native) && !has(self.dra))",
                "backend Native requires native and forbids dra",
            ),
        )
    )

    count: Literal[1] = 1
    """Whole GPUs per cell; only 1 is supported."""
    backend: GPUBackend = GPUBackend.DRA
    """KubeSwift GPU allocation backend."""
    dra: DRAGPU | None = None
    """DRA settings; required when backend is DRA."""
    native: NativeGPU | None = None
    """Native settings; required when backend is Native."""


class TypedLocalReference(KubeModel):
    """A reference to an object of a given group and kind in the pool's namespace."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self.kind.endsWith('Template')", "kind must end with Template", ".kind")
        )
    )

    api_group: str = Field(min_length=1, max_length=NAME_MAX)
    """API group of the template, e.g. bootstrap.cluster.x-k8s.io."""
    kind: str = Field(min_length=1, max_length=63)
    """Kind of the template; must end in Template."""
    name: str = Field(min_length=1, max_length=NAME_MAX)
    """Name of the template."""


class ClusterAPICell(KubeModel):
    """Cluster API settings: each cell is a Machine plus a KubeSwiftMachine."""

    cluster_name: str = Field(min_length=1, max_length=63)
    """The CAPI Cluster the cells join."""
    version: str | None = Field(default=None, max_length=63)
    """Stamped on Machine.spec.version."""
    bootstrap_config_template_ref: TypedLocalReference | None = None
    """Bootstrap config template instantiated per cell (CAPI then owns bootstrap)."""


class CellSpec(KubeModel):
    """The shape of one cell."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(self.provisioner == 'ClusterAPI') == has(self.clusterAPI)",
                "clusterAPI is required when provisioner is ClusterAPI and forbidden otherwise",
                ".clusterAPI",
            )
        )
    )

    provisioner: Provisioner = Provisioner.SWIFT_GUEST
    """Which outer objects a cell becomes: a SwiftGuest, or a CAPI Machine."""
    guest_template: dict[str, Any] = Field(
        json_schema_extra={"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    )
    """Verbatim KubeSwift SwiftGuestSpec for each cell (guestClassRef, imageRef, interfaces, ...).
    Operator-owned fields are rejected by the admission webhook."""
    gpu: GPUSpec
    """Physical GPU per cell."""
    spread_policy: SpreadPolicy = SpreadPolicy.SPREAD
    """Spread adds a soft hostname topology spread to each guest; Pack adds nothing."""
    node_ip_from: str = Field(default="", alias="nodeIPFrom", max_length=63)
    """Name of the guestTemplate interface whose address is the kubelet node IP ("" = primary)."""
    cluster_api: ClusterAPICell | None = Field(default=None, alias="clusterAPI")
    """Cluster API settings; required iff provisioner is ClusterAPI."""


class BootstrapSpec(KubeModel):
    """How a booted guest joins the workload cluster."""

    provider: Literal["Opaque"] = "Opaque"
    """Bootstrap provider; Opaque renders the user's cloud-init template."""
    join_secret_ref: LocalObjectReference | None = None
    """Secret holding the cloud-init join template (tokens: cellName, poolName, nodeLabels,
    nodeIPInterface, expectedGPUs)."""
    join_secret_key: str = Field(default="user-data", max_length=NAME_MAX)
    """Key of the template inside the join Secret."""
    hostname: Literal["CellName", "None"] = "CellName"
    """CellName sets the guest hostname to the cell name; None leaves it to the template."""
    ready_timeout: Duration = Duration("15m")
    """Budget for each of AllocatingGPU, GuestProvisioning, Booting and Joining."""


class NodeSettings(KubeModel):
    """Metadata applied to every cell Node in the workload cluster."""

    labels: dict[str, str] | None = None
    """Labels for cell Nodes (e.g. the HAMi gate gpu: "on")."""
    annotations: dict[str, str] | None = None
    """Annotations for cell Nodes."""
    taints: list[Taint] | None = None
    """Taints merged onto cell Nodes."""


class WorkloadClusterSpec(KubeModel):
    """The cluster the cells join as Nodes."""

    kubeconfig_secret_ref: LocalObjectReference
    """Secret holding a kubeconfig for the workload cluster."""
    key: str = Field(default="value", max_length=NAME_MAX)
    """Key of the kubeconfig inside the Secret (CAPI convention: value)."""
    node: NodeSettings | None = None
    """Labels, annotations and taints for cell Nodes."""


class HAMiSpec(KubeModel):
    """How HAMi accounts for GPU capacity in the workload cluster."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.mode != 'DRA' || (has(self.deviceClassName) && self.deviceClassName != '')",
                "deviceClassName is required when mode is DRA",
                ".deviceClassName",
            )
        )
    )

    mode: Literal["DevicePlugin", "DRA"] = "DevicePlugin"
    """Which HAMi accounting model to read."""
    expected_devices_per_cell: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Devices HAMi must advertise on a cell Node before it is Ready (default: cell.gpu.count)."""
    device_class_name: str | None = Field(default=None, max_length=NAME_MAX)
    """HAMi DRA DeviceClass; required in DRA mode."""


class CapacitySpec(KubeModel):
    """Which inner capacity provider shares each cell's GPU."""

    provider: Literal["HAMi"] = "HAMi"
    """Capacity provider; only HAMi."""
    hami: HAMiSpec | None = None
    """HAMi settings."""
    ready_timeout: Duration = Duration("5m")
    """Budget for AwaitingGPUCapacity."""


class DeletionSpec(KubeModel):
    """What deleting the pool does to its cells."""

    policy: Literal["Drain", "Force"] = "Drain"
    """Drain empties each cell as autoscaling.drain.mode says (WaitForIdle waits for the HAMi
    allocations to end; Evict evicts the pods, PodDisruptionBudgets respected) for up to
    drainTimeout; Force deletes the cells' pods without eviction and tears down at once."""
    drain_timeout: Duration = Duration("10m")
    """After this long from the delete request, pool deletion proceeds anyway."""


class RollingUpdate(KubeModel):
    """How many cells a rolling update may add or take out of service at once."""

    max_surge: int | None = Field(default=None, ge=0, le=100)
    """Cells created above the desired count while stale ones are replaced (absent: 0). Each
    extra cell holds a physical GPU until its stale cell is drained."""
    max_unavailable: int | None = Field(default=None, ge=0, le=100)
    """Ready cells that may be out of service at once (absent: 1). When both are 0, 1 is
    used, so a rollout can always make progress."""


class UpdatePolicy(KubeModel):
    """What happens to cells built from an older guestTemplate."""

    type: Literal["Manual", "RollingUpdate"] = "Manual"
    """RollingUpdate replaces stale cells (idle ones first); Manual only reports them."""
    rolling_update: RollingUpdate | None = None
    """Surge and unavailability limits of RollingUpdate; absent: one cell at a time, no surge
    (maxSurge 0, maxUnavailable 1)."""


class GPUCellPoolSpec(KubeModel):
    """Desired state of a GPUCellPool."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.cell.gpu.dra) || !has(self.cell.gpu.dra.resourceClaimName)"
                " || self.cell.gpu.dra.resourceClaimName == ''"
                " || (self.replicas <= 1 && (!has(self.autoscaling) || !self.autoscaling.enabled"
                " || (has(self.autoscaling.maxReplicas) && self.autoscaling.maxReplicas <= 1)))",
                "a shared cell.gpu.dra.resourceClaimName needs replicas <= 1 and, with"
                " autoscaling enabled, maxReplicas <= 1; use resourceClaimTemplateName",
                ".cell.gpu.dra.resourceClaimName",
            ),
            cel(
                "has(self.cell.clusterAPI) && has(self.cell.clusterAPI.bootstrapConfigTemplateRef)"
                " ? !has(self.bootstrap) || !has(self.bootstrap.joinSecretRef)"
                " : has(self.bootstrap) && has(self.bootstrap.joinSecretRef)",
                "bootstrap.joinSecretRef is required, unless"
                " cell.clusterAPI.bootstrapConfigTemplateRef is set, which forbids it",
                ".bootstrap.joinSecretRef",
            ),
        )
    )

    replicas: int = Field(default=1, ge=0, le=INT32_MAX)
    """Cell count when autoscaling is off; the floor when it is on and minReplicas is unset."""
    cell: CellSpec
    """The shape of one cell."""
    bootstrap: BootstrapSpec | None = None
    """How a cell joins the workload cluster."""
    workload_cluster: WorkloadClusterSpec
    """The cluster cells join as Nodes."""
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)
    """Inner capacity provider (HAMi)."""
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec)
    """Demand-driven sizing (off by default)."""
    deletion: DeletionSpec = Field(default_factory=DeletionSpec)
    """Pool deletion behaviour."""
    update_policy: UpdatePolicy = Field(default_factory=UpdatePolicy)
    """Replacement of cells built from an older guestTemplate."""

    def expected_devices_per_cell(self) -> int:
        """Devices HAMi must advertise per cell (defaults to cell.gpu.count)."""
        hami = self.capacity.hami
        if hami is not None and hami.expected_devices_per_cell is not None:
            return hami.expected_devices_per_cell
        return self.cell.gpu.count
