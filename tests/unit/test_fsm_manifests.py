"""Manifest builders: SwiftGuest overlay and Cluster API objects, field names pinned."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.fsm.identity import CELL_DRAIN_FINALIZER, POOL_ID_LABEL, PoolIdentity
from provisioner.fsm.manifests import capi_objects, swift_guest

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"


def sample(name: str) -> dict[str, Any]:
    pool: dict[str, Any] = yaml.safe_load((SAMPLES / name).read_text())
    pool["metadata"].update(namespace="team-a", uid="pool-uid")
    return pool


DRA = sample("swiftguest-dra.yaml")
CAPI = sample("clusterapi.yaml")


def test_swift_guest_dra() -> None:
    guest = swift_guest(DRA, 1, "abc1234567")
    assert guest["apiVersion"] == "swift.kubeswift.io/v1alpha1" and guest["kind"] == "SwiftGuest"
    meta = guest["metadata"]
    assert meta["name"] == "gpu-dra-1" and meta["namespace"] == "team-a"
    assert meta["labels"]["cells.kubeswift.io/cell-index"] == "1"
    assert meta["labels"][POOL_ID_LABEL] == PoolIdentity("team-a", "gpu-dra").pool_id
    assert meta["annotations"] == {"cells.kubeswift.io/template-hash": "abc1234567"}
    assert meta["finalizers"] == [CELL_DRAIN_FINALIZER]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "cells.kubeswift.io/v1alpha1",
            "kind": "GPUCellPool",
            "name": "gpu-dra",
            "uid": "pool-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = guest["spec"]
    template = DRA["spec"]["cell"]["guestTemplate"]
    for key, value in template.items():
        assert spec[key] == value  # verbatim
    assert spec["seedProfileRef"] == {"name": "gpu-dra-1-seed"}
    assert spec["runPolicy"] == "Always"
    assert spec["migration"] == {"enabled": False}
    assert spec["gpuResourceClaim"] == {
        "resourceClaimTemplateName": "single-vfio-gpu",
        "requestName": "gpu",
        "tier": "pcie",
    }
    assert "gpuProfileRef" not in spec
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["maxSkew"] == 1 and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"]["cells.kubeswift.io/pool"] == "gpu-dra"


def test_template_is_not_mutated() -> None:
    before = copy.deepcopy(DRA)
    swift_guest(DRA, 0, "h")
    assert before == DRA


def with_cell(pool: dict[str, Any], **cell: Any) -> dict[str, Any]:
    out = copy.deepcopy(pool)
    out["spec"]["cell"].update(cell)
    return out


def test_shared_claim_and_hugepages() -> None:
    gpu = {"backend": "DRA", "dra": {"resourceClaimName": "one", "hugepages": "1Gi"}}
    spec = swift_guest(with_cell(DRA, gpu=gpu), 0, "h")["spec"]
    assert spec["gpuResourceClaim"] == {
        "resourceClaimName": "one",
        "requestName": "gpu",
        "tier": "pcie",
        "hugepages": "1Gi",
    }


def test_native_backend() -> None:
    gpu = {"backend": "Native", "native": {"gpuProfileRef": {"name": "gtx1080"}}}
    spec = swift_guest(with_cell(DRA, gpu=gpu), 0, "h")["spec"]
    assert spec["gpuProfileRef"] == {"name": "gtx1080"} and "gpuResourceClaim" not in spec


@pytest.mark.parametrize(
    ("policy", "user_constraints", "expected_count"),
    [("Pack", None, 0), ("Spread", None, 1), ("Spread", [{"maxSkew": 2}], 1)],
)
def test_spread_policy(policy: str, user_constraints: Any, expected_count: int) -> None:
    pool = with_cell(DRA, spreadPolicy=policy)
    if user_constraints is not None:
        pool["spec"]["cell"]["guestTemplate"]["topologySpreadConstraints"] = user_constraints
    spec = swift_guest(pool, 0, "h")["spec"]
    assert len(spec.get("topologySpreadConstraints", [])) == expected_count
    if user_constraints is not None:
        assert spec["topologySpreadConstraints"] == user_constraints


def test_operator_owned_fields_override_the_template() -> None:
    pool = copy.deepcopy(DRA)
    pool["spec"]["cell"]["guestTemplate"].update(
        runPolicy="Stopped",
        migration={"enabled": True, "drainPolicy": "Migrate"},
        gpuProfileRef={"name": "x"},
    )
    spec = swift_guest(pool, 0, "h")["spec"]
    assert spec["runPolicy"] == "Always" and spec["migration"]["enabled"] is False
    assert "gpuProfileRef" not in spec


def test_capi_objects_with_bootstrap_template() -> None:
    template: dict[str, Any] = {
        "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": {}}}}}
    }
    config, ksm, machine = capi_objects(CAPI, 0, "h123456789", template)
    assert config["apiVersion"] == "bootstrap.cluster.x-k8s.io/v1beta2"
    assert config["kind"] == "KubeadmConfig" and config["metadata"]["name"] == "gpu-capi-0"
    assert config["spec"] == {"joinConfiguration": {"nodeRegistration": {}}}
    for obj in (config, ksm, machine):
        assert obj["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "workload"
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner["controller"] is False and owner["blockOwnerDeletion"] is False
    assert ksm["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1alpha1"
    assert ksm["kind"] == "KubeSwiftMachine"
    assert ksm["metadata"]["annotations"]["cells.kubeswift.io/template-hash"] == "h123456789"
    assert ksm["spec"]["backend"] == {
        "type": "SwiftGuest",
        "swiftGuest": {
            "imageRef": "gpu-worker-noble-580",
            "guestClassRef": "gpu-worker-medium",
            "nodeNetworkRef": "node-net",
            "gpu": {
                "resourceClaimTemplateName": "single-vfio-gpu",
                "requestName": "gpu",
                "tier": "pcie",
            },
        },
    }
    assert machine["apiVersion"] == "cluster.x-k8s.io/v1beta2" and machine["kind"] == "Machine"
    assert machine["metadata"]["finalizers"] == [CELL_DRAIN_FINALIZER]
    assert machine["spec"] == {
        "clusterName": "workload",
        "version": "v1.34.1",
        "bootstrap": {
            "configRef": {
                "apiGroup": "bootstrap.cluster.x-k8s.io",
                "kind": "KubeadmConfig",
                "name": "gpu-capi-0",
            }
        },
        "infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "KubeSwiftMachine",
            "name": "gpu-capi-0",
        },
    }


def test_capi_without_bootstrap_template_uses_the_rendered_secret() -> None:
    pool = copy.deepcopy(CAPI)
    del pool["spec"]["cell"]["clusterAPI"]["bootstrapConfigTemplateRef"]
    del pool["spec"]["cell"]["clusterAPI"]["version"]
    pool["spec"]["bootstrap"] = {"joinSecretRef": {"name": "join"}}
    ksm, machine = capi_objects(pool, 2, "h")
    assert machine["spec"]["bootstrap"] == {"dataSecretName": "gpu-capi-2-bootstrap"}
    assert "version" not in machine["spec"]
    assert ksm["metadata"]["name"] == "gpu-capi-2"


def test_capi_primary_network_and_native_gpu() -> None:
    pool = copy.deepcopy(CAPI)
    pool["spec"]["cell"]["guestTemplate"]["interfaces"] = [
        {"name": "node", "primary": True, "networkRef": {"name": "routable"}}
    ]
    pool["spec"]["cell"]["gpu"] = {"backend": "Native", "native": {"gpuProfileRef": {"name": "p"}}}
    template: dict[str, Any] = {"spec": {"template": {"spec": {}}}}
    _, ksm, _ = capi_objects(pool, 0, "h", template)
    guest = ksm["spec"]["backend"]["swiftGuest"]
    assert guest["networkRef"] == "routable" and "nodeNetworkRef" not in guest
    assert guest["gpu"] == {"gpuProfileRef": "p"}


def test_capi_needs_the_template_object_when_referenced() -> None:
    with pytest.raises(ValueError, match="template was not supplied"):
        capi_objects(CAPI, 0, "h")
