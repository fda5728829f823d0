"""Pool deletion honours drain.mode and deletion.policy, on the real apiservers.

What these prove: with ``drain.mode: Evict`` deleting a pool evicts its cells' pods through the
Eviction API; while a PodDisruptionBudget (its status written by the harness's real disruption
controller) allows no disruption, the apiserver refuses (429), the pool stays with its finalizer
and says why (``Progressing=False/EvictionBlocked`` naming the pod, and a Warning Event); once
the PDB allows it the pod is evicted - never deleted by the operator - and the pool goes. With
``deletion.policy: Force`` the same PDB is irrelevant: the operator DELETEs the pods (no
eviction call at all) and the pool goes at once.
"""

from __future__ import annotations

from provisioner.events import EVENT
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import poll_until, swiftguest_pool
from tests.integration.provisioner_support import (
    PDB,
    RecordingKubeApi,
    apis,  # noqa: F401  (fixture)
    cond,
    gpu_pod,
    pdb,
    ready_with,
    recording_factory,
    running_pool,
)

APP = {"app": "trainer"}


async def _pod_with_pdb(workload_api: KubeApi, namespace: str, node: str) -> None:
    """One running trainer on ``node`` and a PDB (minAvailable 1) that allows no eviction,
    as counted by kube-controller-manager's disruption controller."""
    await workload_api.create(pdb(namespace, 1, APP))
    await workload_api.create(gpu_pod(namespace, "trainer", node, APP))

    async def counted() -> bool:
        pdb = await workload_api.get(PDB, namespace, "trainer")
        st = (pdb or {}).get("status") or {}
        return st.get("currentHealthy") == 1 and st.get("disruptionsAllowed") == 0

    await poll_until(counted, timeout_s=30)


async def _pool_events(infra_api: KubeApi, namespace: str, pool: str) -> list[JSON]:
    items = await infra_api.list(EVENT, namespace)
    return [e for e in items if (e.get("regarding") or {}).get("name") == pool]


async def test_evict_deletion_waits_for_the_pdb_then_evicts(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    recorders: list[RecordingKubeApi] = []
    pool_obj = swiftguest_pool(
        "dev", namespace, autoscaling={"drain": {"mode": "Evict"}}, deletion={"drainTimeout": "10m"}
    )
    async with running_pool(
        apis, workload, pool_obj, run_pods=True, workload_factory=recording_factory(recorders)
    ) as run:
        await run.converge(ready_with(1), timeout_s=40)
        await _pod_with_pdb(workload_api, namespace, "dev-0")
        await infra_api.delete(KINDS["GPUCellPool"], namespace, "dev")

        def blocked(p: JSON | None) -> bool:
            return cond(p, "Progressing").get("reason") == "EvictionBlocked"

        pool = await run.converge(blocked, timeout_s=30)
        await run.passes(5)  # more passes while the PDB holds: nothing may go
        held = await infra_api.get(KINDS["GPUCellPool"], namespace, "dev")
        assert held is not None  # the finalizer holds the pool
        assert await infra_api.get(KINDS["SwiftGuest"], namespace, "dev-0") is not None
        assert await workload_api.get(KINDS["Node"], None, "dev-0") is not None
        progressing = cond(pool, "Progressing")
        assert progressing["status"] == "False"
        assert f"{namespace}/trainer (cell dev-0)" in progressing["message"]
        assert "deletion.drainTimeout" in progressing["message"]
        warnings = [
            e
            for e in await _pool_events(infra_api, namespace, "dev")
            if e["reason"] == "EvictionBlocked"
        ]
        assert warnings and warnings[0]["type"] == "Warning"
        await workload_api.patch(PDB, namespace, "trainer", {"spec": {"minAvailable": 0}})
        await run.converge(lambda p: p is None, timeout_s=60)
    rec = recorders[-1]
    evictions = rec.of("evict", "Pod")
    assert any(c.outcome == "HTTP 429" for c in evictions)  # refused while the PDB held
    assert [c.name for c in evictions if c.outcome == "ok"] == ["trainer"]
    assert rec.of("delete", "Pod") == []  # evicted, never deleted by the operator
    assert await workload_api.get(KINDS["Pod"], namespace, "trainer") is None


async def test_force_deletion_deletes_pods_without_eviction(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    recorders: list[RecordingKubeApi] = []
    pool_obj = swiftguest_pool(
        "dfo",
        namespace,
        autoscaling={"drain": {"mode": "Evict"}},
        deletion={"policy": "Force", "drainTimeout": "10m"},
    )
    async with running_pool(
        apis, workload, pool_obj, run_pods=True, workload_factory=recording_factory(recorders)
    ) as run:
        await run.converge(ready_with(1), timeout_s=40)
        await _pod_with_pdb(workload_api, namespace, "dfo-0")  # an eviction would be refused
        await infra_api.delete(KINDS["GPUCellPool"], namespace, "dfo")
        await run.converge(lambda p: p is None, timeout_s=30)
    rec = recorders[-1]
    assert rec.of("evict", "Pod") == []  # Force never asks the Eviction API
    deletes = rec.of("delete", "Pod")
    assert [(c.namespace, c.name, c.outcome) for c in deletes] == [(namespace, "trainer", "ok")]
    assert await workload_api.get(KINDS["Pod"], namespace, "trainer") is None
    assert await workload_api.get(KINDS["Node"], None, "dfo-0") is None
    assert await infra_api.get(KINDS["SwiftGuest"], namespace, "dfo-0") is None
