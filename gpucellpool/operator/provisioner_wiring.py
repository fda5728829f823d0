"""The provisioner's part of the object graph, built by the composition root
(``gpucellpool.operator.app``).

Why this module exists: ``gpucellpool run`` both decides and acts; the acting side is its own
cluster of objects (the reconciler and its rule gate, the per-pool driver, the infrastructure
Node mirror, the SwiftGuest and Machine watches that wake the driver) with its own internal
wiring. Building that cluster here keeps ``App`` short and still the one root: ``App`` calls
``ProvisionerSide`` with the shared client, clock and metrics, and routes pool events to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpucellpool.kube.cache import JSON, ListWatch, Query, WatchCache
from gpucellpool.kube.connections import Connections
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.workload import WorkloadCluster, WorkloadClusters
from gpucellpool.operator.infra_nodes import InfraNodes
from gpucellpool.operator.metrics import OperatorMetrics
from gpucellpool.operator.provisioning import ProvisionerDriver, owner_pool
from provisioner.cached_reads import CachedReads, Store, StoreLookup
from provisioner.fsm.identity import POOL_ID_LABEL
from provisioner.inventory import RESOURCE_SLICE, SWIFT_GPU_NODE
from provisioner.kube import FIELD_MANAGER, KINDS, KubeApi, RestKubeApi, api_from_kubeconfig
from provisioner.outer_drain import NodeGets
from provisioner.reconciler import Reconciler
from provisioner.rule_gate import PoolRules
from provisioner.workload import NODE_LEASE_NAMESPACE
from webhook.rules import RuleSettings, validate_create

SWIFTGUESTS_PATH = "/apis/swift.kubeswift.io/v1alpha1/swiftguests"
MACHINES_PATH = "/apis/cluster.x-k8s.io/v1beta2/machines"
SEEDS_PATH = KINDS["SwiftSeedProfile"].path()
SECRETS_PATH = KINDS["Secret"].path()
INVENTORY_KINDS = {k.kind: k.path() for k in (RESOURCE_SLICE, SWIFT_GPU_NODE)}
"""The cluster-scoped physical GPU ledgers a pass lists, mirrored from their first read."""
INFRA_WATCHES = {
    "swiftseedprofiles": "each watched namespace",
    "secrets": f"each served namespace, labelled {POOL_ID_LABEL} only",
    "resourceslices": "cluster-wide",
    "swiftgpunodes": "cluster-wide",
}
"""What the provisioner lists and watches on the infrastructure cluster for a pass's reads,
besides pools, SwiftGuests, Machines and Nodes (the chart must grant list and watch)."""


def _no_inventory(kind: str) -> Store | None:
    del kind
    return None


WORKLOAD_KINDS = ("Node", "Lease", "ResourceSlice", "ResourceClaim", "Pod")
"""The workload cluster kinds a pass reads from ``WorkloadCluster``'s caches."""


def pool_rules(settings: RuleSettings) -> PoolRules:
    """The webhook's create-time rules, as the provisioner re-runs them before launching."""
    return lambda raw: validate_create(raw, settings).reasons


def collection_path(ns: str | None, cluster_path: str) -> str:
    """The collection path, narrowed to namespace ``ns`` (None: all namespaces)."""
    if not ns:
        return cluster_path
    head, _, plural = cluster_path.rpartition("/")
    return f"{head}/namespaces/{ns}/{plural}"


def shared_workload_apis(
    connections: Connections,
) -> Callable[[Mapping[str, Any]], Awaitable[KubeApi]]:
    """The provisioner's workload clients on the connections the autoscaler's caches use
    (``gpucellpool.kube.connections``), writing as the provisioner (``gpucellpool``)."""

    async def connect(kubeconfig: Mapping[str, Any]) -> KubeApi:
        return RestKubeApi(await connections.acquire(kubeconfig, FIELD_MANAGER))

    return connect


