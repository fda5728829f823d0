"""Shared harness of the crash-safety tests (a plain module, not a test file).

Why this module exists: a crash test kills the provisioner at every write of a flow in turn,
restarts it from scratch and checks that it converges with no duplicate cell, no orphaned object
and no leaked bootstrap Secret. Run one crash point after another, each costs a pool's full
convergence (the twin's guests take their time), so the suites here give every crash point its
own pool in one namespace and run them all at once: each doomed pass has its own ``CrashPlan``
and reconciler, so the crash points stay independent, and the wall time is about one
convergence, not one per crash point. The checks know both backends' object sets
(``Flavour``), filtered to one pool by name, since many pools share the namespace.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpucellpool.runtime.clock import SystemClock
from provisioner.fsm.identity import PoolIdentity
from provisioner.kube import JSON, KINDS, KubeApi, api_from_kubeconfig
from provisioner.reconciler import PoolKey, Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.faults import CrashPlan, FaultyKubeApi, InjectedCrash, Ticket
from simulations.twin.scenario import (
    Twin,
    clusterapi_pool,
    converge,
    poll_until,
    swiftguest_pool,
)
from tests.integration.provisioner_support import (
    Snapshot,
    cell_nodes,
    setup_pool,
    status,
)

T = TypeVar("T")
PASS_INTERVAL_S = 0.5  # many pools reconcile at once: a calmer cadence than converge's default
TWIN_POLL_S = 0.25  # likewise for the simulated controllers (each pass lists the namespace)
KUBELET_POLL_S = 0.5  # the simulated kubelets read their Node and pods at every poll
KUBELET_RENEW_S = 2.0  # Lease and heartbeat (the Lease lasts 40 s)
CONVERGE_TIMEOUT_S = 90.0  # every pool of a suite converges at once on a shared, loaded machine


def every_write(what: str) -> bool:
    return True


def state_write(what: str) -> bool:
    """Not an Event: Events are best effort, and how many a pass posts depends on timing."""
    return not what.startswith("create Event/")


def cleanup_write(what: str) -> bool:
    """Neither an Event nor the pool's status: both are written by every pass (a waiting pass
    too), so their number depends on timing; every other write of a flow happens once."""
    return state_write(what) and not (what.startswith("apply GPUCellPool/") and "/status" in what)


@dataclass
class CountingCrashPlan(CrashPlan):
    """A ``CrashPlan`` that counts - and crashes at - only the writes ``counts`` accepts; the
    others go through and are listed in ``passed``."""

    counts: Callable[[str], bool] = every_write
    passed: list[str] = field(default_factory=list)

    def before(self, what: str) -> Ticket | None:
        if self.counts(what):
            return super().before(what)
        self.refuse_if_dead(what)  # a dead process posts no Event either
        return None

    def done(self, what: str, ticket: Ticket | None) -> None:
        if ticket is None:
            self.passed.append(what)
        super().done(what, ticket)


def doomed_reconciler(infra_api: KubeApi, plan: CrashPlan) -> Reconciler:
    """A reconciler whose infrastructure and workload writes all count against ``plan``."""

    async def factory(kubeconfig: Mapping[str, Any]) -> KubeApi:
        return FaultyKubeApi(await api_from_kubeconfig(kubeconfig), plan)

    return Reconciler(FaultyKubeApi(infra_api, plan), SystemClock(), workload_factory=factory)


async def crash_in_pass(infra_api: KubeApi, key: PoolKey, plan: CrashPlan) -> bool:
    """One pass of a doomed reconciler; True if it crashed (False: fewer writes than
    ``plan.crash_at``)."""
    doomed = doomed_reconciler(infra_api, plan)
    try:
        await doomed.reconcile_once(key)
    except InjectedCrash:
        return True
    finally:
        await doomed.close()
    return False


async def crash_in_flow(
    infra_api: KubeApi,
    key: PoolKey,
    plan: CrashPlan,
    done: Callable[[JSON | None], bool],
) -> bool:
    """Passes of a doomed reconciler until ``done`` holds (False) or it crashed (True)."""
    doomed = doomed_reconciler(infra_api, plan)
    try:
        await converge(doomed, key, done, CONVERGE_TIMEOUT_S, PASS_INTERVAL_S)
    except InjectedCrash:
        return True
    finally:
        await doomed.close()
    return False


async def recover(
    infra_api: KubeApi, key: PoolKey, done: Callable[[JSON | None], bool]
) -> JSON | None:
    """A brand-new reconciler (no memory, new workload client) runs until ``done`` holds."""
    fresh = Reconciler(infra_api, SystemClock())
    try:
        return await converge(fresh, key, done, CONVERGE_TIMEOUT_S, PASS_INTERVAL_S)
    finally:
        await fresh.close()


async def each(items: Iterable[T], job: Callable[[T], Awaitable[Any]]) -> list[Any]:
    """``job`` on every item at once; the first failure is raised once all have finished."""
    results = await asyncio.gather(*(job(i) for i in items), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)


def shape(log: Iterable[str]) -> list[str]:
    """Writes as ``verb Kind[/status]`` (names dropped), to compare differently named pools'."""
    out = []
    for write in log:
        verb, target = write.split(" ", 1)
        kind = target.split("/")[0]
        out.append(f"{verb} {kind}{'/status' if target.endswith('/status') else ''}")
    return out


