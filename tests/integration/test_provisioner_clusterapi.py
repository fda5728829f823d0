"""The Cluster API provisioner end to end: a Machine + KubeSwiftMachine per cell, CAPKS the guest.

What this proves: with ``provisioner: ClusterAPI`` the operator creates only CAPI objects (named
after the cell, plain owner references, the drain finalizer on the Machine, the bootstrap Secret
as ``dataSecretName``); the simulated CAPI/CAPKS controllers create the SwiftGuest from them;
the pool reaches Ready through the same three layers, scales, and its deletion leaves nothing.
The shipped sample's mode (``bootstrapConfigTemplateRef``: CAPI's kubeadm bootstrap provider
renders the join data, so the Node registers without the pool's labels) works too: the Node is
proven the cell's by providerID, then labelled.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from provisioner.clock import SystemClock
from provisioner.fsm.identity import CELL_DRAIN_FINALIZER, PoolIdentity
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import PoolKey, Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.capi import provider_id
from simulations.twin.scenario import Twin, clusterapi_pool, converge, poll_until
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    cell_nodes,
    names,
    ready_with,
    setup_pool,
    status,
)


async def test_clusterapi_pool_ready_scale_and_delete(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    clock = SystemClock()
    key: PoolKey = await setup_pool(infra_api, workload, clusterapi_pool("capi", namespace, 1))
    ident = PoolIdentity(namespace, "capi")
    sel = f"cells.kubeswift.io/pool-id={ident.pool_id}"
    reconciler = Reconciler(infra_api, clock)
    try:
        async with Twin(infra_api, workload_api, clock, namespace):
            pool = await converge(reconciler, key, ready_with(1), timeout_s=30)
            machine = await infra_api.get(KINDS["Machine"], namespace, "capi-0")
            ksm = await infra_api.get(KINDS["KubeSwiftMachine"], namespace, "capi-0")
            guest = await infra_api.get(KINDS["SwiftGuest"], namespace, "capi-0")
            assert machine is not None and ksm is not None and guest is not None
            assert CELL_DRAIN_FINALIZER in machine["metadata"]["finalizers"]
            assert machine["spec"]["bootstrap"] == {"dataSecretName": "capi-0-bootstrap"}
            assert machine["status"]["phase"] == "Running"
            assert machine["status"]["nodeRef"] == {"name": "capi-0"}
            our_ref = machine["metadata"]["ownerReferences"][0]
            assert our_ref["kind"] == "GPUCellPool" and our_ref["controller"] is False
            ksm_owners = {o["kind"]: o for o in ksm["metadata"]["ownerReferences"]}
            assert ksm_owners["Machine"]["controller"] is True  # CAPI holds the controller slot
            assert ksm_owners["GPUCellPool"]["controller"] is False
            assert "ownerReferences" not in guest["metadata"]  # CAPKS sets none
            node = await workload_api.get(KINDS["Node"], None, "capi-0")
            assert node is not None
            assert node["spec"]["providerID"] == provider_id(namespace, "capi-0")
            row = status(pool)["cells"][0]
            assert row["guestUID"] == machine["metadata"]["uid"]  # the Machine is the incarnation
            assert row["phase"] == "Ready" and row["capacityDevices"] == 1

            await infra_api.patch(
                KINDS["GPUCellPool"], namespace, "capi", {"spec": {"replicas": 2}}
            )
            await converge(reconciler, key, ready_with(2), timeout_s=30)
            assert await cell_nodes(workload_api, ident) == {"capi-0", "capi-1"}

            await infra_api.delete(KINDS["GPUCellPool"], namespace, "capi")
            await converge(reconciler, key, lambda p: p is None, timeout_s=30)

            async def nothing_left() -> bool:
                for kind in ("Machine", "KubeSwiftMachine", "SwiftGuest", "SwiftSeedProfile"):
                    if await names(infra_api, kind, namespace):
                        return False
                return not await names(infra_api, "Secret", namespace, sel)

            # CAPKS finishes tearing down the guests it owns after the pool is gone.
            await poll_until(nothing_left, timeout_s=20)
    finally:
        await reconciler.close()
    assert await cell_nodes(workload_api, ident) == set()


SAMPLE = Path(__file__).resolve().parents[2] / "config" / "samples" / "clusterapi.yaml"


def _sample_pool(namespace: str) -> JSON:
    """config/samples/clusterapi.yaml as shipped: CAPI's bootstrap provider owns the join."""
    pool: JSON = yaml.safe_load(SAMPLE.read_text())
    pool["metadata"]["namespace"] = namespace
    assert "bootstrap" not in pool["spec"]  # no joinSecretRef: the operator renders nothing
    return pool


