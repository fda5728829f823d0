"""Outer-node drain and the release-guard annotation, on the real apiservers with the twin.

What these prove: when the infrastructure Node hosting cells is cordoned, the pool says so
(``CellDrainRequested=True`` naming the host and the cells), drains those cells one at a time
(``disruptionBudget: 1``: the second is held, and says so, while the first waits for its GPU
pod), deletes their guests and replaces them with new guests that KubeSwift (the twin, like the
scheduler) puts on the schedulable host; afterwards the condition is False. And: a pool stalled
by the hopeless-pool guard stays stalled under a release-guard value other than "true", and
creates again under "true", after which the operator removes the annotation. And, with the
operator's graph (``gpucellpool.operator.app.App``): a cordon starts the drain at once, through the
infrastructure Node watch, not on the pool's next periodic pass.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

import pytest

from gpucellpool.operator.app import App
from provisioner.events import EVENT
from provisioner.fsm.identity import RELEASE_GUARD_ANNOTATION
from provisioner.fsm.membership import MembershipLimits
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import IDLE_REQUEUE_S, PoolKey, Reconciler, ReconcileResult
from simulations.harness import ClusterEndpoint
from simulations.twin.kubeswift import GuestFault
from simulations.twin.scenario import poll_until, swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    cond,
    gpu_pod,
    ready_with,
    row,
    running_pool,
    status,
)
from tests.integration.test_loop_helpers import start_app

DRAIN_ANNOTATION = "cells.kubeswift.io/drain"


def _host(name: str, cordoned: bool = False) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": cordoned},
    }


@pytest.fixture
async def hosts(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    namespace: str,
) -> AsyncIterator[tuple[str, str]]:
    """Two infrastructure Nodes of this test (cluster-scoped: named after the namespace);
    the second starts cordoned so that both cells land on the first."""
    infra_api = apis[0]
    a, b = f"{namespace}-host-a", f"{namespace}-host-b"
    await infra_api.create(_host(a))
    await infra_api.create(_host(b, cordoned=True))
    yield a, b
    for name in (a, b):
        await infra_api.delete(KINDS["Node"], None, name)


async def _cordon(api: KubeApi, name: str, cordoned: bool) -> None:
    await api.patch(KINDS["Node"], None, name, {"spec": {"unschedulable": cordoned}})


async def _marked(infra_api: KubeApi, namespace: str) -> set[str]:
    """Guests carrying the outer-node drain mark right now."""
    guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
    return {
        g["metadata"]["name"]
        for g in guests
        if (g["metadata"].get("annotations") or {}).get(DRAIN_ANNOTATION) == "OuterNodeDrain"
    }


async def test_cordoned_host_drains_and_replaces_cells_within_the_budget(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    hosts: tuple[str, str],
) -> None:
    infra_api, workload_api = apis
    host_a, host_b = hosts
    pool_obj = swiftguest_pool("od", namespace, replicas=2, autoscaling={"disruptionBudget": 1})
    async with running_pool(apis, workload, pool_obj, run_pods=True) as run:
        run.twin.kubeswift.hosts = hosts
        pool = await run.converge(ready_with(2), timeout_s=40)
        assert {row(pool, c)["hostNode"] for c in ("od-0", "od-1")} == {host_a}
        first = {row(pool, c)["guestUID"] for c in ("od-0", "od-1")}
        assert cond(pool, "CellDrainRequested")["reason"] == "NoDrainRequested"
        await workload_api.create(gpu_pod(namespace, "trainer", "od-0"))  # holds od-0's drain

        async def trainer_running() -> bool:
            pod = await workload_api.get(KINDS["Pod"], namespace, "trainer")
            return ((pod or {}).get("status") or {}).get("phase") == "Running"

        await poll_until(trainer_running, timeout_s=20)
        await _cordon(infra_api, host_b, False)
        await _cordon(infra_api, host_a, True)
        most_marked = 0

        async def held(p: JSON | None) -> bool:
            nonlocal most_marked
            most_marked = max(most_marked, len(await _marked(infra_api, namespace)))
            c = cond(p, "CellDrainRequested")
            return (
                c.get("status") == "True"
                and "held by the disruption budget" in c.get("message", "")
                and row(p, "od-0").get("reason") == "WaitingForAllocations"
            )

        pool = await run.converge(held, timeout_s=40)
        requested = cond(pool, "CellDrainRequested")
        assert requested["reason"] == "InfrastructureNodeDrained"
        assert f"{host_a} (cordoned): od-0, od-1" in requested["message"]
        await run.passes(5)  # od-0 is still busy: od-1 must stay in service
        assert await _marked(infra_api, namespace) == {"od-0"}
        pool = await infra_api.get(KINDS["GPUCellPool"], namespace, "od")
        assert row(pool, "od-1")["phase"] == "Ready"
        await workload_api.delete(KINDS["Pod"], namespace, "trainer", grace_period_s=0)

        async def moved(p: JSON | None) -> bool:
            nonlocal most_marked
            most_marked = max(most_marked, len(await _marked(infra_api, namespace)))
            guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
            return (
                ready_with(2)(p)
                and cond(p, "CellDrainRequested").get("status") == "False"
                and not {g["metadata"]["uid"] for g in guests} & first
            )

        pool = await run.converge(moved, timeout_s=60)
    assert most_marked == 1  # never two cells of the cordoned host draining at once
    cells = status(pool)["cells"]
    assert [r["hostNode"] for r in cells] == [host_b, host_b]  # replaced elsewhere
    assert not {r["guestUID"] for r in cells} & first  # both old guests are gone
    guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
    assert {g["metadata"]["uid"] for g in guests} == {r["guestUID"] for r in cells}
    assert cond(pool, "CellDrainRequested")["reason"] == "NoDrainRequested"


async def test_release_guard_true_lifts_the_hopeless_pool_guard_once(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    limits = MembershipLimits(backoff_base_s=0.2)  # 30 s in production
    pool_obj = swiftguest_pool("rg", namespace)
    async with running_pool(apis, workload, pool_obj, limits=limits) as run:
        run.twin.kubeswift.fault_for = lambda _name: GuestFault(fail=True)

        def stalled(p: JSON | None) -> bool:
            return cond(p, "Progressing").get("reason") == "FaultNotInTheCell"

        pool = await run.converge(stalled, timeout_s=40)
        assert RELEASE_GUARD_ANNOTATION in cond(pool, "Progressing")["message"]
        guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
        stalled_uids = {g["metadata"]["uid"] for g in guests}
        run.twin.kubeswift.fault_for = None  # the configuration is fixed

        async def annotate(value: str) -> None:
            patch = {"metadata": {"annotations": {RELEASE_GUARD_ANNOTATION: value}}}
            await infra_api.patch(KINDS["GPUCellPool"], namespace, "rg", patch)

        await annotate("yes")  # not "true": the guard stays
        await run.passes(10)
        guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
        assert {g["metadata"]["uid"] for g in guests} == stalled_uids
        pool = await infra_api.get(KINDS["GPUCellPool"], namespace, "rg")
        assert stalled(pool)
        await annotate("true")
        pool = await run.converge(ready_with(1), timeout_s=40)
    annotations = pool["metadata"].get("annotations") or {}  # type: ignore[index]
    assert RELEASE_GUARD_ANNOTATION not in annotations  # spent: the guards re-arm
    guest = await infra_api.get(KINDS["SwiftGuest"], namespace, "rg-0")
    assert guest is not None and guest["metadata"]["uid"] not in stalled_uids
    events = await infra_api.list(EVENT, namespace)
    used = [e for e in events if e["reason"] == "ReleaseGuardUsed"]
    assert len(used) == 1 and "rg-0" in used[0]["note"]


NEVER_S = 3600.0  # the idle pool's periodic pass, stretched past the test's deadlines


@dataclasses.dataclass
class IdleNever:
    """The operator's reconciler, but an idle pool is not looked at again for ``NEVER_S``:
    once a pass found the pool idle, only a wake-up (a watch event) starts another. Records
    when each pass started (monotonic seconds)."""

    inner: Reconciler
    starts: list[float] = dataclasses.field(default_factory=list)
    running: bool = False
    idle: bool = False

    async def reconcile_once(self, key: PoolKey) -> ReconcileResult:
        self.starts.append(time.monotonic())
        self.running = True
        try:
            result = await self.inner.reconcile_once(key)
        finally:
            self.running = False
        self.idle = result.requeue_after_s == IDLE_REQUEUE_S
        return dataclasses.replace(result, requeue_after_s=NEVER_S) if self.idle else result


async def test_a_cordon_starts_the_drain_at_once_through_the_node_watch(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    hosts: tuple[str, str],
) -> None:
    infra_api = apis[0]
    host_a, host_b = hosts
    key = (namespace, "wd")
    async with running_pool(apis, workload, swiftguest_pool("wd", namespace)) as run:
        run.twin.kubeswift.hosts = hosts  # the twin places; the App (not run) reconciles
        app: App = await start_app(infra, namespace, "nodewatch", provision=True)
        try:
            slow = IdleNever(app.reconciler)
            app.driver.reconciler = slow
            app.driver.idle_requeue_s = NEVER_S
            woken: list[tuple[float, tuple[str, str]]] = []
            wake = app.nodes.wake

            def recorded(pool: tuple[str, str]) -> None:
                woken.append((time.monotonic(), pool))
                wake(pool)

            app.nodes.wake = recorded

            async def settled() -> bool:
                """Ready on host_a, the last pass found it idle and no wake-up is pending.
                Once Ready, the twin's kubelet stops its 1 s status heartbeats (a real one
                reports every 5 min; the Lease stays fresh for 90 s, longer than this test):
                each would wake the pool through its workload Node."""
                pool = await infra_api.get(KINDS["GPUCellPool"], namespace, "wd")
                on_a = ready_with(1)(pool) and row(pool, "wd-0").get("hostNode") == host_a
                if on_a:
                    run.twin.nodes.lease_renew_s = NEVER_S
                quiet = key in app.driver.runner and not app.driver.runner.pending(key)
                quiet = quiet and not slow.running
                return on_a and quiet and slow.idle and app.nodes.cache.synced.is_set()

            await poll_until(settled, timeout_s=60)
            reads = app.nodes.fallback_reads
            woken.clear()  # the mirror's first list may have woken it for a host appearing
            await _cordon(infra_api, host_b, False)  # nobody's host: wakes nobody
            cordoned_at = time.monotonic()
            await _cordon(infra_api, host_a, True)

            async def marked() -> bool:
                return await _marked(infra_api, namespace) == {"wd-0"}

            await poll_until(marked, timeout_s=60)
            waited_s = time.monotonic() - cordoned_at
        finally:
            await app.stop()
    # The idle pool's next periodic pass was NEVER_S away: the Node watch woke it, and the
    # first pass after the cordon started only after that wake-up.
    assert woken and {pool for _, pool in woken} == {key}
    after = [t for t in slow.starts if t >= cordoned_at]
    assert after and after[0] >= woken[0][0]
    assert waited_s < 60 < NEVER_S
    assert app.nodes.fallback_reads == reads  # the mirror answered: no GET per host
    print(f"cordon -> drain mark: {waited_s:.2f} s")