def listing(log: Iterable[str]) -> str:
    """A write log as an assertion message (one write a line; pytest cuts long lists)."""
    return "\n" + "\n".join(log)


def report(request: Any, label: str, points: int, log: Iterable[str] = ()) -> None:
    """Make the crash-point count visible: a JUnit property and a line in the captured output."""
    request.node.user_properties.append((f"crash_points[{label}]", points))
    writes = f": {shape(log)}" if log else ""
    print(f"{request.node.name}: {points} crash points ({label}){writes}")


@dataclass(frozen=True)
class Flavour:
    """One cell provisioner as the crash tests see it: how to write its pool, and which
    objects a cell consists of (kind -> name suffix; ``operator``: the ones the operator
    creates, the others come from the simulated KubeSwift / CAPKS)."""

    name: str
    make_pool: Callable[[str, str, int], JSON]
    outer: str
    operator: Mapping[str, str]
    twin: Mapping[str, str]
    lingering: frozenset[str] = frozenset()  # operator kinds whose deletion waits for the twin

    def expected(self, cells: set[str]) -> dict[str, set[str]]:
        kinds = {**self.operator, **self.twin}
        found = {kind: {c + suffix for c in cells} for kind, suffix in kinds.items()}
        return {**found, "Node": set(cells)}

    def nothing(self) -> dict[str, set[str]]:
        return self.expected(set())


SWIFTGUEST = Flavour(
    "SwiftGuest",
    swiftguest_pool,
    "SwiftGuest",
    operator={"SwiftGuest": "", "SwiftSeedProfile": "-seed", "Secret": "-bootstrap"},
    twin={},
)
CLUSTERAPI = Flavour(
    "ClusterAPI",
    clusterapi_pool,
    "Machine",
    operator={"Machine": "", "KubeSwiftMachine": "", "Secret": "-bootstrap"},
    twin={"SwiftGuest": "", "SwiftSeedProfile": "-seed"},
    lingering=frozenset({"KubeSwiftMachine"}),
)
FLAVOURS = {f.name: f for f in (SWIFTGUEST, CLUSTERAPI)}


def _of_pool(pool_name: str, names: Iterable[str]) -> set[str]:
    """Names of the pool's cells and their parts (``<pool>-<index>[-suffix]``)."""
    pattern = re.compile(rf"{re.escape(pool_name)}-\d+(-seed|-bootstrap)?")
    return {n for n in names if pattern.fullmatch(n)}


async def _kind_names(infra: KubeApi, kind: str, key: PoolKey, live_only: bool = False) -> set[str]:
    objects = await infra.list(KINDS[kind], key.namespace)
    if live_only:
        objects = [o for o in objects if not o["metadata"].get("deletionTimestamp")]
    return _of_pool(key.name, (o["metadata"]["name"] for o in objects))


