"""Shared helpers of the provisioner integration tests (a plain module, not a test file).

Why this module exists: every provisioner scenario needs the same API clients, pool setup,
status readers and convergence predicates, and most run one pool with the twin and one
reconciler (``running_pool``); the drain tests need to see exactly which calls the operator made
against the workload cluster (``RecordingKubeApi``); and the deletion tests need to see what the
pool still had when the operator released its finalizer (``FinalizerReleaseWitness``), the one
moment the garbage collector cannot yet have cleaned up for it.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from gpucellpool.runtime.clock import SystemClock
from provisioner.fsm.identity import POOL_FINALIZER, PoolIdentity
from provisioner.kube import JSON, KINDS, Kind, KubeApi, KubeError, api_from_kubeconfig
from provisioner.kube_delegate import DelegatingKubeApi, Write
from provisioner.reconciler import PoolKey, Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.kubeswift import GuestTimings
from simulations.twin.scenario import Twin, api_for, converge, join_secret, kubeconfig_secret

T = TypeVar("T")


@pytest.fixture
async def apis(
    infra: ClusterEndpoint, workload: ClusterEndpoint
) -> AsyncIterator[tuple[KubeApi, KubeApi]]:
    infra_api = await api_for(infra.kubeconfig_path)
    workload_api = await api_for(workload.kubeconfig_path)
    yield infra_api, workload_api
    await infra_api.close()
    await workload_api.close()


async def setup_pool(infra_api: KubeApi, workload: ClusterEndpoint, pool: JSON) -> PoolKey:
    ns = pool["metadata"]["namespace"]
    await infra_api.apply(kubeconfig_secret(ns, workload.kubeconfig_path.read_text()))
    await infra_api.apply(join_secret(ns))
    await infra_api.apply(pool)
    return PoolKey(ns, pool["metadata"]["name"])


async def set_replicas(api: KubeApi, key: PoolKey, n: int) -> None:
    await api.patch(KINDS["GPUCellPool"], key.namespace, key.name, {"spec": {"replicas": n}})


def status(pool: JSON | None) -> dict[str, Any]:
    return (pool or {}).get("status") or {}


def cond(pool: JSON | None, type_: str) -> dict[str, Any]:
    return next((c for c in status(pool).get("conditions") or [] if c["type"] == type_), {})


def ready_with(n: int) -> Callable[[JSON | None], bool]:
    def check(pool: JSON | None) -> bool:
        s = status(pool)
        cells = s.get("cells") or []
        return (
            s.get("readyCells") == n
            and len(cells) == n
            and cond(pool, "Ready").get("status") == "True"
            and (pool or {}).get("metadata", {}).get("generation") == s.get("observedGeneration")
        )

    return check


def short_of_gpus(
    infra_api: KubeApi, namespace: str, guest_counts: list[int]
) -> Callable[[JSON | None], Awaitable[bool]]:
    """Pool predicate of the physical-GPU pre-flight tests: two cells Ready and the pre-flight
    says ``InsufficientPhysicalGPU``; appends the namespace's SwiftGuest count at every pass."""

    async def check(pool: JSON | None) -> bool:
        guest_counts.append(len(await infra_api.list(KINDS["SwiftGuest"], namespace)))
        return (
            status(pool).get("readyCells") == 2
            and cond(pool, "PhysicalGPUsAvailable").get("reason") == "InsufficientPhysicalGPU"
        )

    return check


def assert_stalled_then_freed(stalled: JSON | None, after: JSON | None) -> None:
    """The pre-flight's conditions while no physical GPU was free, then once one was."""
    phys = cond(stalled, "PhysicalGPUsAvailable")
    assert phys["status"] == "False" and "no free physical GPU" in phys["message"]
    progressing = cond(stalled, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "InsufficientPhysicalGPU")
    assert cond(after, "PhysicalGPUsAvailable")["status"] == "True"
    assert cond(after, "PhysicalGPUsAvailable")["reason"] == "FreeDevices"


def row(pool: JSON | None, name: str) -> dict[str, Any]:
    return next((c for c in status(pool).get("cells") or [] if c["name"] == name), {})


async def names(api: KubeApi, kind: str, ns: str | None, selector: str = "") -> set[str]:
    return {o["metadata"]["name"] for o in await api.list(KINDS[kind], ns, label_selector=selector)}


async def live_names(api: KubeApi, kind: str, ns: str | None, selector: str = "") -> set[str]:
    """Names of the objects not being deleted (no ``deletionTimestamp``)."""
    objects = await api.list(KINDS[kind], ns, label_selector=selector)
    return {o["metadata"]["name"] for o in objects if not o["metadata"].get("deletionTimestamp")}


async def cell_nodes(workload_api: KubeApi, ident: PoolIdentity) -> set[str]:
    return await names(workload_api, "Node", None, f"cells.kubeswift.io/pool-id={ident.pool_id}")


def gpu_pod(namespace: str, name: str, node: str, labels: dict[str, str] | None = None) -> JSON:
    container = {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node, "containers": [container]},
    }


PDB = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")


