"""The SwiftGuest provisioner end to end on the two real apiservers with the twin controllers.

What these prove: a pool becomes Ready only when all three layers agree (VM running with an
address, Node Ready, HAMi advertising the GPU); scaling 1 -> 3 -> 1 creates and drains cells
(cordon, wait for idle, Node deleted, finalizer released, guest + seed + Secret gone); pool
deletion drains everything and leaves nothing behind.

The harness runs kube-controller-manager's garbage collector, which deletes whatever still names
a deleted pool as owner: after a pool is gone an empty namespace no longer proves that the
operator cleaned up. So the deletion test looks at the moment the operator releases the pool
finalizer: the pool still exists then, so the collector has not touched its dependents, and
anything left at that moment is the operator's leftover.
"""

from __future__ import annotations

import base64

from provisioner.fsm.identity import (
    CELL_DRAIN_FINALIZER,
    INSTANCE_LABEL,
    POOL_FINALIZER,
    PoolIdentity,
)
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    FinalizerReleaseWitness,
    apis,  # noqa: F401  (fixture)
    cell_nodes,
    cond,
    gpu_pod,
    names,
    ready_with,
    running_pool,
    status,
    swiftguest_leftovers,
)


async def test_pool_reaches_ready_through_all_three_layers(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    async with running_pool(apis, workload, swiftguest_pool("ready", namespace, 1)) as run:
        pool = await run.converge(ready_with(1), timeout_s=30)
    assert pool is not None and POOL_FINALIZER in pool["metadata"]["finalizers"]
    guest = await infra_api.get(KINDS["SwiftGuest"], namespace, "ready-0")
    assert guest is not None
    assert CELL_DRAIN_FINALIZER in guest["metadata"]["finalizers"]
    owner = guest["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "GPUCellPool",
        pool["metadata"]["uid"],
        True,
    )
    assert guest["spec"]["seedProfileRef"] == {"name": "ready-0-seed"}
    # Layer 1: the VM runs with an address (as KubeSwift reports it).
    assert guest["status"]["phase"] == "Running" and guest["status"]["network"]["primaryIP"]
    # Layer 2 + 3: the Node is Ready and HAMi advertises the GPU.
    node = await workload_api.get(KINDS["Node"], None, "ready-0")
    assert node is not None
    labels = node["metadata"]["labels"]
    assert labels[INSTANCE_LABEL] == guest["metadata"]["uid"]
    assert labels["team"] == "ml" and labels["gpu"] == "on"
    assert labels["cells.kubeswift.io/pool-id"] == PoolIdentity(namespace, "ready").pool_id
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "10"
    assert "hami.io/node-nvidia-register" in node["metadata"]["annotations"]
    # The rendered join template carried the identity labels the kubelet registered with.
    secret = await infra_api.get(KINDS["Secret"], namespace, "ready-0-bootstrap")
    assert secret is not None
    rendered = base64.b64decode(secret["data"]["user-data"]).decode()
    assert "cells.kubeswift.io/cell=ready-0" in rendered and "{{" not in rendered
    assert secret["data"]["user-data"] == secret["data"]["value"]
    row = status(pool)["cells"][0]
    assert row["name"] == "ready-0" and row["phase"] == "Ready" and row["reason"] == "CellReady"
    assert row["guestUID"] == guest["metadata"]["uid"]
    # the autoscaler orders Booting cells by their creation (hedged boots: newest cancelled)
    assert row["creationTime"] == guest["metadata"]["creationTimestamp"]
    assert row["nodeName"] == "ready-0" and row["nodeReady"] is True and row["capacityDevices"] == 1
    assert row["devices"] == guest["status"]["gpu"]["devices"] and row["hostNode"]
    assert row["readyOnce"] is True and row["templateHash"]
    assert cond(pool, "WorkloadClusterReachable")["reason"] == "Connected"
    assert cond(pool, "Ready")["reason"] == "AllCellsReady"
    assert cond(pool, "Progressing")["reason"] == "Idle"
    assert status(pool)["desiredReplicas"] == 1 and status(pool)["replicas"] == 1


async def test_scale_one_three_one_drains_removed_cells(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    ident = PoolIdentity(namespace, "scale")
    async with running_pool(apis, workload, swiftguest_pool("scale", namespace, 1)) as run:
        await run.converge(ready_with(1), timeout_s=30)
        first = await infra_api.get(KINDS["SwiftGuest"], namespace, "scale-0")
        assert first is not None
        first_uid = first["metadata"]["uid"]
        await run.scale(3)
        pool = await run.converge(ready_with(3), timeout_s=40)
        assert {c["name"] for c in status(pool)["cells"]} == {"scale-0", "scale-1", "scale-2"}
        assert await cell_nodes(workload_api, ident) == {"scale-0", "scale-1", "scale-2"}
        # A GPU pod on scale-2 keeps it from being deleted: the drain waits for idle.
        pod = gpu_pod(namespace, "busy", "scale-2")
        await workload_api.create(pod)
        await run.scale(1)

        def draining_busy(p: JSON | None) -> bool:
            rows = {c["name"]: c for c in status(p).get("cells") or []}
            return bool(rows.get("scale-2", {}).get("reason") == "WaitingForAllocations")

        await run.converge(draining_busy, timeout_s=20)
        node2 = await workload_api.get(KINDS["Node"], None, "scale-2")
        assert node2 is not None and node2["spec"].get("unschedulable") is True  # cordoned
        assert await infra_api.get(KINDS["SwiftGuest"], namespace, "scale-2") is not None
        # No kubelet runs here: remove the pod at once, as a finished pod would be.
        workload.kubectl("delete", "pod", "busy", "-n", namespace, "--grace-period=0", "--force")
        pool = await run.converge(ready_with(1), timeout_s=30)
    assert [c["name"] for c in status(pool)["cells"]] == ["scale-0"]
    guest0 = await infra_api.get(KINDS["SwiftGuest"], namespace, "scale-0")
    assert guest0 is not None and guest0["metadata"]["uid"] == first_uid  # the survivor untouched
    sel = f"cells.kubeswift.io/pool-id={ident.pool_id}"
    assert await names(infra_api, "SwiftGuest", namespace) == {"scale-0"}
    assert await names(infra_api, "SwiftSeedProfile", namespace, sel) == {"scale-0-seed"}
    assert await names(infra_api, "Secret", namespace, sel) == {"scale-0-bootstrap"}
    assert await cell_nodes(workload_api, ident) == {"scale-0"}


async def test_pool_deletion_drains_and_leaves_nothing_behind(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    ident = PoolIdentity(namespace, "gone")
    witness = FinalizerReleaseWitness(infra_api, snapshot=swiftguest_leftovers(workload_api, ident))
    pool_obj = swiftguest_pool("gone", namespace, replicas=2)
    async with running_pool(apis, workload, pool_obj, operator_api=witness) as run:
        await run.converge(ready_with(2), timeout_s=40)
        await run.delete(timeout_s=30)
    # The operator's own cleanup, seen while the pool (the owner) still existed: the garbage
    # collector cannot have helped yet.
    nothing: dict[str, set[str]] = {
        "SwiftGuest": set(),
        "SwiftSeedProfile": set(),
        "Secret": set(),
        "Node": set(),
    }
    assert witness.left == nothing
    # And after it is gone (now including anything the garbage collector did).
    sel = f"cells.kubeswift.io/pool-id={ident.pool_id}"
    assert await names(infra_api, "SwiftGuest", namespace) == set()
    assert await names(infra_api, "SwiftSeedProfile", namespace) == set()
    assert await names(infra_api, "Secret", namespace, sel) == set()
    assert await cell_nodes(workload_api, ident) == set()
    leases = await names(workload_api, "Lease", "kube-node-lease")
    assert not {"gone-0", "gone-1"} & leases
