"""Failure handling of the provisioner on the real apiservers, each fault injected through the twin.

What these prove: every layer's fault ends in the right cell reason within a short budget (VM
never gets an address, Node never registers, GPU never advertised, VM Failed); an unreachable
workload apiserver freezes the pool (nothing created or deleted, conditions say why) and it
recovers when the credential is fixed; foreign Nodes are never touched; two same-named pools in
different namespaces do not interfere; a pool deleted while its workload cluster is unreachable
is torn down after the drain timeout by the operator itself (checked when it releases the pool
finalizer, before the garbage collector could help), leaving only the Node it could not reach.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from gpucellpool.runtime.clock import SystemClock
from provisioner.fsm.identity import INSTANCE_LABEL, PoolIdentity
from provisioner.fsm.membership import MembershipLimits
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import Reconciler
from simulations.harness import ClusterEndpoint, Harness
from simulations.harness.procs import free_port
from simulations.twin import GuestFault, NodeFault
from simulations.twin.scenario import (
    Twin,
    converge,
    dead_kubeconfig_secret,
    kubeconfig_secret,
    swiftguest_pool,
)
from tests.integration.provisioner_support import (
    FinalizerReleaseWitness,
    apis,  # noqa: F401  (fixture)
    cell_nodes,
    cond,
    names,
    ready_with,
    row,
    running_pool,
    setup_pool,
    status,
    swiftguest_leftovers,
)

Check = Callable[[JSON | None], bool]


def failed_with(name: str, reason: str) -> Check:
    return lambda pool: (
        row(pool, name).get("phase") == "Failed" and row(pool, name).get("reason") == reason
    )


async def _run_fault(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    pool: JSON,
    check: Check,
    guest_faults: dict[str, GuestFault] | None = None,
    node_faults: dict[str, NodeFault] | None = None,
) -> JSON | None:
    async with running_pool(apis, workload, pool) as run:
        run.twin.kubeswift.faults.update(guest_faults or {})
        run.twin.nodes.faults.update(node_faults or {})
        return await run.converge(check, timeout_s=30)


async def test_vm_never_gets_an_address_times_out(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    pool_obj = swiftguest_pool("noip", namespace, ready_timeout="4s")
    faults = {"noip-0": GuestFault(never_address=True)}
    pool = await _run_fault(
        apis, workload, pool_obj, failed_with("noip-0", "CellProvisionTimeout"), faults
    )
    r = row(pool, "noip-0")
    assert r["failureCount"] == 1 and "Booting" in r["message"]
    assert cond(pool, "Ready")["status"] == "False"
    assert status(pool)["failedCells"] == 1


async def test_node_never_registers(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    pool_obj = swiftguest_pool("nonode", namespace, ready_timeout="4s")
    faults = {"nonode-0": NodeFault(never_register=True)}
    check = failed_with("nonode-0", "NodeNeverRegistered")
    pool = await _run_fault(apis, workload, pool_obj, check, node_faults=faults)
    assert "Joining" in row(pool, "nonode-0")["message"]
    assert await apis[1].get(KINDS["Node"], None, "nonode-0") is None


async def test_gpu_never_advertised(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    pool_obj = swiftguest_pool("nogpu", namespace, capacity_timeout="3s")
    faults = {"nogpu-0": NodeFault(never_advertise=True)}
    check = failed_with("nogpu-0", "GPUNotAdvertised")
    pool = await _run_fault(apis, workload, pool_obj, check, node_faults=faults)
    r = row(pool, "nogpu-0")
    assert "0 of 1 GPU devices advertised" in r["message"]
    assert r["nodeReady"] is True  # layers one and two were fine


async def test_vm_failed_fails_the_cell_at_once(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    pool_obj = swiftguest_pool("vmfail", namespace)  # 15m budgets: no timeout can explain it
    faults = {"vmfail-0": GuestFault(fail=True)}
    pool = await _run_fault(
        apis, workload, pool_obj, failed_with("vmfail-0", "GuestFailed"), faults
    )
    assert row(pool, "vmfail-0")["failureCount"] == 1 and status(pool)["failedCells"] == 1
    # The failed VM is kept until the replacement backoff (30 s) expires.
    assert await apis[0].get(KINDS["SwiftGuest"], namespace, "vmfail-0") is not None


async def test_unreachable_workload_freezes_the_pool_then_recovers(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    text = workload.kubeconfig_path.read_text()
    async with running_pool(apis, workload, swiftguest_pool("frz", namespace, 1)) as run:
        await run.converge(ready_with(1), timeout_s=30)
        guest = await infra_api.get(KINDS["SwiftGuest"], namespace, "frz-0")
        assert guest is not None
        await infra_api.apply(dead_kubeconfig_secret(namespace, text, free_port()))
        await run.scale(0)

        def frozen(p: JSON | None) -> bool:
            return cond(p, "WorkloadClusterReachable").get("reason") == "Unreachable"

        pool = await run.converge(frozen, timeout_s=30)
        await run.passes(10)  # many passes while unreachable: nothing may change
        await run.scale(3)
        await run.passes(10)
        pool = await infra_api.get(KINDS["GPUCellPool"], namespace, "frz")
        after = await infra_api.get(KINDS["SwiftGuest"], namespace, "frz-0")
        assert after is not None and after["metadata"]["uid"] == guest["metadata"]["uid"]
        assert "cells.kubeswift.io/drain" not in (after["metadata"].get("annotations") or {})
        assert await names(infra_api, "SwiftGuest", namespace) == {"frz-0"}
        node = await workload_api.get(KINDS["Node"], None, "frz-0")
        assert node is not None and not node["spec"].get("unschedulable")
        assert cond(pool, "Progressing")["reason"] == "Unreachable"
        assert cond(pool, "Ready")["reason"] == "Unreachable"
        assert row(pool, "frz-0")["reason"] == "Unreachable"  # phase frozen, not failed
        assert row(pool, "frz-0")["phase"] == "Ready"
        # Fix the credential: the pool converges to the latest spec (3 cells).
        await infra_api.apply(kubeconfig_secret(namespace, text))
        await run.converge(ready_with(3), timeout_s=40)


def _node(name: str, labels: dict[str, str]) -> JSON:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


async def test_foreign_nodes_are_never_touched(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    pool_name = f"frn{secrets.token_hex(2)}"  # Nodes are cluster-scoped: keep names unique
    squatter = f"{pool_name}-0"  # same name as the pool's first cell, somebody else's Node
    lookalike = f"{pool_name}-7"  # carries the pool label (old style), but no proof of ours
    await workload_api.create(_node(squatter, {"owner": "someone-else"}))
    await workload_api.create(_node(lookalike, {"cells.kubeswift.io/pool": pool_name}))
    async with running_pool(apis, workload, swiftguest_pool(pool_name, namespace)) as run:

        def foreign(p: JSON | None) -> bool:
            return row(p, squatter).get("reason") == "ForeignNode"

        await run.converge(foreign, timeout_s=20)
        await run.delete(timeout_s=20)
    for name, labels in ((squatter, {"owner": "someone-else"}), (lookalike, {})):
        node = await workload_api.get(KINDS["Node"], None, name)
        assert node is not None, f"foreign Node {name} was deleted"
        assert not node["spec"].get("unschedulable"), f"foreign Node {name} was cordoned"
        assert INSTANCE_LABEL not in node["metadata"]["labels"]
        assert labels.items() <= node["metadata"]["labels"].items()
    assert await names(infra_api, "SwiftGuest", namespace) == set()


async def test_same_named_pools_in_two_namespaces_do_not_interfere(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    harness: Harness,
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    clock = SystemClock()
    other = f"{namespace[:50]}-b"
    for endpoint in harness.endpoints:
        endpoint.create_namespace(other)
    name = f"same{secrets.token_hex(2)}"
    key_a = await setup_pool(infra_api, workload, swiftguest_pool(name, namespace, replicas=2))
    key_b = await setup_pool(infra_api, workload, swiftguest_pool(name, other, replicas=1))
    ident_a = PoolIdentity(namespace, name)
    reconciler = Reconciler(infra_api, clock)
    try:
        async with (
            Twin(infra_api, workload_api, clock, namespace),
            Twin(infra_api, workload_api, clock, other),
        ):
            pool_a = await converge(reconciler, key_a, ready_with(2), timeout_s=30)
            uids = {r["name"]: r["guestUID"] for r in status(pool_a)["cells"]}

            def b_blocked(p: JSON | None) -> bool:  # B's cell-0 Node name is A's Node
                return row(p, f"{name}-0").get("reason") == "ForeignNode"

            await converge(reconciler, key_b, b_blocked, timeout_s=20)
            await infra_api.delete(KINDS["GPUCellPool"], other, name)
            await converge(reconciler, key_b, lambda p: p is None, timeout_s=20)
            pool_a = await converge(reconciler, key_a, ready_with(2), timeout_s=30)
    finally:
        await reconciler.close()
        for endpoint in harness.endpoints:
            endpoint.delete_namespace(other)
    assert {r["name"]: r["guestUID"] for r in status(pool_a)["cells"]} == uids
    assert await cell_nodes(workload_api, ident_a) == {f"{name}-0", f"{name}-1"}
    for node_name, uid in uids.items():
        node = await workload_api.get(KINDS["Node"], None, node_name)
        assert node is not None and node["metadata"]["labels"][INSTANCE_LABEL] == uid
        assert not node["spec"].get("unschedulable")
    assert len(await names(infra_api, "SwiftGuest", namespace)) == 2
    assert await names(infra_api, "SwiftGuest", other) == set()


async def test_failed_cell_is_replaced_after_backoff_keeping_its_failure_count(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    limits = MembershipLimits(backoff_base_s=1.0)  # 30 s in production
    pool_obj = swiftguest_pool("repl", namespace)
    async with running_pool(apis, workload, pool_obj, limits=limits) as run:
        run.twin.kubeswift.faults["repl-0"] = GuestFault(fail=True)
        pool = await run.converge(failed_with("repl-0", "GuestFailed"))
        failed_uid = row(pool, "repl-0")["guestUID"]
        run.twin.kubeswift.faults.clear()  # the next incarnation boots fine
        pool = await run.converge(ready_with(1), timeout_s=30)
    r = row(pool, "repl-0")
    assert r["guestUID"] != failed_uid  # a new incarnation at the same index
    assert r["failureCount"] == 1  # the failure survived the replacement
    guest = await infra_api.get(KINDS["SwiftGuest"], namespace, "repl-0")
    assert guest is not None and guest["metadata"]["uid"] == r["guestUID"]


async def test_missing_kubeconfig_secret_is_credential_invalid_and_creates_nothing(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, _ = apis
    pool_obj = swiftguest_pool("nocred", namespace, replicas=2)
    pool_obj["spec"]["workloadCluster"]["kubeconfigSecretRef"]["name"] = "does-not-exist"
    key = await setup_pool(infra_api, workload, pool_obj)
    reconciler = Reconciler(infra_api, SystemClock())
    try:
        for _ in range(5):
            await reconciler.reconcile_once(key)
    finally:
        await reconciler.close()
    pool = await infra_api.get(KINDS["GPUCellPool"], namespace, "nocred")
    reachable = cond(pool, "WorkloadClusterReachable")
    assert (reachable["status"], reachable["reason"]) == ("False", "CredentialInvalid")
    assert "does-not-exist" in reachable["message"]
    assert await names(infra_api, "SwiftGuest", namespace) == set()


async def test_pool_deletion_proceeds_after_drain_timeout_while_unreachable(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    pool_obj = swiftguest_pool("blind", namespace, deletion={"drainTimeout": "2s"})
    # The workload client of the witness is the test's own: it still reaches the cluster.
    leftovers = swiftguest_leftovers(workload_api, PoolIdentity(namespace, "blind"))
    witness = FinalizerReleaseWitness(infra_api, snapshot=leftovers)
    async with running_pool(apis, workload, pool_obj, operator_api=witness) as run:
        await run.converge(ready_with(1), timeout_s=30)
        text = workload.kubeconfig_path.read_text()
        await infra_api.apply(dead_kubeconfig_secret(namespace, text, free_port()))
        await infra_api.delete(KINDS["GPUCellPool"], namespace, "blind")

        def waiting(p: JSON | None) -> bool:
            return row(p, "blind-0").get("reason") == "Unreachable"

        await run.converge(waiting, timeout_s=30)  # paused, not torn down
        assert await infra_api.get(KINDS["SwiftGuest"], namespace, "blind-0") is not None
        await run.converge(lambda p: p is None, timeout_s=20)
    # The operator's own teardown, seen when it released the pool finalizer (the pool, the
    # owner, still existed: the garbage collector cannot have deleted anything yet). Only the
    # Node it could not reach is left.
    blind = {"SwiftGuest": set(), "SwiftSeedProfile": set(), "Secret": set(), "Node": {"blind-0"}}
    assert witness.left == blind
    # And after it is gone (now including anything the garbage collector did).
    assert await names(infra_api, "SwiftGuest", namespace) == set()
    assert await names(infra_api, "SwiftSeedProfile", namespace) == set()
    # The Node could not be deleted while blind: it is left behind (the runbook says so).
    left = await workload_api.get(KINDS["Node"], None, "blind-0")
    assert left is not None
    await workload_api.delete(KINDS["Node"], None, "blind-0")