async def pool_objects(
    flavour: Flavour,
    infra: KubeApi,
    workload: KubeApi,
    key: PoolKey,
    *,
    operator_only: bool = False,
) -> dict[str, set[str]]:
    """The pool's cell objects by kind and its cell Nodes. ``operator_only``: only the kinds
    the operator creates, and of the ``lingering`` ones only those not being deleted (a
    KubeSwiftMachine stays while CAPKS, whose finalizer it carries, tears the guest down)."""
    kinds = flavour.operator if operator_only else {**flavour.operator, **flavour.twin}
    found = {
        kind: await _kind_names(infra, kind, key, operator_only and kind in flavour.lingering)
        for kind in kinds
    }
    found["Node"] = await cell_nodes(workload, PoolIdentity(key.namespace, key.name))
    return found


def release_snapshot(flavour: Flavour, workload: KubeApi, key: PoolKey) -> Snapshot:
    """What the pool still has when its finalizer is released (``FinalizerReleaseWitness``)."""

    async def snapshot(infra: KubeApi, namespace: str) -> dict[str, set[str]]:
        return await pool_objects(flavour, infra, workload, key, operator_only=True)

    return snapshot


async def assert_exact_cells(
    flavour: Flavour, infra: KubeApi, workload: KubeApi, key: PoolKey, cells: set[str]
) -> None:
    """Exactly ``cells``: the operator's objects now (no duplicate, orphan or leaked Secret;
    the garbage collector cannot have helped, the pool owns them and still exists), the
    twin's once it finished a teardown; status rows name them, with the outer objects' UIDs."""
    want = flavour.expected(cells)
    operator_want = {k: v for k, v in want.items() if k in flavour.operator or k == "Node"}
    got = await pool_objects(flavour, infra, workload, key, operator_only=True)
    assert got == operator_want, f"{key.name}: {got} != {operator_want}"
    pool = await infra.get(KINDS["GPUCellPool"], key.namespace, key.name)
    rows = status(pool).get("cells") or []
    assert {r["name"] for r in rows} == cells
    outers = await infra.list(KINDS[flavour.outer], key.namespace)
    uids = {o["metadata"]["uid"] for o in outers if o["metadata"]["name"] in cells}
    assert {r["guestUID"] for r in rows} == uids

    async def settled() -> bool:
        return await pool_objects(flavour, infra, workload, key) == want

    await settle(settled, lambda: pool_objects(flavour, infra, workload, key), want, key)


async def settle(
    check: Callable[[], Awaitable[bool]],
    read: Callable[[], Awaitable[dict[str, set[str]]]],
    want: dict[str, set[str]],
    key: PoolKey,
) -> None:
    """Wait for the twin to finish a teardown; on timeout fail with what was left."""
    try:
        await poll_until(check, timeout_s=CONVERGE_TIMEOUT_S, interval_s=PASS_INTERVAL_S)
    except TimeoutError:
        assert await read() == want, f"{key.name}: twin objects did not settle"


def calm_twin(infra: KubeApi, workload: KubeApi, namespace: str) -> Twin:
    """The twin for a namespace of many pools, polling less often than its defaults (the
    suites' time is CPU, and most of it the twin's polls of every object)."""
    twin = Twin(infra, workload, SystemClock(), namespace)
    twin.kubeswift.poll_s = twin.capi.poll_s = TWIN_POLL_S
    twin.nodes.poll_s, twin.nodes.lease_renew_s = KUBELET_POLL_S, KUBELET_RENEW_S
    return twin


def pool_names(prefix: str, namespace: str, count: int) -> list[str]:
    """``count`` pool names unique to the test: cell Nodes are named ``<pool>-<index>`` in the
    one workload cluster all tests share, so a name reused by another test's pool would make
    its leftover Node a foreign one here."""
    return [f"{prefix}{k}-{namespace[-6:]}" for k in range(count)]


async def new_pools(
    flavour: Flavour,
    infra_api: KubeApi,
    workload: ClusterEndpoint,
    namespace: str,
    names: list[str],
    replicas: int,
) -> list[PoolKey]:
    """Pools set up one after another (they share the namespace's Secrets)."""
    keys = []
    for name in names:
        keys.append(
            await setup_pool(infra_api, workload, flavour.make_pool(name, namespace, replicas))
        )
    return keys