@dataclass(frozen=True, slots=True)
class ClusterState:
    """The composition root's caches a pass reads instead of GETting (``CachedReads``): the
    pool watches and the SwiftGuest watches (one per watched namespace, in ``namespaces``
    order; built after the provisioner, hence getters; ``ProvisionerSide`` fills in its
    SwiftGuest watches) and each workload cluster's kubeconfig Secret watch."""

    namespaces: tuple[str | None, ...]
    pool_caches: Callable[[], Sequence[WatchCache]]
    clusters: WorkloadClusters
    guest_caches: Callable[[], Sequence[WatchCache]] = tuple
    seed_caches: Callable[[], Sequence[WatchCache]] = tuple
    """SwiftSeedProfile watches, one per watched namespace (``namespaces`` order)."""
    secret_caches: Callable[[], Mapping[str, WatchCache]] = dict
    """By namespace: the watch of the Secrets the operator labels (``POOL_ID_LABEL``: the
    bootstrap Secrets it renders), in the namespaces it serves only."""
    inventory: Callable[[str], Store | None] = _no_inventory
    """By kind: the mirror of a cluster-scoped GPU ledger (``INVENTORY_KINDS``), or None."""

    def store(self, kind: str, namespace: str | None, name: str) -> Store | None:
        """The cache mirroring that object (name "": its collection), or None (a GET).

        A Secret list is answered from the labelled-Secrets watch: every Secret list of a pass
        selects on ``POOL_ID_LABEL`` (the sweeps'), so the watch holds all it may select. A
        Secret read by name is the kubeconfig watch's, or a GET (the join template: no cache
        mirrors the pool author's Secrets); the operator's writes of labelled Secrets are not
        tracked, so a list may lag them by an event (a sweep then deletes one twice: gone)."""
        by_namespace = {
            "GPUCellPool": self.pool_caches,
            "SwiftGuest": self.guest_caches,
            "SwiftSeedProfile": self.seed_caches,
        }
        if kind in by_namespace:
            return self._of_namespace(by_namespace[kind](), namespace)
        if kind in INVENTORY_KINDS and namespace is None and not name:
            return self.inventory(kind)
        if kind != "Secret" or not namespace:
            return None
        if not name:
            return self.secret_caches().get(namespace)
        cluster = self._cluster(namespace, name)
        return cluster.secret if cluster is not None else None

    def _of_namespace(self, caches: Sequence[WatchCache], namespace: str | None) -> Store | None:
        """The watch (of ``caches``, in ``namespaces`` order) that covers ``namespace``."""
        for ns, cache in zip(self.namespaces, caches, strict=False):
            if ns is None or ns == namespace:
                return cache
        return None

    def _cluster(self, namespace: str, secret: str) -> WorkloadCluster | None:
        """The workload cluster the operator reaches through that kubeconfig Secret."""
        for key, cluster in list(self.clusters.clusters.items()):
            if (key.namespace, key.secret) == (namespace, secret):
                return cluster
        return None

    def workload_reads(self, namespace: str, secret: str) -> StoreLookup:
        """The caches of the workload cluster the Secret reaches: its Nodes, Pods, node Leases
        and (in HAMi's DRA mode) ResourceSlices and ResourceClaims, looked up at each read, so
        a rebuilt cluster's new caches are used (none yet: GET). The first Lease read starts
        that cluster's Lease watch (``watch_leases``). An evicted pod keeps the Pods lists
        fresh until the cache has dropped it (``CachedReads``)."""

        def store(kind: str, ns: str | None, name: str) -> Store | None:
            if kind not in WORKLOAD_KINDS or not (cluster := self._cluster(namespace, secret)):
                return None
            if kind == "Lease":
                if ns != NODE_LEASE_NAMESPACE:
                    return None
                cluster.watch_leases()
            caches = (cluster.nodes, cluster.leases, cluster.slices, cluster.claims, cluster.pods)
            return dict(zip(WORKLOAD_KINDS, caches, strict=True))[kind]

        return store

    def workload_live(self, namespace: str, secret: str, kubeconfig: str | None) -> bool:
        """Whether the workload cluster that Secret reaches holds a live watch on exactly that
        kubeconfig (``WorkloadCluster.live_on``): proof enough that it is reachable."""
        cluster = self._cluster(namespace, secret)
        return cluster is not None and cluster.live_on(kubeconfig)


def own_object_watches(
    infra: ListWatch, namespaces: Sequence[str | None], secret_namespaces: Sequence[str]
) -> tuple[list[WatchCache], dict[str, WatchCache]]:
    """The SwiftSeedProfile watches (one per watched namespace) and the watches of the Secrets
    the operator labels (one per namespace where it may list Secrets), for ``ClusterState``."""
    seeds = [WatchCache(infra, Query(collection_path(ns, SEEDS_PATH))) for ns in namespaces]
    secrets = {
        ns: WatchCache(infra, Query(collection_path(ns, SECRETS_PATH), POOL_ID_LABEL))
        for ns in secret_namespaces
    }
    return seeds, secrets


