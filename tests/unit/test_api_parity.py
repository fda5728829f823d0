"""Parity with the original operator's API (reference §1.1/§1.2): every path it served exists.

The list below is transcribed from the reference tables, not derived from our models, so a
renamed or dropped field fails here even if the models and the CRD agree with each other.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpucellpool.api import crdgen

SPEC_PATHS = """
replicas cell cell.provisioner cell.guestTemplate cell.gpu.count cell.gpu.backend
cell.gpu.dra.resourceClaimTemplateName cell.gpu.dra.resourceClaimName cell.gpu.dra.requestName
cell.gpu.dra.tier cell.gpu.dra.hugepages cell.gpu.native.gpuProfileRef.name cell.spreadPolicy
cell.nodeIPFrom cell.clusterAPI.clusterName cell.clusterAPI.version
cell.clusterAPI.bootstrapConfigTemplateRef.apiGroup
cell.clusterAPI.bootstrapConfigTemplateRef.kind cell.clusterAPI.bootstrapConfigTemplateRef.name
bootstrap.provider bootstrap.joinSecretRef.name bootstrap.joinSecretKey bootstrap.hostname
bootstrap.readyTimeout workloadCluster.kubeconfigSecretRef.name workloadCluster.key
workloadCluster.node.labels workloadCluster.node.annotations workloadCluster.node.taints
capacity.provider capacity.hami.mode capacity.hami.expectedDevicesPerCell
capacity.hami.deviceClassName capacity.readyTimeout autoscaling.enabled autoscaling.minReplicas
autoscaling.maxReplicas autoscaling.stabilizationWindow autoscaling.scaleDown
autoscaling.scaleDownStabilizationWindow deletion.policy deletion.drainTimeout updatePolicy.type
""".split()  # noqa: SIM905 - transcribed from the reference table

STATUS_PATHS = """
observedGeneration replicas readyCells creatingCells drainingCells failedCells desiredReplicas
demand.pendingRequests demand.satisfiableByOneCell demand.lastObserved cellDeviceShape.model
cellDeviceShape.memoryMiB cellDeviceShape.corePercent cellDeviceShape.lastObserved
lastScaleUpTime lastScaleDownTime demandFreeSince physicalCapacity.gpus
physicalCapacity.freeGPUsInCluster physicalCapacity.model workloadCapacity.provider
workloadCapacity.mode workloadCapacity.gpuDevices workloadCapacity.homogeneous
workloadCapacity.gpuMemory.total workloadCapacity.gpuMemory.allocated
workloadCapacity.gpuMemory.available workloadCapacity.gpuCompute.total
workloadCapacity.byModel.model workloadCapacity.byModel.devices workloadCapacity.byModel.memory
workloadCapacity.byModel.compute workloadCapacity.lastObserved cells.name cells.index cells.phase
cells.guestUID cells.hostNode cells.devices cells.nodeName cells.nodeReady cells.capacityDevices
cells.message cells.reason cells.failureCount cells.readyOnce cells.templateHash
cells.lastTransitionTime conditions.type conditions.status conditions.reason conditions.message
conditions.lastTransitionTime conditions.observedGeneration
""".split()  # noqa: SIM905 - transcribed from the reference table

# Enums exactly as the original served them.
ENUMS = {
    "spec.cell.provisioner": ["SwiftGuest", "ClusterAPI"],
    "spec.cell.gpu.backend": ["DRA", "Native"],
    "spec.cell.gpu.dra.tier": ["pcie"],
    "spec.cell.spreadPolicy": ["Pack", "Spread"],
    "spec.bootstrap.provider": ["Opaque"],
    "spec.bootstrap.hostname": ["CellName", "None"],
    "spec.capacity.provider": ["HAMi"],
    "spec.capacity.hami.mode": ["DevicePlugin", "DRA"],
    "spec.autoscaling.scaleDown": ["Manual", "Auto"],
    "spec.deletion.policy": ["Drain", "Force"],
    "spec.updatePolicy.type": ["Manual", "RollingUpdate"],
    "status.cells.phase": [
        "Pending", "AllocatingGPU", "GuestProvisioning", "Booting", "Joining",
        "AwaitingGPUCapacity", "Ready", "Draining", "Deleting", "Failed",
    ],
}  # fmt: skip


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(crdgen.render_crd())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


SCHEMA = _schema()


def _node(path: str) -> dict[str, Any]:
    node = SCHEMA
    for part in path.split("."):
        if node.get("type") == "array":
            node = node["items"]
        node = node["properties"][part]
    return node


@pytest.mark.parametrize("path", [f"spec.{p}" for p in SPEC_PATHS])
def test_every_original_spec_field_is_served(path: str) -> None:
    assert _node(path)


@pytest.mark.parametrize("path", [f"status.{p}" for p in STATUS_PATHS])
def test_every_original_status_field_is_served(path: str) -> None:
    assert _node(path)


@pytest.mark.parametrize(("path", "values"), ENUMS.items())
def test_enums_match_the_original(path: str, values: list[str]) -> None:
    assert _node(path)["enum"] == values


def test_original_minimums() -> None:
    assert _node("spec.replicas")["minimum"] == 0
    assert _node("spec.autoscaling.minReplicas")["minimum"] == 0
    assert _node("spec.autoscaling.maxReplicas")["minimum"] == 1
    assert _node("spec.capacity.hami.expectedDevicesPerCell")["minimum"] == 1
    assert (_node("spec.cell.clusterAPI.clusterName")["minLength"],
            _node("spec.cell.clusterAPI.clusterName")["maxLength"]) == (1, 63)  # fmt: skip
