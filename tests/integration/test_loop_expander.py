"""One pending pod wanted by two pools adds one cell (the expander), on the real apiservers.

What these prove, with ``gpucellpool run``'s graph in-process (autoscaler and provisioner): two
autoscaled pools whose demand selections both match one HAMi-pending pod, and whose fresh cells
could both host it, add exactly one cell between them (one SwiftGuest is created, on the pool
the expander chose; the other pool's target stays 0 after a decision that saw the pod): with
different priorities the higher one takes it; with equal priorities least waste takes it (the
pool whose cell the pod fills best, even though the other pool's name sorts first). Both pools'
``lastDecision.message`` explain the choice. The same holds for two pools in two namespaces,
each reaching the one workload cluster through its own kubeconfig Secret: both connections
learn the cluster's kube-system Namespace UID and the pools are judged together by it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpucellpool.api.pool import POOL_LABEL
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.workload import ClusterUID
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import join_secret
from tests.integration.test_loop_helpers import (
    PoolWatch,
    autoscaled_pool,
    client_for,
    create_pending,
    create_pool,
    decision,
    shut_down,
    start_app,
    until,
    watch_pool,
)

JSON = dict[str, Any]


def pool_with(name: str, namespace: str, priority: int, memory_mib: int) -> JSON:
    """A pool whose demand is the pods labelled trial=<namespace> (pending pods of earlier
    tests stay in the shared workload cluster: a label per test keeps them out)."""
    pool = autoscaled_pool(name, namespace, namespace)
    pool["spec"]["autoscaling"]["priority"] = priority
    pool["spec"]["autoscaling"]["cellShape"]["gpuMemoryMiB"] = memory_mib
    return pool


async def guests_by_pool(infra: RestClient, namespaces: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for namespace in namespaces:
        listed = await infra.get(
            f"/apis/swift.kubeswift.io/v1alpha1/namespaces/{namespace}/swiftguests"
        )
        for guest in (listed or {}).get("items") or []:
            pool = ((guest.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL, "?")
            counts[pool] = counts.get(pool, 0) + 1
    return counts


async def one_cell_for_one_pod(
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    pools: tuple[JSON, JSON],
    pod_mib: int,
) -> tuple[JSON, JSON]:
    """Create both pools (each in its namespace, with a kubeconfig Secret there) and one pending
    pod (in ``namespace``) both match; return (taker, other) statuses once the taker's cell
    exists and the other pool has explained that the pod went elsewhere."""
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    taker, other = (p["metadata"]["name"] for p in pools)
    spaces = sorted({p["metadata"]["namespace"] for p in pools})
    for space in spaces:
        await infra_api.create(f"/api/v1/namespaces/{space}/secrets", join_secret(space))
    app = await start_app(infra, namespace, "solo", provision=True, pool_namespaces=tuple(spaces))
    watches: dict[str, tuple[PoolWatch, asyncio.Task[None]]] = {}
    try:
        for pool in pools:
            name = pool["metadata"]["name"]
            watches[name] = await watch_pool(infra_api, pool["metadata"]["namespace"], name)
            await create_pool(infra_api, workload, pool)
        for name in (taker, other):  # both have seen the workload cluster, with nothing pending
            await watches[name][0].until(lambda s: decision(s).get("reason") == "Idle", 60)
        connections = app.clusters.clusters.values()
        await until(lambda: all(c.uid for c in connections), 60, "cluster identities learned")
        system = await workload_api.get("/api/v1/namespaces/kube-system")
        assert system is not None
        assert len(app.clusters.clusters) == len(spaces)  # one connection per Secret
        assert {c.identity for c in connections} == {ClusterUID(system["metadata"]["uid"])}
        await create_pending(workload_api, namespace, "wanted", namespace, pod_mib)
        _, won = await watches[taker][0].until(lambda s: s.get("desiredReplicas") == 1, 60)
        _, lost = await watches[other][0].until(
            lambda s: "went to" in decision(s).get("message", ""), 60
        )
        deadline = time.monotonic() + 60
        while (guests := await guests_by_pool(infra_api, spaces)) != {taker: 1}:
            assert time.monotonic() < deadline, guests
            await asyncio.sleep(0.1)  # polling the apiserver with a deadline
        # The other pool decided with the pod pending and kept its target at 0.
        assert lost.get("desiredReplicas", 0) == 0 and decision(lost)["desiredReplicas"] == 0
        assert decision(lost)["pendingAsks"] == 0
        return won, lost
    finally:
        await shut_down(app, (t for _, t in watches.values()), (infra_api, workload_api))


async def test_higher_priority_pool_takes_the_pod_and_only_it_adds_a_cell(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    # "a-low" sorts first and its cell fits the pod better: only priority can make "z-high" win.
    pools = (
        pool_with("z-high", namespace, 10, 81920),
        pool_with("a-low", namespace, 0, 24576),
    )
    won, lost = await one_cell_for_one_pod(infra, workload, namespace, pools, 20000)
    assert decision(won)["reason"] == "ScaledUp" and decision(won)["pendingAsks"] == 1
    assert f"went to {namespace}/z-high (priority)" in decision(lost)["message"]
    assert f"also matched by {namespace}/a-low (priority)" in decision(won)["message"]


async def test_same_priority_least_waste_takes_the_pod(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    # Equal priorities; "a-big" sorts first, but a 20000 MiB pod leaves a 24 GiB cell less unused.
    pools = (
        pool_with("z-small", namespace, 0, 24576),
        pool_with("a-big", namespace, 0, 81920),
    )
    won, lost = await one_cell_for_one_pod(infra, workload, namespace, pools, 20000)
    assert decision(won)["reason"] == "ScaledUp"
    assert f"went to {namespace}/z-small (least waste)" in decision(lost)["message"]
    assert f"also matched by {namespace}/a-big (least waste)" in decision(won)["message"]


async def test_pools_on_two_secrets_to_one_cluster_add_one_cell_in_total(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    # "a-low" lives in another namespace and reaches the same workload cluster through its own
    # kubeconfig Secret there; it sorts first and its cell fits the pod better.
    elsewhere = f"{namespace[:56]}-b"
    infra.create_namespace(elsewhere, labels={"gpucellpool.test/namespace": "true"})
    try:
        pools = (
            pool_with("z-high", namespace, 10, 81920),
            pool_with("a-low", namespace, 0, 24576),
        )
        pools[1]["metadata"]["namespace"] = elsewhere  # its demand is still trial=<namespace>
        won, lost = await one_cell_for_one_pod(infra, workload, namespace, pools, 20000)
    finally:
        infra.delete_namespace(elsewhere)
    assert decision(won)["reason"] == "ScaledUp" and decision(won)["pendingAsks"] == 1
    assert f"went to {namespace}/z-high (priority)" in decision(lost)["message"]
    assert f"also matched by {elsewhere}/a-low (priority)" in decision(won)["message"]