class InventoryMirrors:
    """The cluster-scoped GPU ledgers (``INVENTORY_KINDS``), each mirrored from the first read
    of it on: only the ledger some pool's backend uses is watched (a cluster without KubeSwift's
    SwiftGPUNodes, or without DRA, is not watched for them). Until synced a read is a GET."""

    def __init__(self, infra: ListWatch) -> None:
        self._infra = infra
        self.caches: dict[str, WatchCache] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def store(self, kind: str) -> Store | None:
        path = INVENTORY_KINDS.get(kind)
        if path is None:
            return None
        cache = self.caches.get(kind)
        if cache is None:
            cache = self.caches[kind] = WatchCache(self._infra, Query(path))
            self._tasks.append(asyncio.create_task(cache.run(), name=f"watch:{path}"))
        return cache

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []


class ProvisionerSide:
    """The reconciler, its driver, the Node mirror and the outer-object watches that wake it."""

    def __init__(
        self,
        infra: RestClient,
        clock: Any,
        metrics: OperatorMetrics,
        rules: RuleSettings,
        api_timeout_s: float,
        namespaces: tuple[str | None, ...],
        is_leader: Callable[[], bool],
        connections: Connections | None = None,
        *,
        state: ClusterState | None = None,
        secret_namespaces: tuple[str, ...] = (),
    ) -> None:
        """``state``: the caches a pass reads its pool and kubeconfig Secret from (None: GET);
        its SwiftGuests, SwiftSeedProfiles, labelled Secrets (in ``secret_namespaces``, where
        the operator may list Secrets; none: GETs) and GPU ledgers come from this side's own
        watches then."""
        operator_api: KubeApi = RestKubeApi(infra.for_manager(FIELD_MANAGER, api_timeout_s))
        self.inventory = InventoryMirrors(infra)
        self.seeds: list[WatchCache] = []
        self.secrets: dict[str, WatchCache] = {}
        if state is not None:
            self.seeds, self.secrets = own_object_watches(infra, namespaces, secret_namespaces)
            state = self._with_own_caches(state)
            operator_api = CachedReads(operator_api, state.store)
        workloads = shared_workload_apis(connections) if connections else api_from_kubeconfig
        # Infrastructure Nodes: the outer-node drain's reads, and a cordon wakes its pools
        # (through the driver, built below from the reconciler that reads them).
        self.nodes = InfraNodes(infra, NodeGets(operator_api), self._wake)
        self.reconciler = Reconciler(
            operator_api,
            clock,
            metrics=metrics,
            rules=pool_rules(rules),
            hosts=self.nodes,
            workload_factory=workloads,
            workload_reads=state.workload_reads if state is not None else None,
            workload_live=state.workload_live if state is not None else None,
        )
        self.driver = ProvisionerDriver(self.reconciler, clock, is_leader)
        self.guests, self.outer = self._outer_watches(infra, namespaces)

    def _with_own_caches(self, state: ClusterState) -> ClusterState:
        """``state`` reading this side's own watches (SwiftGuests, seeds, Secrets, ledgers)."""
        return replace(
            state,
            guest_caches=lambda: self.guests,
            seed_caches=lambda: self.seeds,
            secret_caches=lambda: self.secrets,
            inventory=self.inventory.store,
        )

    def _outer_watches(
        self, infra: RestClient, namespaces: tuple[str | None, ...]
    ) -> tuple[list[WatchCache], list[WatchCache]]:
        """The SwiftGuest caches, and every outer-object cache (them and Machines) that wakes
        the pool owning a changed object."""
        guests = [
            WatchCache(infra, Query(collection_path(ns, SWIFTGUESTS_PATH)), self._guest_changed)
            for ns in namespaces
        ]
        machines = [
            WatchCache(infra, Query(collection_path(ns, MACHINES_PATH)), self._outer_changed)
            for ns in namespaces
        ]
        return guests, [*guests, *machines]

    def watches(self) -> list[WatchCache]:
        """The caches to run while this process provisions."""
        return [*self.outer, self.nodes.cache, *self.seeds, *self.secrets.values()]

    def pool_event(self, kind: str, raw: JSON) -> None:
        self.nodes.pool_changed(kind, raw)
        self.driver.pool_event(kind, raw)

    async def close(self) -> None:
        await self.driver.close()
        await self.reconciler.close()
        await self.inventory.close()

    def _wake(self, pool: tuple[str, str]) -> None:
        self.driver.wake(pool)

    def _guest_changed(self, kind: str, obj: JSON) -> None:
        self.nodes.guest_changed(kind, obj)  # where the pool's cells are, for Node wake-ups
        self._outer_changed(kind, obj)

    def _outer_changed(self, kind: str, obj: JSON) -> None:
        del kind
        owner = owner_pool(obj)
        if owner is not None:
            self.driver.wake(owner)
