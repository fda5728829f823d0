"""More failure handling of the provisioner on the real apiservers, faults injected via the twin.

What these prove: a Ready cell whose Node goes NotReady regresses to Joining/NodeNotReady (not
Failed) and fails with JoinTimeout only once the bootstrap budget has run out; two cells whose
Nodes never register stall the pool with BootstrapCredentialSuspect and nothing is replaced
while the guard holds, even after the backoff; a stale same-named Node of an earlier
incarnation with a dead kubelet Lease is deleted, never adopted - both when it is already there
before the pool exists (orphan sweep) and when it shows up under a live cell (the cell's FSM
reaps it with NodeNameCollision) - and the cell then goes Ready on a Node of its own.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from typing import Any

from gpucellpool.runtime.clock import SystemClock
from provisioner.fsm.identity import INSTANCE_LABEL, PoolIdentity
from provisioner.fsm.membership import MembershipLimits
from provisioner.fsm.observations import parse_time_s
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin import NodeFault
from simulations.twin.common import micro_time, rfc3339
from simulations.twin.node_agent import LEASE_NAMESPACE
from simulations.twin.scenario import Twin, converge, swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    cond,
    names,
    ready_with,
    row,
    running_pool,
    setup_pool,
    status,
)


def _phase(pool: JSON | None, name: str) -> tuple[Any, Any]:
    r = row(pool, name)
    return r.get("phase"), r.get("reason")


async def test_node_not_ready_later_regresses_then_recovers_or_fails(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    name = f"nrl{secrets.token_hex(2)}"  # Nodes are cluster-scoped: keep names unique
    cell = f"{name}-0"
    budget_s = 4
    pool_obj = swiftguest_pool(name, namespace, ready_timeout="4s")
    async with running_pool(apis, workload, pool_obj) as run:
        pool = await run.converge(ready_with(1), timeout_s=30)
        ready_row = row(pool, cell)
        assert ready_row["readyOnce"] is True and ready_row["nodeReady"] is True
        # The kubelet reports NotReady from now on (its heartbeats keep coming).
        run.twin.nodes.faults[cell] = NodeFault(not_ready_after_s=0.0)

        def regressed(p: JSON | None) -> bool:
            return _phase(p, cell) == ("Joining", "NodeNotReady")

        pool = await run.converge(regressed, timeout_s=15)
        r = row(pool, cell)
        regressed_at = r["lastTransitionTime"]
        assert r["failureCount"] == 0  # regression is not failure
        assert r["readyOnce"] is True and r["nodeReady"] is False
        assert r["guestUID"] == ready_row["guestUID"]
        assert status(pool)["readyCells"] == 0 and status(pool).get("failedCells", 0) == 0
        assert cond(pool, "Ready")["status"] == "False"

        seen: set[tuple[Any, Any]] = set()

        def failed(p: JSON | None) -> bool:
            seen.add(_phase(p, cell))
            return row(p, cell).get("phase") == "Failed"

        pool = await run.converge(failed, timeout_s=20)
    # Between regression and failure the cell only ever sat in Joining/NodeNotReady, and it
    # failed only after the Joining budget (bootstrap.readyTimeout) ran out, with JoinTimeout.
    assert seen <= {("Joining", "NodeNotReady"), ("Failed", "JoinTimeout")}, seen
    assert _phase(pool, cell) == ("Failed", "JoinTimeout")
    # Measured on the row's own clock (metav1.Time, whole seconds), not on when this test happened
    # to see each pass: the FSM fails the cell once now - lastTransitionTime(Joining) > budget.
    r = row(pool, cell)
    joined_s, failed_s = parse_time_s(regressed_at), parse_time_s(r["lastTransitionTime"])
    assert joined_s is not None and failed_s is not None
    assert failed_s - joined_s >= budget_s
    assert r["message"].startswith("Joining for more than 4s")
    assert "Node registered but not Ready" in r["message"]
    assert r["failureCount"] == 1 and status(pool)["failedCells"] == 1
    assert r["guestUID"] == ready_row["guestUID"]  # same incarnation, not replaced yet


async def test_two_never_registering_cells_trigger_the_credential_guard(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    name = f"cred{secrets.token_hex(2)}"
    cells = {f"{name}-0", f"{name}-1"}
    pool_obj = swiftguest_pool(name, namespace, replicas=2, ready_timeout="3s")
    backoff_s = 2.0  # 30 s in production; short so that a replacement WOULD happen unguarded
    limits = MembershipLimits(backoff_base_s=backoff_s)
    loop = asyncio.get_running_loop()
    async with running_pool(apis, workload, pool_obj, limits=limits) as run:
        for c in cells:
            run.twin.nodes.faults[c] = NodeFault(never_register=True)

        def guarded(p: JSON | None) -> bool:
            both = all(_phase(p, c) == ("Failed", "NodeNeverRegistered") for c in cells)
            return both and cond(p, "Progressing").get("reason") == "BootstrapCredentialSuspect"

        pool = await run.converge(guarded, timeout_s=30)
        progressing = cond(pool, "Progressing")
        assert progressing["status"] == "False"
        assert "2 cells booted but their Node never registered" in progressing["message"]
        assert "joinSecretRef" in progressing["message"]
        guests = {
            g["metadata"]["name"]: g["metadata"]["uid"]
            for g in await infra_api.list(KINDS["SwiftGuest"], namespace)
        }
        assert set(guests) == cells
        # Many passes over more than twice the backoff: nothing is replaced or drained.
        deadline = loop.time() + 3 * backoff_s
        passes = 0
        while loop.time() < deadline or passes < 10:
            await run.passes(1)
            passes += 1
            now_guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
            assert {g["metadata"]["name"]: g["metadata"]["uid"] for g in now_guests} == guests
            for g in now_guests:
                annotations = g["metadata"].get("annotations") or {}
                assert "cells.kubeswift.io/drain" not in annotations
                assert g["metadata"].get("deletionTimestamp") is None
            await asyncio.sleep(0.1)  # the reconcile cadence, not a synchronisation
        pool = await infra_api.get(KINDS["GPUCellPool"], namespace, name)
    assert cond(pool, "Progressing")["reason"] == "BootstrapCredentialSuspect"
    for c in cells:
        r = row(pool, c)
        assert (r["phase"], r["reason"], r["failureCount"]) == ("Failed", "NodeNeverRegistered", 1)
        assert r["guestUID"] == guests[c]
        assert "Joining" in r["message"]
        assert await workload_api.get(KINDS["Node"], None, c) is None
    assert status(pool)["failedCells"] == 2


async def _stale_node(workload_api: KubeApi, ident: PoolIdentity, index: int) -> tuple[str, str]:
    """A Node of an earlier incarnation of cell ``index``: our labels, an old instance UID, a
    Ready condition and a kubelet Lease both last heard of an hour ago. Returns (uid, old)."""
    node_name = f"{ident.name}-{index}"
    old_instance = str(uuid.uuid4())
    labels = {**ident.cell_labels(index), INSTANCE_LABEL: old_instance}
    created = await workload_api.create(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "labels": labels}}
    )
    long_ago = SystemClock().now() - 3600
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": rfc3339(long_ago),
        "lastTransitionTime": rfc3339(long_ago),
    }
    await workload_api.patch(
        KINDS["Node"], None, node_name, {"status": {"conditions": [ready]}}, status=True
    )
    await workload_api.apply(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node_name, "namespace": LEASE_NAMESPACE},
            "spec": {
                "holderIdentity": node_name,
                "leaseDurationSeconds": 40,
                "renewTime": micro_time(long_ago),
            },
        }
    )
    return str(created["metadata"]["uid"]), old_instance


async def _node_uid(workload_api: KubeApi, name: str) -> str | None:
    node = await workload_api.get(KINDS["Node"], None, name)
    return None if node is None else str(node["metadata"]["uid"])


async def _assert_ready_on_own_node(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    pool: JSON | None,
    cell: str,
    stale_uid: str,
) -> None:
    infra_api, workload_api = apis
    guest = await infra_api.get(KINDS["SwiftGuest"], (pool or {})["metadata"]["namespace"], cell)
    assert guest is not None
    assert row(pool, cell)["guestUID"] == guest["metadata"]["uid"]
    node = await workload_api.get(KINDS["Node"], None, cell)
    assert node is not None
    assert node["metadata"]["uid"] != stale_uid  # a freshly registered Node, not the stale one
    assert node["metadata"]["labels"][INSTANCE_LABEL] == guest["metadata"]["uid"]


async def test_stale_node_from_an_earlier_incarnation_is_replaced_not_adopted(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    """The stale Node exists before the pool: no cell owns the name yet, so the orphan sweep
    (identity.node_disposition: ours, no current cell, Lease dead -> REAP_ORPHAN) deletes it
    in the very first pass, before any cell could be judged against it."""
    infra_api, workload_api = apis
    clock = SystemClock()
    name = f"stl{secrets.token_hex(2)}"
    cell = f"{name}-0"
    ident = PoolIdentity(namespace, name)
    stale_uid, old_instance = await _stale_node(workload_api, ident, 0)
    key = await setup_pool(infra_api, workload, swiftguest_pool(name, namespace))
    reconciler = Reconciler(infra_api, clock)
    try:
        await reconciler.reconcile_once(key)  # creates the SwiftGuest, sweeps the stale Node
        assert await _node_uid(workload_api, cell) is None
        guest = await infra_api.get(KINDS["SwiftGuest"], namespace, cell)
        assert guest is not None and guest["metadata"]["uid"] != old_instance
        async with Twin(infra_api, workload_api, clock, namespace):
            pool = await converge(reconciler, key, ready_with(1), timeout_s=30)
    finally:
        await reconciler.close()
    await _assert_ready_on_own_node(apis, pool, cell, stale_uid)
    assert row(pool, cell)["guestUID"] == guest["metadata"]["uid"]
    assert row(pool, cell)["failureCount"] == 0


async def test_stale_node_appearing_under_a_live_cell_is_reaped_by_the_cell(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    """The stale Node appears once the cell's SwiftGuest exists (so the orphan sweep leaves the
    name to the cell): when the guest has booted, cell_state sees an owned Node whose instance
    label is another UID and whose Lease is dead -> Joining/NodeNameCollision with reap_node,
    the Node is deleted (never relabelled), and the kubelet's own Node makes the cell Ready."""
    infra_api, workload_api = apis
    clock = SystemClock()
    name = f"stc{secrets.token_hex(2)}"
    cell = f"{name}-0"
    ident = PoolIdentity(namespace, name)
    key = await setup_pool(infra_api, workload, swiftguest_pool(name, namespace))
    reconciler = Reconciler(infra_api, clock)
    try:
        await reconciler.reconcile_once(key)  # the SwiftGuest exists; nothing boots it yet
        guest = await infra_api.get(KINDS["SwiftGuest"], namespace, cell)
        assert guest is not None
        stale_uid, old_instance = await _stale_node(workload_api, ident, 0)
        for _ in range(3):  # not booted: the outer layer decides, the stale Node is untouched
            await reconciler.reconcile_once(key)
        stale = await workload_api.get(KINDS["Node"], None, cell)
        assert stale is not None and stale["metadata"]["labels"][INSTANCE_LABEL] == old_instance
        seen: list[tuple[Any, Any, str | None]] = []

        async def done(p: JSON | None) -> bool:
            node_uid = await _node_uid(workload_api, cell)
            seen.append((*_phase(p, cell), node_uid))
            if node_uid == stale_uid:  # while the stale Node exists the cell is never Ready
                assert row(p, cell).get("phase") != "Ready"
            return ready_with(1)(p)

        async with Twin(infra_api, workload_api, clock, namespace) as twin:
            # The kubelet starts a while after boot (the operator looks first): a twin kubelet
            # whose name is taken gives up instead of retrying, so it must not race the reap
            # (6 s: ample for the operator's next passes on a loaded machine).
            twin.nodes.join_s = 6.0
            pool = await converge(reconciler, key, done, timeout_s=30)
    finally:
        await reconciler.close()
    # The reap pass wrote NodeNameCollision (and deleted the Node in that same pass).
    assert ("Joining", "NodeNameCollision") in {(ph, why) for ph, why, _ in seen}, seen
    assert row(pool, cell)["failureCount"] == 0
    await _assert_ready_on_own_node(apis, pool, cell, stale_uid)
    assert await names(infra_api, "SwiftGuest", namespace) == {cell}