def _kubeadm_config_template(namespace: str) -> JSON:
    registration = {"kubeletExtraArgs": [{"name": "max-pods", "value": "64"}]}
    return {
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": "gpu-cell-join", "namespace": namespace},
        "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": registration}}}},
    }


async def test_clusterapi_sample_with_bootstrap_config_template_owns_nodes_by_provider_id(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    """The sample's mode: the Node registers without the pool's labels (the kubeadm join data
    carries none); it is recognised by providerID, labelled, Ready through all three layers,
    scales 1 -> 2 -> 1, deletion leaves nothing; a foreign Node is never written to."""
    infra_api, workload_api = apis
    clock = SystemClock()
    await infra_api.apply(_kubeadm_config_template(namespace))
    key = await setup_pool(infra_api, workload, _sample_pool(namespace))
    ident = PoolIdentity(namespace, "gpu-capi")
    foreign_name = f"gpu-capi-foreign-{namespace[-6:]}"
    foreign = await workload_api.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": foreign_name, "labels": {"gpu": "on"}},
            "spec": {"providerID": provider_id(namespace, foreign_name)},
        }
    )
    reconciler = Reconciler(infra_api, clock)
    try:
        async with Twin(infra_api, workload_api, clock, namespace):
            pool = await converge(reconciler, key, ready_with(1), timeout_s=40)
            machine = await infra_api.get(KINDS["Machine"], namespace, "gpu-capi-0")
            config = await infra_api.get(KINDS["KubeadmConfig"], namespace, "gpu-capi-0")
            node = await workload_api.get(KINDS["Node"], None, "gpu-capi-0")
            assert machine is not None and config is not None and node is not None
            ref = machine["spec"]["bootstrap"]["configRef"]
            assert (ref["kind"], ref["name"]) == ("KubeadmConfig", "gpu-capi-0")
            # CABPK's Secret (named after the config), copied by CAPI, not the operator's.
            assert machine["spec"]["bootstrap"]["dataSecretName"] == "gpu-capi-0"
            assert not await names(infra_api, "Secret", namespace, "cells.kubeswift.io/cell")
            assert machine["spec"]["providerID"] == provider_id(namespace, "gpu-capi-0")
            assert machine["status"]["nodeRef"] == {"name": "gpu-capi-0"}
            assert node["spec"]["providerID"] == machine["spec"]["providerID"]
            labels = node["metadata"]["labels"]
            assert labels["cells.kubeswift.io/pool-id"] == ident.pool_id
            assert labels["cells.kubeswift.io/cell"] == "gpu-capi-0"
            assert labels["cells.kubeswift.io/cell-index"] == "0"
            assert labels["cells.kubeswift.io/instance"] == machine["metadata"]["uid"]
            assert labels["gpu"] == "on"  # the pool's workloadCluster.node.labels
            row = status(pool)["cells"][0]
            assert row["phase"] == "Ready" and row["capacityDevices"] == 1

            await infra_api.patch(
                KINDS["GPUCellPool"], namespace, "gpu-capi", {"spec": {"replicas": 2}}
            )
            await converge(reconciler, key, ready_with(2), timeout_s=40)
            assert await cell_nodes(workload_api, ident) == {"gpu-capi-0", "gpu-capi-1"}
            await infra_api.patch(
                KINDS["GPUCellPool"], namespace, "gpu-capi", {"spec": {"replicas": 1}}
            )
            await converge(reconciler, key, ready_with(1), timeout_s=40)
            assert await cell_nodes(workload_api, ident) == {"gpu-capi-0"}

            await infra_api.delete(KINDS["GPUCellPool"], namespace, "gpu-capi")
            await converge(reconciler, key, lambda p: p is None, timeout_s=40)

            async def nothing_left() -> bool:
                kinds = ("Machine", "KubeSwiftMachine", "KubeadmConfig", "SwiftGuest")
                for kind in (*kinds, "SwiftSeedProfile"):
                    if await names(infra_api, kind, namespace):
                        return False
                return not await names(
                    infra_api, "Secret", namespace, "cluster.x-k8s.io/cluster-name"
                )

            await poll_until(nothing_left, timeout_s=20)
    finally:
        await reconciler.close()
        after = await workload_api.get(KINDS["Node"], None, foreign_name)
        await workload_api.delete(KINDS["Node"], None, foreign_name)
    assert await cell_nodes(workload_api, ident) == set()
    assert await workload_api.get(KINDS["Node"], None, "gpu-capi-0") is None
    assert after is not None  # the foreign Node: same metadata, never written to
    assert after["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
