"""The simulated Cluster API reconciles its Machines concurrently, as CAPI's workers do.

What this proves, on real apiservers: in one pass of ``SimulatedClusterAPI`` every Machine's
reconcile has asked for its KubeSwiftMachine before any of them was answered - a rendezvous
that only concurrent passes can meet - and the pools still converge to one Ready cell each.
The contrast in the same test (``concurrency=1``, the old one-object-after-another pass) misses
the rendezvous: its first Machine waits alone until the deadline. Why it matters: a sequential
pass costs every object's requests one after another, and on a loaded machine that made a
pass over a crash suite's 31 pools take 18-19 s (load 13), so pools needing several passes
missed their convergence deadline (``test_second_crash_during_recovery_of_a_creating_pass``
failed 3 of 8 runs at load 10-15).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from gpucellpool.runtime.clock import SystemClock
from provisioner.kube import JSON, KINDS, Kind, KubeApi
from provisioner.kube_delegate import DelegatingKubeApi
from provisioner.reconciler import PoolKey, Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.capi import SimulatedClusterAPI
from simulations.twin.kubeswift import SimulatedKubeSwift
from simulations.twin.node_agent import SimulatedNodeAgent
from simulations.twin.scenario import clusterapi_pool, converge
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    ready_with,
    setup_pool,
)
from tests.integration.twin_support import running

RENDEZVOUS_S = 20.0  # how long the first Machine waits for the others (the contrast's cost)
WORKERS = 16  # SimulatedClusterAPI.concurrency's default


@dataclass
class Rendezvous(DelegatingKubeApi):
    """The Cluster API twin's infrastructure client: the first read of each KubeSwiftMachine
    in ``names`` is answered only once all of them have been asked for (or at the deadline,
    which ``met`` then says)."""

    names: frozenset[str] = frozenset()
    asked: set[str] = field(default_factory=set)
    everyone: asyncio.Event = field(default_factory=asyncio.Event)
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    met: bool | None = None

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        if kind.kind == "KubeSwiftMachine" and name in self.names - self.asked:
            self.asked.add(name)
            if self.asked == self.names:
                self.everyone.set()
            try:
                await asyncio.wait_for(self.everyone.wait(), RENDEZVOUS_S)
            except TimeoutError:
                self.met = False
                self.everyone.set()  # the deadline passed: let every waiter go
            self.met = self.met is not False
            self.decided.set()
        return await self.inner.get(kind, namespace, name)


def twin(
    infra: KubeApi, workload: KubeApi, namespace: str, capi: SimulatedClusterAPI
) -> contextlib.AbstractAsyncContextManager[None]:
    clock = SystemClock()
    return running(
        SimulatedKubeSwift(infra, clock, namespace),
        SimulatedNodeAgent(infra, workload, clock, namespace),
        capi,
    )


async def _pools(
    infra: KubeApi, workload: ClusterEndpoint, namespace: str, names: list[str]
) -> list[PoolKey]:
    """ClusterAPI pools of one cell whose first pass has created each Machine."""
    keys = [await setup_pool(infra, workload, clusterapi_pool(n, namespace, 1)) for n in names]
    for key in keys:
        first = Reconciler(infra, SystemClock())
        try:
            await first.reconcile_once(key)
        finally:
            await first.close()
    machines = {m["metadata"]["name"] for m in await infra.list(KINDS["Machine"], namespace)}
    assert {f"{n}-0" for n in names} <= machines
    return keys


async def _run(
    clients: tuple[KubeApi, KubeApi], workload: ClusterEndpoint, namespace: str, concurrency: int
) -> bool | None:
    """Whether one pass met the rendezvous, the pools converging either way."""
    infra_api, workload_api = clients
    names = [f"{tag}{concurrency}-{namespace[-6:]}" for tag in ("ca", "cb", "cc")]
    keys = await _pools(infra_api, workload, namespace, names)
    witness = Rendezvous(infra_api, frozenset(f"{n}-0" for n in names))
    capi = SimulatedClusterAPI(witness, workload_api, SystemClock(), namespace)
    capi.concurrency = concurrency
    async with twin(infra_api, workload_api, namespace, capi):
        await asyncio.wait_for(witness.decided.wait(), RENDEZVOUS_S + 60)
        for key in keys:
            reconciler = Reconciler(infra_api, SystemClock())
            try:
                await converge(reconciler, key, ready_with(1), timeout_s=120, pass_interval_s=0.3)
            finally:
                await reconciler.close()
    return witness.met


async def test_capi_twin_reconciles_machines_concurrently(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    assert await _run(apis, workload, namespace, WORKERS) is True
    assert await _run(apis, workload, namespace, 1) is False  # one after another: missed
    assert SimulatedClusterAPI.concurrency == WORKERS  # what the suites run with
