"""The autoscaler's ports implemented over the REST client and the watch caches.

Why this module exists: the loop and the elector depend on small Protocols (``PoolWriter``,
``WorkloadView``, ``UsageSource``, ``LeaseApi``); this is where they meet the real API. Every
call goes through ``RestClient`` and so carries a timeout; Events go through the one sink
(``gpucellpool.kube.events``), which logs and drops one it cannot post.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from autoscaler.loop_ports import WorkloadSnapshot
from autoscaler.pod_index import PodIndex, index_pods
from autoscaler.policy.types import GPUUsage, MetricsHealth
from autoscaler.signals.hami_activity import ActivityReading, Verdict, failed
from autoscaler.signals.ports import PrometheusUnavailable
from autoscaler.signals.prometheus import PrometheusSource
from autoscaler.signals.prometheus_config import source_from_spec
from gpucellpool.api.pool import PLURAL, GPUCellPool
from gpucellpool.kube.cache import WatchCache
from gpucellpool.kube.errors import Conflict, KubeError, RetryPolicy
from gpucellpool.kube.events import EventNote, EventSink, regarding, rest_creator
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.workload import ClusterKey, WorkloadClusters
from gpucellpool.runtime.leader import LeaseConflict

JSON = dict[str, Any]
log = logging.getLogger(__name__)
POOLS_PATH = f"/apis/cells.kubeswift.io/v1alpha1/{PLURAL}"
REPORTING_CONTROLLER = "cells.kubeswift.io/gpucellpool-autoscaler"
NO_RETRY = RetryPolicy(attempts=0)
NamespaceLabels = Mapping[str, Mapping[str, str]]


def pool_path(namespace: str, name: str) -> str:
    return f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{namespace}/{PLURAL}/{name}"


class KubePoolWriter:
    """Status (with the policy memory) by server-side apply (own field manager), Events v1."""

    def __init__(self, client: RestClient, identity: str, clock: Any) -> None:
        self.client, self.identity, self.clock = client, identity, clock
        self.events = EventSink(rest_creator(client), clock.now, REPORTING_CONTROLLER, identity)

    async def apply_status(self, body: JSON) -> None:
        meta = body["metadata"]
        # The answer (the whole pool object) is not read: its watch event brings it anyway.
        path = pool_path(meta["namespace"], meta["name"])
        await self.client.apply_status(path, body, answer=False)

    async def event(self, pool: GPUCellPool, reason: str, note: str, warning: bool) -> None:
        """One Event about the pool through the one sink (never raises)."""
        await self.events.post(regarding(pool), EventNote(reason, note, "Scale", warning))


class CacheWorkloadView:
    """``WorkloadView`` over the shared per-cluster caches.

    The pods are indexed (``index_pods``) once per change of a cluster's Pods cache and the
    index is handed to every pool of that cluster, so no pool's decision walks every pod of the
    cluster. (The app's ``RoutedWorkloadView`` prefers the index kept from routed events, and
    ``autoscaler.routing`` decides which pools an event wakes.)
    """

    def __init__(self, clusters: WorkloadClusters) -> None:
        self.clusters = clusters
        self._indexes: dict[ClusterKey, tuple[WatchCache, int, PodIndex]] = {}
        self._labels: dict[ClusterKey, tuple[WatchCache, int, NamespaceLabels]] = {}

    def pod_index(self, key: ClusterKey, pods: WatchCache) -> PodIndex:
        cached = self._indexes.get(key)
        if cached is not None and cached[0] is pods and cached[1] == pods.version:
            return cached[2]
        index = index_pods(pods.objects.values())
        self._indexes[key] = (pods, pods.version, index)
        return index

    def namespace_labels(self, key: ClusterKey, namespaces: WatchCache | None) -> NamespaceLabels:
        """Each Namespace's labels, mapped once per version of the cluster's Namespaces cache
        and shared by the pools deciding at that version (read-only)."""
        if namespaces is None:
            return {}
        cached = self._labels.get(key)
        if cached is not None and cached[0] is namespaces and cached[1] == namespaces.version:
            return cached[2]
        labels = MappingProxyType(
            {
                str(ns["metadata"]["name"]): dict(ns["metadata"].get("labels") or {})
                for ns in namespaces.items()
            }
        )
        self._labels[key] = (namespaces, namespaces.version, labels)
        return labels

    def cluster_of(self, pool: GPUCellPool) -> ClusterKey:
        wc = pool.spec.workload_cluster
        return ClusterKey(pool.metadata.namespace, wc.kubeconfig_secret_ref.name, wc.key)

    def identity(self, cluster: object) -> object:
        """The connection's ``WorkloadCluster.identity`` (its kube-system UID once learned)."""
        if not isinstance(cluster, ClusterKey):
            return cluster
        connection = self.clusters.clusters.get(cluster)
        return connection.identity if connection is not None else cluster

    def snapshot(self, pool: GPUCellPool) -> WorkloadSnapshot:
        key = self.cluster_of(pool)
        cluster = self.clusters.ensure(key)
        hami = pool.spec.capacity.hami
        if hami is not None and hami.mode == "DRA":
            cluster.watch_dra()
        if not cluster.synced() or cluster.pods is None or cluster.nodes is None:
            self._indexes.pop(key, None)
            return WorkloadSnapshot(False, error=cluster.error or "workload caches syncing")
        index = self.pod_index(key, cluster.pods)
        return WorkloadSnapshot(
            True,
            (),  # the pods are in ``pod_index``: nothing reads them as one list then
            cluster.nodes.frozen(),  # shared by the pools deciding at this cache version
            self.namespace_labels(key, cluster.namespaces),
            pod_index=index,
            claims=cluster.claims.items() if cluster.claims else (),
            slices=cluster.slices.items() if cluster.slices else (),
            nodes_by_name=cluster.nodes.frozen_by_key(),  # cluster-scoped: keyed by name
        )


