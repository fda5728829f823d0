"""Evict drain against the real Eviction API, PodDisruptionBudgets enforced by the apiserver.

What these prove: with ``autoscaling.drain.mode: Evict`` a scale-down empties the leaving cell
through ``pods/eviction`` only - the operator never DELETEs a pod, and every pod that left got an
eviction. The PDB is enforced by the real apiserver from the PDB status that the real disruption
controller of the harness's kube-controller-manager writes: with one disruption
allowed the pods leave one at a time (the second eviction is refused with 429 until the first
pod's replacement is healthy); with none allowed the drain waits until ``drain.timeout`` and
then, as the API documents for an implicit drain, is abandoned: the Node is uncordoned, the
cell kept, every pod still there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import poll_until, swiftguest_pool
from tests.integration.provisioner_support import (
    PDB,
    RecordingKubeApi,
    apis,  # noqa: F401  (fixture)
    gpu_pod,
    pdb,
    ready_with,
    recording_factory,
    row,
    running_pool,
    status,
)

APP = {"app": "trainer"}


def _evict_pool(name: str, namespace: str, timeout: str) -> JSON:
    drain = {"mode": "Evict", "timeout": timeout}
    return swiftguest_pool(name, namespace, replicas=2, autoscaling={"drain": drain})


async def _healthy(workload_api: KubeApi, namespace: str) -> list[JSON]:
    pods = await workload_api.list(KINDS["Pod"], namespace, label_selector="app=trainer")
    return [
        p
        for p in pods
        if p["metadata"].get("deletionTimestamp") is None
        and (p.get("status") or {}).get("phase") == "Running"
    ]


async def _start_pods(
    workload_api: KubeApi, namespace: str, placement: dict[str, str], allowed: int
) -> None:
    """Create the pods (the twin kubelet starts them) and wait until kube-controller-manager's
    disruption controller has counted them into the PDB's status."""
    for name, node in placement.items():
        await workload_api.create(gpu_pod(namespace, name, node, APP))

    async def settled() -> bool:
        pdb = await workload_api.get(PDB, namespace, "trainer")
        st = (pdb or {}).get("status") or {}
        running = len(await _healthy(workload_api, namespace)) == len(placement)
        return (
            running
            and st.get("currentHealthy") == len(placement)
            and (st.get("disruptionsAllowed") == allowed)
        )

    await poll_until(settled, timeout_s=20)


@contextlib.asynccontextmanager
async def _replica_set(
    workload_api: KubeApi, namespace: str, size: int, node: str, created: list[float]
) -> AsyncIterator[None]:
    """Play the ReplicaSet: keep ``size`` trainer pods, replacements land on ``node``.
    ``created``: time.monotonic() of each replacement's creation."""
    counter = iter(range(100))

    async def loop() -> None:
        while True:
            live = await _healthy(workload_api, namespace)
            pods = await workload_api.list(KINDS["Pod"], namespace, label_selector="app=trainer")
            if len(pods) < size and len(live) == len(pods):
                name = f"trainer-r{next(counter)}"
                await workload_api.create(gpu_pod(namespace, name, node, APP))
                created.append(time.monotonic())
            await asyncio.sleep(0.1)  # the controller's cadence

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _pod_writes(rec: RecordingKubeApi) -> list[Any]:
    return [c for c in rec.calls if c.kind == "Pod" and c.verb in ("delete", "patch", "apply")]


