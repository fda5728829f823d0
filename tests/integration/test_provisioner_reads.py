"""An idle pass's requests, before and after it reads the operator's caches (issue 13).

What this proves, on real apiservers with the twin: an idle Ready pool of 3 cells costs a pass
one GET of the pool, one of the kubeconfig Secret, two per cell of its Node, one per cell of its
kubelet Lease and a ``/version`` probe when it reads the apiservers; on the caches the
composition root owns (``provisioner_wiring.ClusterState``: the pool and SwiftGuest watches,
the infrastructure Node watch, the workload cluster's Secret, Node and node Lease watches,
the SwiftSeedProfile and labelled-Secret watches and the ResourceSlice mirror) through
``CachedReads`` the same pass does none of them, nor its lists of SwiftGuests, SwiftSeedProfiles,
bootstrap Secrets and infrastructure ResourceSlices, of the
pool's workload Nodes and of each cell's pods (the live Nodes watch vouches for the cluster
instead of the probe), and the pool still
converges through those caches (each pass sees its own writes: ``CachedReads``'
read-your-writes rule). And a cluster that goes away while that watch is live (every connection
to it cut) is still reported ``Unreachable`` at once: the broken watch no longer vouches, the
pass probes. An evict drain on the caches (the node's pods listed from the Pods cache, fresh
after each eviction) evicts each pod exactly once. The counts are printed (``-s``) for
docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gpucellpool.kube.cache import Query, WatchCache
from gpucellpool.kube.rest import RestClient, client_from_kubeconfig
from gpucellpool.kube.workload import ClusterKey, WorkloadCluster, WorkloadClusters
from gpucellpool.operator.adapters import POOLS_PATH
from gpucellpool.operator.infra_nodes import InfraNodes
from gpucellpool.operator.provisioner_wiring import (
    SWIFTGUESTS_PATH,
    ClusterState,
    InventoryMirrors,
    collection_path,
    own_object_watches,
)
from provisioner.cached_reads import CachedReads
from provisioner.kube import KINDS, KubeApi, api_from_kubeconfig
from provisioner.outer_drain import NodeGets
from provisioner.reconciler import Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import KUBECONFIG_SECRET, dead_kubeconfig_secret, swiftguest_pool
from tests.integration.provisioner_support import (
    CountingKubeApi,
    RunningPool,
    apis,  # noqa: F401  (fixture)
    cond,
    gpu_pod,
    ready_with,
    row,
    running_pool,
)


@dataclass
class Counted:
    """Every client the reconciler uses: the infrastructure one and each workload one."""

    infra: CountingKubeApi
    workloads: list[CountingKubeApi] = field(default_factory=list)

    async def workload_factory(self, kubeconfig: Mapping[str, Any]) -> KubeApi:
        self.workloads.append(CountingKubeApi(await api_from_kubeconfig(kubeconfig)))
        return self.workloads[-1]

    def reset(self) -> None:
        for api in (self.infra, *self.workloads):
            api.reset()

    def pass_counts(self) -> tuple[Counter[str], Counter[str]]:
        workload: Counter[str] = Counter()
        for api in self.workloads:
            workload += api.counts()
        return self.infra.counts(), workload


async def _client(endpoint: ClusterEndpoint) -> RestClient:
    return await client_from_kubeconfig(yaml.safe_load(endpoint.kubeconfig_path.read_text()))


@pytest.fixture
async def infra_rest(infra: ClusterEndpoint) -> AsyncIterator[RestClient]:
    client = await _client(infra)
    yield client
    await client.close()


async def _caught_up(cache: WatchCache, infra_api: KubeApi, ns: str, name: str) -> None:
    """Poll until the pool cache holds the apiserver's current version of the pool."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        live = await infra_api.get(KINDS["GPUCellPool"], ns, name)
        cached = cache.get(f"{ns}/{name}")
        version = (live or {}).get("metadata", {}).get("resourceVersion")
        if cached is not None and cached["metadata"]["resourceVersion"] == version:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the pool cache never caught up with the apiserver")


async def _synced(cluster: WorkloadCluster) -> None:
    """Poll until the workload cluster's Secret and Pods/Nodes/Namespaces caches are synced."""
    deadline = time.monotonic() + 60
    while not (cluster.secret.synced.is_set() and cluster.synced()):
        assert time.monotonic() < deadline, f"workload caches never synced: {cluster.error}"
        await asyncio.sleep(0.05)