class LeaseClient:
    """``LeaseApi`` for one Lease. A throttled lease request is not retried here: a round must
    end within the renew deadline, and the elector's next round (``retry_s`` later) is the
    retry."""

    def __init__(self, client: RestClient, namespace: str, name: str) -> None:
        self._client: RestClient | None = None
        self._shared = client
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.path = f"{self.collection}/{name}"

    @property
    def client(self) -> RestClient:
        """The shared connection, without throttling retries (made on first use)."""
        if self._client is None:
            self._client = self._shared.for_manager(self._shared.field_manager, retry=NO_RETRY)
        return self._client

    async def get(self) -> JSON | None:
        return await self.client.get(self.path)

    async def create(self, lease: JSON) -> JSON:
        try:
            return await self.client.create(self.collection, lease)
        except Conflict as exc:
            raise LeaseConflict(str(exc)) from exc

    async def replace(self, lease: JSON) -> JSON:
        try:
            return await self.client.replace(self.path, lease)
        except Conflict as exc:
            raise LeaseConflict(str(exc)) from exc


class PrometheusUsage:
    """``UsageSource``: one PrometheusSource per pool spec, Secrets read from the pool namespace.

    Every source checks each resolved address against ``gpucellpool.api.url_policy`` before it
    sends a request (and the token), with the cluster admin's ``allowed_hosts``.
    """

    def __init__(self, client: RestClient, clock: Any, allowed_hosts: Iterable[str] = ()) -> None:
        self.client, self.clock = client, clock
        self.allowed_hosts = frozenset(allowed_hosts)
        self._sources: dict[tuple[str, str], tuple[str, PrometheusSource]] = {}

    async def _secret_value(self, namespace: str, name: str, key: str) -> str | None:
        secret = await self.client.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        raw = ((secret or {}).get("data") or {}).get(key)
        return base64.b64decode(raw).decode() if raw else None

    async def _source(self, pool: GPUCellPool) -> PrometheusSource:
        spec = pool.spec.autoscaling.prometheus
        assert spec is not None
        key = (pool.metadata.namespace, pool.metadata.name)
        fingerprint = spec.model_dump_json()
        cached = self._sources.get(key)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        ns = pool.metadata.namespace
        token = ca = None
        if spec.auth_secret_ref is not None:
            token = await self._secret_value(
                ns, spec.auth_secret_ref.name, spec.auth_secret_ref.key
            )
        if spec.tls_secret_ref is not None:
            ca = await self._secret_value(ns, spec.tls_secret_ref.name, spec.tls_secret_ref.key)
        source = source_from_spec(
            spec, bearer_token=token, ca_pem=ca, clock=self.clock, allowed_hosts=self.allowed_hosts
        )
        if cached is not None:
            await cached[1].aclose()
        self._sources[key] = (fingerprint, source)
        return source

    async def usage(
        self, pool: GPUCellPool, nodes: Sequence[str]
    ) -> tuple[Mapping[str, tuple[GPUUsage, ...]] | None, MetricsHealth]:
        try:
            source = await self._source(pool)
            hami = pool.spec.capacity.hami
            dra = hami is not None and hami.mode == "DRA"
            reading = await source.node_gpu_usage(nodes, dra=dra)
        except (PrometheusUnavailable, ValueError, KubeError) as exc:
            detail = f"Prometheus unavailable: {type(exc).__name__}"
            return {}, MetricsHealth(False, 0.0, detail, read_failed=True)
        return reading.usage_by_node(), reading.health

    async def activity(
        self, pool: GPUCellPool, nodes: Sequence[str], pods: Sequence[str]
    ) -> ActivityReading:
        """Measured use from HAMi's monitor (``ActivitySource``); faults read Unreachable."""
        try:
            source = await self._source(pool)
        except (ValueError, KubeError) as exc:
            return failed(Verdict.UNREACHABLE, f"Prometheus unavailable: {type(exc).__name__}")
        return await source.node_activity(nodes, pods)

    async def close(self) -> None:
        for _, source in self._sources.values():
            await source.aclose()
        self._sources.clear()
