"""The Cluster API provisioner end to end: a Machine + KubeSwiftMachine per cell, CAPKS the guest.

What this proves: with ``provisioner: ClusterAPI`` the operator creates only CAPI objects (named
after the cell, plain owner references, the drain finalizer on the Machine, the bootstrap Secret
as ``dataSecretName``); the simulated CAPI/CAPKS controllers create the SwiftGuest from them;
the pool reaches Ready through the same three layers, scales, and its deletion leaves nothing.
The deletion is checked twice: when the operator releases the pool finalizer (the pool still
exists, so kube-controller-manager's garbage collector cannot have deleted anything for it: no
Machine, no bootstrap Secret or config of the operator's, no Node, every KubeSwiftMachine
already being deleted) and once CAPKS has finished tearing down the guests it owns.
The shipped sample's mode (``bootstrapConfigTemplateRef``: CAPI's kubeadm bootstrap provider
renders the join data, so the Node registers without the pool's labels) works too: the Node is
proven the cell's by providerID, then labelled.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from provisioner.fsm.identity import CELL_DRAIN_FINALIZER, PoolIdentity
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.capi import provider_id
from simulations.twin.scenario import clusterapi_pool, poll_until
from tests.integration.provisioner_support import (
    FinalizerReleaseWitness,
    Snapshot,
    apis,  # noqa: F401  (fixture)
    cell_nodes,
    live_names,
    names,
    ready_with,
    running_pool,
    status,
)

_NOTHING: dict[str, set[str]] = {
    "Machine": set(),
    "KubeSwiftMachine": set(),
    "Secret": set(),
    "Node": set(),
}


def _capi_leftovers(workload_api: KubeApi, ident: PoolIdentity, *also_deleted: str) -> Snapshot:
    """A ClusterAPI pool's cells: its Machines; the KubeSwiftMachines (and ``also_deleted``
    kinds) not yet being deleted - their finalizers are CAPKS's, so they may still stand while
    CAPKS tears down the guest; the operator's bootstrap Secrets; the cells' Nodes."""

    async def snapshot(infra: KubeApi, namespace: str) -> dict[str, set[str]]:
        sel = f"cells.kubeswift.io/pool-id={ident.pool_id}"
        left = {
            "Machine": await names(infra, "Machine", namespace),
            "KubeSwiftMachine": await live_names(infra, "KubeSwiftMachine", namespace),
            "Secret": await names(infra, "Secret", namespace, sel),
            "Node": await cell_nodes(workload_api, ident),
        }
        for kind in also_deleted:
            left[kind] = await live_names(infra, kind, namespace)
        return left

    return snapshot


async def test_clusterapi_pool_ready_scale_and_delete(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    ident = PoolIdentity(namespace, "capi")
    sel = f"cells.kubeswift.io/pool-id={ident.pool_id}"
    witness = FinalizerReleaseWitness(infra_api, snapshot=_capi_leftovers(workload_api, ident))
    pool_obj = clusterapi_pool("capi", namespace, 1)
    async with running_pool(apis, workload, pool_obj, operator_api=witness) as run:
        pool = await run.converge(ready_with(1), timeout_s=30)
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

        await run.scale(2)
        await run.converge(ready_with(2), timeout_s=30)
        assert await cell_nodes(workload_api, ident) == {"capi-0", "capi-1"}

        await run.delete(timeout_s=30)

        async def nothing_left() -> bool:
            for kind in ("Machine", "KubeSwiftMachine", "SwiftGuest", "SwiftSeedProfile"):
                if await names(infra_api, kind, namespace):
                    return False
            return not await names(infra_api, "Secret", namespace, sel)

        # CAPKS finishes tearing down the guests it owns after the pool is gone.
        await poll_until(nothing_left, timeout_s=20)
    # The operator's own cleanup, seen when it released the pool finalizer.
    assert witness.left == _NOTHING
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
    await infra_api.apply(_kubeadm_config_template(namespace))
    ident = PoolIdentity(namespace, "gpu-capi")
    leftovers = _capi_leftovers(workload_api, ident, "KubeadmConfig")
    witness = FinalizerReleaseWitness(infra_api, snapshot=leftovers)
    foreign_name = f"gpu-capi-foreign-{namespace[-6:]}"
    foreign = await workload_api.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": foreign_name, "labels": {"gpu": "on"}},
            "spec": {"providerID": provider_id(namespace, foreign_name)},
        }
    )
    try:
        async with running_pool(
            apis, workload, _sample_pool(namespace), operator_api=witness
        ) as run:
            pool = await run.converge(ready_with(1), timeout_s=40)
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

            await run.scale(2)
            await run.converge(ready_with(2), timeout_s=40)
            assert await cell_nodes(workload_api, ident) == {"gpu-capi-0", "gpu-capi-1"}
            await run.scale(1)
            await run.converge(ready_with(1), timeout_s=40)
            assert await cell_nodes(workload_api, ident) == {"gpu-capi-0"}

            await run.delete(timeout_s=40)

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
        after = await workload_api.get(KINDS["Node"], None, foreign_name)
        await workload_api.delete(KINDS["Node"], None, foreign_name)
    # The operator's own cleanup, seen when it released the pool finalizer.
    assert witness.left == {**_NOTHING, "KubeadmConfig": set()}
    assert await cell_nodes(workload_api, ident) == set()
    assert await workload_api.get(KINDS["Node"], None, "gpu-capi-0") is None
    assert after is not None  # the foreign Node: same metadata, never written to
    assert after["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