async def _leases_synced(cluster: WorkloadCluster) -> None:
    """Poll until the node Lease cache (started by the first pass's Lease read) is synced."""
    deadline = time.monotonic() + 60
    while not (cluster.leases is not None and cluster.leases.synced.is_set()):
        assert time.monotonic() < deadline, "the node Lease cache never synced"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def on_the_caches(
    scene: RunningPool, infra_rest: RestClient, counted: Counted
) -> AsyncIterator[tuple[CachedReads, WatchCache, WorkloadCluster]]:
    """Restart the scene's operator on the caches the composition root owns (the pool watch,
    the workload cluster's watches) through ``CachedReads``, its clients counted by
    ``counted``; return once every cache it reads is synced and has seen one pass."""
    namespace = scene.key.namespace
    pools = WatchCache(infra_rest, Query(collection_path(namespace, POOLS_PATH)))
    guests = WatchCache(infra_rest, Query(collection_path(namespace, SWIFTGUESTS_PATH)))
    clusters = WorkloadClusters(infra_rest, _workload_client, lambda *_: None)
    cluster = clusters.ensure(ClusterKey(namespace, KUBECONFIG_SECRET))
    hosts = InfraNodes(infra_rest, NodeGets(counted.infra), lambda _: None)
    seeds, labelled = own_object_watches(infra_rest, (namespace,), (namespace,))
    inventory = InventoryMirrors(infra_rest)
    mirrors = (pools, guests, hosts.cache, *seeds, *labelled.values())
    tasks = [asyncio.create_task(c.run()) for c in mirrors]
    try:
        state = ClusterState(
            (namespace,),
            lambda: [pools],
            clusters,
            lambda: [guests],
            lambda: seeds,
            lambda: labelled,
            inventory.store,
        )
        reads = CachedReads(counted.infra, state.store)
        await scene.reconciler.close()  # an operator restart, now on the caches
        scene.reconciler = Reconciler(
            reads,
            scene.clock,
            workload_factory=counted.workload_factory,
            workload_reads=state.workload_reads,
            workload_live=state.workload_live,
            hosts=hosts,
        )
        for cache in mirrors:
            await asyncio.wait_for(cache.synced.wait(), 60)
        await _synced(cluster)
        await scene.passes(1)
        await _leases_synced(cluster)
        for ledger in inventory.caches.values():  # started by that pass's first read
            await asyncio.wait_for(ledger.synced.wait(), 60)
        await _caught_up(pools, counted.infra.inner, namespace, scene.key.name)
        yield reads, pools, cluster
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await clusters.close()
        await inventory.close()


async def _measure(scene: RunningPool, counted: Counted) -> tuple[Counter[str], Counter[str]]:
    return await _measure_one(scene, counted, ready=3)


async def _measure_one(
    scene: RunningPool,
    counted: Counted,
    ready: int,
    settled: Callable[[], Awaitable[None]] | None = None,
) -> tuple[Counter[str], Counter[str]]:
    """The requests of one idle pass of the Ready pool of ``ready`` cells (infra, workload).

    ``settled`` runs before the measured pass: on the caches, until the pool cache has seen
    the warm-up pass's own status write (before that, reading the pool is rightly a GET)."""
    await scene.converge(ready_with(ready), timeout_s=120)
    await scene.passes(1)  # one more pass: the Ready pool's first idle pass
    if settled is not None:
        await settled()
    counted.reset()
    result = await scene.reconciler.reconcile_once(scene.key)
    assert result.ready == ready
    return counted.pass_counts()


async def test_an_idle_pass_reads_the_pool_and_kubeconfig_from_the_caches(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    infra_rest: RestClient,
) -> None:
    infra_api, _ = apis
    name = f"rd-{namespace[-6:]}"
    before = Counted(CountingKubeApi(infra_api))
    options: Any = {"workload_factory": before.workload_factory}
    pool = swiftguest_pool(name, namespace, 3)
    async with running_pool(apis, workload, pool, operator_api=before.infra, **options) as scene:
        infra_before, workload_before = await _measure(scene, before)
        print(f"\nuncached idle pass: infra {dict(infra_before)} workload {dict(workload_before)}")
        assert infra_before["get GPUCellPool"] == 1
        assert infra_before["get Secret"] >= 1  # the kubeconfig (and the join template)
        assert workload_before["version"] == 1
        # each cell's Node twice (its state, then its HAMi capacity) and its kubelet Lease
        assert (workload_before["get Node"], workload_before["get Lease"]) == (6, 3)

        after = Counted(CountingKubeApi(infra_api))
        async with on_the_caches(scene, infra_rest, after) as (reads, pools, _):
            ns, key = scene.key.namespace, scene.key.name
            settled = functools.partial(_caught_up, pools, after.infra.inner, ns, key)
            infra_after, workload_after = await _measure_one(scene, after, 3, settled)
        print(f"cached idle pass: infra {dict(infra_after)} workload {dict(workload_after)}")
        print(
            f"requests per idle pass: {infra_before.total() + workload_before.total()} -> "
            f"{infra_after.total() + workload_after.total()}"
        )
        assert workload_after["get Node"] == 0  # the cluster's Node cache answered
        assert workload_after["get Lease"] == 0  # and its node Lease cache
        assert workload_after["version"] == 0  # its live Nodes watch vouched: no probe
        assert workload_after["list Node"] == 0  # the pool's Nodes, listed from that cache
        assert workload_after["list Pod"] == 0  # each cell's pods, from the Pods cache
        assert infra_after["list SwiftGuest"] == 0  # the cells, from the SwiftGuest watch
        assert infra_after["get Node"] == 0  # their hosts, from the infrastructure Node watch
        assert infra_after["get GPUCellPool"] == 0
        assert infra_after["get Secret"] == infra_before["get Secret"] - 1  # join template only
        # the sweep's lists (SwiftSeedProfile watch, labelled-Secret watch) and the physical
        # GPU ledger (the ResourceSlice mirror started by the first pass's read)
        assert infra_after["list SwiftSeedProfile"] == 0
        assert infra_after["list Secret"] == 0
        assert infra_after["list ResourceSlice"] == 0
        # what is left: the join-template Secret GET and the status apply
        assert infra_after.total() == 2, dict(infra_after)
        assert reads.served >= 2
        assert infra_after.total() < infra_before.total()


