"""The provisioner's part of the object graph, built by the composition root (``gpucellpool.app``).

Why this module exists: ``gpucellpool run`` both decides and acts; the acting side is its own
cluster of objects (the reconciler and its rule gate, the per-pool driver, the infrastructure
Node mirror, the SwiftGuest and Machine watches that wake the driver) with its own internal
wiring. Building that cluster here keeps ``App`` short and still the one root: ``App`` calls
``ProvisionerSide`` with the shared client, clock and metrics, and routes pool events to it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpucellpool.infra_nodes import InfraNodes
from gpucellpool.kube.cache import JSON, Query, WatchCache
from gpucellpool.kube.connections import Connections
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.workload import WorkloadCluster, WorkloadClusters
from gpucellpool.metrics import OperatorMetrics
from gpucellpool.provisioning import ProvisionerDriver, owner_pool
from provisioner.cached_reads import CachedReads, Store, StoreLookup
from provisioner.kube import FIELD_MANAGER, KubeApi, RestKubeApi, api_from_kubeconfig
from provisioner.outer_drain import NodeGets
from provisioner.reconciler import Reconciler
from provisioner.rule_gate import PoolRules
from provisioner.workload import NODE_LEASE_NAMESPACE
from webhook.rules import RuleSettings, validate_create

SWIFTGUESTS_PATH = "/apis/swift.kubeswift.io/v1alpha1/swiftguests"
MACHINES_PATH = "/apis/cluster.x-k8s.io/v1beta2/machines"
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

    def store(self, kind: str, namespace: str | None, name: str) -> Store | None:
        """The cache mirroring that object (name "": its collection), or None (a GET)."""
        if kind == "GPUCellPool":
            return self._of_namespace(self.pool_caches(), namespace)
        if kind == "SwiftGuest":
            return self._of_namespace(self.guest_caches(), namespace)
        if kind == "Secret" and namespace and (cluster := self._cluster(namespace, name)):
            return cluster.secret
        return None

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
    ) -> None:
        """``state``: the caches a pass reads its pool and kubeconfig Secret from (None: GET);
        its SwiftGuests come from this side's own SwiftGuest watches then."""
        operator_api: KubeApi = RestKubeApi(infra.for_manager(FIELD_MANAGER, api_timeout_s))
        if state is not None:
            state = replace(state, guest_caches=lambda: self.guests)
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
        self.guests = [
            WatchCache(infra, Query(collection_path(ns, SWIFTGUESTS_PATH)), self._guest_changed)
            for ns in namespaces
        ]
        machines = [
            WatchCache(infra, Query(collection_path(ns, MACHINES_PATH)), self._outer_changed)
            for ns in namespaces
        ]
        self.outer = [*self.guests, *machines]

    def watches(self) -> list[WatchCache]:
        """The caches to run while this process provisions."""
        return [*self.outer, self.nodes.cache]

    def pool_event(self, kind: str, raw: JSON) -> None:
        self.nodes.pool_changed(kind, raw)
        self.driver.pool_event(kind, raw)

    async def close(self) -> None:
        await self.driver.close()
        await self.reconciler.close()

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