def pdb(namespace: str, min_available: int, labels: dict[str, str], name: str = "trainer") -> JSON:
    """A PodDisruptionBudget over the pods with ``labels`` (the drain tests' trainers)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
    }


@dataclass(frozen=True, slots=True)
class Call:
    verb: str
    kind: str
    namespace: str | None
    name: str
    outcome: str  # "ok" or "HTTP <status>"
    at: float  # time.monotonic() when the answer arrived


@dataclass
class RecordingKubeApi(DelegatingKubeApi):
    """A ``KubeApi`` that remembers every mutating call and its outcome (reads pass through)."""

    calls: list[Call] = field(default_factory=list)

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await call()
        except KubeError as exc:
            self._record(write, f"HTTP {exc.status}")
            raise
        self._record(write, "ok")
        return result

    def _record(self, write: Write, outcome: str) -> None:
        at = time.monotonic()
        self.calls.append(Call(write.verb, write.kind, write.namespace, write.name, outcome, at))

    def of(self, verb: str, kind: str) -> list[Call]:
        return [c for c in self.calls if c.verb == verb and c.kind == kind]


@dataclass
class CountingKubeApi(RecordingKubeApi):
    """A ``RecordingKubeApi`` that also counts its reads, as ``verb Kind``."""

    reads: Counter[str] = field(default_factory=Counter)

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        self.reads[f"get {kind.kind}"] += 1
        return await super().get(kind, namespace, name)

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        self.reads[f"list {kind.kind}"] += 1
        return await super().list(kind, namespace, label_selector, field_selector)

    async def version(self) -> JSON:
        self.reads["version"] += 1
        return await super().version()

    def counts(self) -> Counter[str]:
        """Reads and writes so far, by ``verb Kind``."""
        return self.reads + Counter(f"{c.verb} {c.kind}" for c in self.calls)

    def reset(self) -> None:
        self.reads.clear()
        self.calls.clear()


def recording_factory(sink: list[RecordingKubeApi]) -> Any:
    """A workload ``ApiFactory`` whose clients record their calls into ``sink``."""

    async def factory(kubeconfig: Mapping[str, Any]) -> KubeApi:
        api = RecordingKubeApi(await api_from_kubeconfig(kubeconfig))
        sink.append(api)
        return api

    return factory


@dataclass
class RunningPool:
    """One pool set up in the test's namespace, the twin running for it, one reconciler."""

    infra: KubeApi
    workload: KubeApi
    clock: SystemClock
    key: PoolKey
    twin: Twin
    reconciler: Reconciler  # replace it to play an operator restart; the last one is closed

    async def converge(
        self, done: Callable[[JSON | None], Awaitable[bool] | bool], timeout_s: float = 30.0
    ) -> JSON | None:
        return await converge(self.reconciler, self.key, done, timeout_s=timeout_s)

    async def passes(self, n: int) -> None:
        for _ in range(n):
            await self.reconciler.reconcile_once(self.key)

    async def scale(self, replicas: int) -> None:
        await set_replicas(self.infra, self.key, replicas)

    async def delete(self, timeout_s: float = 30.0) -> None:
        """Delete the pool and reconcile until it is gone."""
        await self.infra.delete(KINDS["GPUCellPool"], self.key.namespace, self.key.name)
        await self.converge(lambda p: p is None, timeout_s=timeout_s)


@contextlib.asynccontextmanager
async def running_pool(
    apis: tuple[KubeApi, KubeApi],
    workload: ClusterEndpoint,
    pool: JSON,
    *,
    operator_api: KubeApi | None = None,
    run_pods: bool = False,
    guest_timings: GuestTimings | None = None,
    **reconciler_options: Any,
) -> AsyncIterator[RunningPool]:
    """``setup_pool``, a ``Reconciler`` (on ``operator_api`` if given, e.g. a recording client)
    and the twin for the pool's namespace; on exit the twin stops, then the reconciler closes."""
    infra_api, workload_api = apis
    clock = SystemClock()
    key = await setup_pool(infra_api, workload, pool)
    twin = Twin(infra_api, workload_api, clock, key.namespace)
    if run_pods:
        twin.nodes.run_pods = True
    if guest_timings is not None:
        twin.kubeswift.timings = guest_timings
    reconciler = Reconciler(operator_api or infra_api, clock, **reconciler_options)
    scene = RunningPool(infra_api, workload_api, clock, key, twin, reconciler)
    try:
        async with twin:
            yield scene
    finally:
        await scene.reconciler.close()


Snapshot = Callable[[KubeApi, str], Awaitable[dict[str, set[str]]]]


@dataclass
class FinalizerReleaseWitness(RecordingKubeApi):
    """The operator's infrastructure client; when a patch drops the pool finalizer it first
    records ``snapshot(infra, namespace)`` as ``left``, before the patch reaches the apiserver.

    The pool still exists at that moment, so kube-controller-manager's garbage collector (which
    deletes what names a deleted owner) cannot have touched its dependents: whatever ``left``
    lacks, the operator's own cleanup removed."""

    snapshot: Snapshot | None = None
    left: dict[str, set[str]] | None = None

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        finalizers = (patch.get("metadata") or {}).get("finalizers")
        releases = finalizers is not None and POOL_FINALIZER not in finalizers
        if kind.kind == "GPUCellPool" and releases and self.snapshot is not None:
            assert namespace
            self.left = await self.snapshot(self.inner, namespace)
        return await super().patch(kind, namespace, name, patch, status)


def swiftguest_leftovers(workload_api: KubeApi, ident: PoolIdentity) -> Snapshot:
    """What a SwiftGuest pool's cells consist of: guests, seeds, bootstrap Secrets, Nodes."""

    async def snapshot(infra: KubeApi, namespace: str) -> dict[str, set[str]]:
        sel = f"cells.kubeswift.io/pool-id={ident.pool_id}"
        return {
            "SwiftGuest": await names(infra, "SwiftGuest", namespace),
            "SwiftSeedProfile": await names(infra, "SwiftSeedProfile", namespace),
            "Secret": await names(infra, "Secret", namespace, sel),
            "Node": await cell_nodes(workload_api, ident),
        }

    return snapshot
