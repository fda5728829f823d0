"""The Cluster API provisioner end to end: a Machine + KubeSwiftMachine per cell, CAPKS the guest.

What this proves: with ``provisioner: ClusterAPI`` the operator creates only CAPI objects (named
after the cell, plain owner references, the drain finalizer on the Machine, the bootstrap Secret
as ``dataSecretName``); the simulated CAPI/CAPKS controllers create the SwiftGuest from them;
the pool reaches Ready through the same three layers, scales, and its deletion leaves nothing.
"""

from __future__ import annotations

from provisioner.clock import SystemClock
from provisioner.fsm.identity import CELL_DRAIN_FINALIZER, PoolIdentity
from provisioner.kube import KINDS, KubeApi
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