async def _workload_client(kubeconfig: Mapping[str, Any]) -> RestClient:
    return await client_from_kubeconfig(kubeconfig)


class Relay:
    """A TCP relay on loopback to an apiserver; ``cut`` closes it and every connection through
    it, so a client of the relay finds the cluster gone (refused from then on)."""

    def __init__(self, url: str) -> None:
        target = urlsplit(url)
        self._target = (target.hostname or "127.0.0.1", target.port or 443)
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers += [writer, up_writer]
        await asyncio.gather(
            _pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True
        )

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def test_a_cluster_cut_off_under_a_live_watch_is_unreachable_at_the_next_pass(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    infra_rest: RestClient,
) -> None:
    infra_api, _ = apis
    relay = Relay(workload.url)
    port = await relay.start()
    name = f"cut-{namespace[-6:]}"
    counted = Counted(CountingKubeApi(infra_api))
    options: Any = {"workload_factory": counted.workload_factory}
    pool = swiftguest_pool(name, namespace, 1)
    async with running_pool(apis, workload, pool, operator_api=counted.infra, **options) as scene:
        # The operator reaches the workload cluster only through the relay.
        await infra_api.apply(
            dead_kubeconfig_secret(namespace, workload.kubeconfig_path.read_text(), port)
        )
        await scene.converge(ready_with(1), timeout_s=120)
        async with on_the_caches(scene, infra_rest, counted) as (_, _, cluster):
            _, idle = await _measure_one(scene, counted, ready=1)
            assert idle["version"] == 0 and cluster.nodes is not None and cluster.nodes.live
            await relay.cut()
            deadline = time.monotonic() + 60
            while cluster.nodes is not None and cluster.nodes.live:
                assert time.monotonic() < deadline, "the Nodes watch never noticed the cut"
                await asyncio.sleep(0.05)
            counted.reset()
            await scene.passes(1)
            _, workload_counts = counted.pass_counts()
            assert workload_counts["version"] == 1  # the broken watch vouches no more
            raw = await infra_api.get(KINDS["GPUCellPool"], namespace, name)
            reachable = cond(raw, "WorkloadClusterReachable")
            assert (reachable["status"], reachable["reason"]) == ("False", "Unreachable")


async def test_an_evict_drain_on_the_caches_evicts_each_pod_once(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
    infra_rest: RestClient,
) -> None:
    infra_api, workload_api = apis
    name = f"ev-{namespace[-6:]}"
    counted = Counted(CountingKubeApi(infra_api))
    options: Any = {"workload_factory": counted.workload_factory, "run_pods": True}
    pool = swiftguest_pool(name, namespace, 2, autoscaling={"drain": {"mode": "Evict"}})
    async with running_pool(apis, workload, pool, operator_api=counted.infra, **options) as scene:
        await scene.converge(ready_with(2), timeout_s=120)
        async with on_the_caches(scene, infra_rest, counted) as (reads, _, cluster):
            for pod in ("a", "b"):
                await workload_api.create(gpu_pod(namespace, f"trainer-{pod}", f"{name}-1"))
            deadline = time.monotonic() + 60  # the drain must see both pods in the cache
            while (
                len(
                    [
                        p
                        for p in (cluster.pods.items() if cluster.pods else [])
                        if p["metadata"]["namespace"] == namespace
                    ]
                )
                < 2
            ):
                assert time.monotonic() < deadline, "the Pods cache never saw the trainers"
                await asyncio.sleep(0.05)
            fresh = counted.workloads[-1]
            fresh.reset()
            await scene.scale(1)
            done = await scene.converge(ready_with(1), timeout_s=120)
            assert done is not None
            assert [c["name"] for c in done["status"]["cells"]] == [f"{name}-0"]
            evictions = fresh.of("evict", "Pod")
            assert sorted(c.name for c in evictions if c.outcome == "ok") == [
                "trainer-a",
                "trainer-b",
            ]  # each pod evicted exactly once: the drain never read a pod it had evicted
            assert reads.served > 0
            assert row(done, f"{name}-1") == {}
