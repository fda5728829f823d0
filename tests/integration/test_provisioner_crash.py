"""Crash safety: kill a reconcile pass at every write in turn, restart from scratch, converge.

What these prove: for every mutating call of a creating pass and of a draining pass - aborted
before the write reached the apiserver and after it did (answer lost) - a brand-new Reconciler
(no memory, new workload client) converges to the desired state with no duplicate cell, no
orphaned seed profile / bootstrap Secret / Node, and a status that matches the live objects.
"""

from __future__ import annotations

import pytest

from gpucellpool.runtime.clock import SystemClock
from provisioner.fsm.identity import PoolIdentity
from provisioner.kube import KINDS, KubeApi
from provisioner.reconciler import PoolKey, Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.faults import CrashPlan
from simulations.twin.scenario import Twin, converge, swiftguest_pool
from tests.integration.crash_support import crash_in_pass
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    cell_nodes,
    names,
    ready_with,
    set_replicas,
    setup_pool,
    status,
)

MAX_WRITES_PER_PASS = 40


async def assert_exact_cells(
    infra_api: KubeApi, workload_api: KubeApi, key: PoolKey, expected: set[str]
) -> None:
    ident = PoolIdentity(key.namespace, key.name)
    sel = f"cells.kubeswift.io/pool-id={ident.pool_id}"
    ns = key.namespace
    assert await names(infra_api, "SwiftGuest", ns, sel) == expected
    assert await names(infra_api, "SwiftSeedProfile", ns, sel) == {f"{c}-seed" for c in expected}
    assert await names(infra_api, "Secret", ns, sel) == {f"{c}-bootstrap" for c in expected}
    assert await cell_nodes(workload_api, ident) == expected
    pool = await infra_api.get(KINDS["GPUCellPool"], ns, key.name)
    rows = status(pool).get("cells") or []
    assert {r["name"] for r in rows} == expected
    guests = await infra_api.list(KINDS["SwiftGuest"], ns, label_selector=sel)
    assert {r["guestUID"] for r in rows} == {g["metadata"]["uid"] for g in guests}


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
async def test_crash_at_every_write_of_a_creating_pass(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    after: bool,
) -> None:
    infra_api, workload_api = apis
    clock = SystemClock()
    crashes = 0
    async with Twin(infra_api, workload_api, clock, namespace):
        for k in range(MAX_WRITES_PER_PASS):
            name = f"c{int(after)}x{k}"
            key = await setup_pool(infra_api, workload, swiftguest_pool(name, namespace, 2))
            plan = CrashPlan(crash_at=k, after=after)
            if not await crash_in_pass(infra_api, key, plan):
                break  # k is past the last write of a first pass: every point was covered
            crashes += 1
            fresh = Reconciler(infra_api, clock)
            try:
                await converge(fresh, key, ready_with(2), timeout_s=30)
            finally:
                await fresh.close()
            await assert_exact_cells(infra_api, workload_api, key, {f"{name}-0", f"{name}-1"})
    # A first pass writes: pool finalizer, 2 x (Secret, seed, guest), status, desiredReplicas
    # (its own field manager); then its Events (best effort: a crash while posting them loses
    # the rest, never state).
    state = [w for w in plan.log if not w.startswith("create Event/")]
    assert crashes == len(plan.log) and len(state) == 9, plan.log
    assert len(plan.log) > len(state)


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
async def test_crash_at_every_write_of_a_draining_pass(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    after: bool,
) -> None:
    infra_api, workload_api = apis
    clock = SystemClock()
    name = f"d{int(after)}"
    key = await setup_pool(infra_api, workload, swiftguest_pool(name, namespace, 2))
    crashes = 0
    healthy = Reconciler(infra_api, clock)
    try:
        async with Twin(infra_api, workload_api, clock, namespace):
            for k in range(MAX_WRITES_PER_PASS):
                await set_replicas(infra_api, key, 2)
                await converge(healthy, key, ready_with(2), timeout_s=30)
                await set_replicas(infra_api, key, 1)
                plan = CrashPlan(crash_at=k, after=after)
                if not await crash_in_pass(infra_api, key, plan):
                    break
                crashes += 1
                fresh = Reconciler(infra_api, clock)
                try:
                    await converge(fresh, key, ready_with(1), timeout_s=30)
                finally:
                    await fresh.close()
                await assert_exact_cells(infra_api, workload_api, key, {f"{name}-0"})
    finally:
        await healthy.close()
    # mark, cordon, delete Node, release finalizer, delete guest, status, desiredReplicas.
    assert crashes == len(plan.log) >= 7, plan.log