async def test_evict_drain_honours_a_pdb_one_pod_at_a_time(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    workload_api = apis[1]
    recorders: list[RecordingKubeApi] = []
    factory = recording_factory(recorders)
    replacements: list[float] = []
    pool_obj = _evict_pool("ev", namespace, "10m")
    async with running_pool(
        apis, workload, pool_obj, run_pods=True, workload_factory=factory
    ) as run:
        await run.converge(ready_with(2), timeout_s=40)
        # Three trainers, two on the leaving cell ev-1; minAvailable 2 allows one disruption.
        await workload_api.create(pdb(namespace, 2, APP))
        placement = {"trainer-a": "ev-1", "trainer-b": "ev-1", "trainer-c": "ev-0"}
        await _start_pods(workload_api, namespace, placement, allowed=1)
        async with _replica_set(workload_api, namespace, 3, "ev-0", replacements):
            await run.scale(1)
            min_healthy = 3

            async def done(p: JSON | None) -> bool:
                nonlocal min_healthy
                min_healthy = min(min_healthy, len(await _healthy(workload_api, namespace)))
                return ready_with(1)(p)

            pool = await run.converge(done, timeout_s=60)
    rec = recorders[-1]
    evictions = rec.of("evict", "Pod")
    ok = [c.name for c in evictions if c.outcome == "ok"]
    assert sorted(ok) == ["trainer-a", "trainer-b"]  # each removed pod got exactly one eviction
    assert any(c.outcome == "HTTP 429" for c in evictions)  # the PDB held the second one back
    assert _pod_writes(rec) == []  # no pod was deleted (or touched) outside the Eviction API
    # One at a time: the second eviction succeeded only after the first pod's replacement.
    first, second = (c for c in evictions if c.outcome == "ok")
    assert first.name == "trainer-a"  # GPU pods in name order
    assert any(first.at < t < second.at for t in replacements)
    assert any(c.outcome == "HTTP 429" and first.at < c.at < second.at for c in evictions)
    assert min_healthy >= 2  # minAvailable never violated (as sampled after every pass)
    assert [c["name"] for c in status(pool)["cells"]] == ["ev-0"]
    left = {p["metadata"]["name"] for p in await _healthy(workload_api, namespace)}
    assert "trainer-a" not in left and "trainer-b" not in left and len(left) == 3


async def test_evict_drain_blocked_by_pdb_is_abandoned_at_timeout(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    recorders: list[RecordingKubeApi] = []
    factory = recording_factory(recorders)
    pool_obj = _evict_pool("evb", namespace, "3s")
    async with running_pool(
        apis, workload, pool_obj, run_pods=True, workload_factory=factory
    ) as run:
        await run.converge(ready_with(2), timeout_s=40)
        await workload_api.create(pdb(namespace, 2, APP))  # two pods, both needed: none allowed
        placement = {"trainer-a": "evb-1", "trainer-b": "evb-0"}
        await _start_pods(workload_api, namespace, placement, allowed=0)
        await run.scale(1)
        started = asyncio.get_running_loop().time()
        cordoned_while_blocked = False

        async def abandoned(p: JSON | None) -> bool:
            nonlocal cordoned_while_blocked
            reason = row(p, "evb-1").get("reason")
            if reason == "EvictingPods":
                node = await workload_api.get(KINDS["Node"], None, "evb-1")
                cordoned_while_blocked |= bool((node or {})["spec"].get("unschedulable"))
            return reason == "DrainTimedOut"

        pool = await run.converge(abandoned, timeout_s=30)
        waited = asyncio.get_running_loop().time() - started
        node = await workload_api.get(KINDS["Node"], None, "evb-1")
    assert waited >= 3.0  # held until drain.timeout
    assert cordoned_while_blocked
    assert node is not None and not node["spec"].get("unschedulable")  # abandoned: uncordoned
    assert row(pool, "evb-1")["phase"] == "Ready"  # the cell is kept
    assert await infra_api.get(KINDS["SwiftGuest"], namespace, "evb-1") is not None
    rec = recorders[-1]
    evictions = rec.of("evict", "Pod")
    assert evictions and all(c.outcome == "HTTP 429" for c in evictions)
    assert {c.name for c in evictions} == {"trainer-a"}
    assert _pod_writes(rec) == []
    assert len(await _healthy(workload_api, namespace)) == 2  # nobody was disrupted
