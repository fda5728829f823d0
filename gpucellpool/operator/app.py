"""The composition root of ``gpucellpool run``: every object is built here, explicitly, once.

Why this module exists: the loop, the caches, the elector and the probes only know each other
through Protocols; something has to choose the real implementations and wire the callbacks
(pool watch -> loop, workload caches and event routes; workload watch -> wake the pools that
event concerns; gaining leadership -> re-read memory and decide at once). Keeping that in one
place makes the wiring reviewable and lets tests build the same graph with their own clock,
registry or identity. The provisioner's cluster of objects is built by
``provisioner_wiring.ProvisionerSide``, which ``App`` calls like any other constructor; its input,
``Settings``, is defined in ``settings``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from autoscaler.gangs import Bookings, GangController
from autoscaler.loop import Autoscaler, LoopSettings
from autoscaler.pod_index import PodIndex
from autoscaler.routing import WorkloadRouter, pool_route
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.kube.cache import JSON, Query, WatchCache
from gpucellpool.kube.connections import Connections
from gpucellpool.kube.events import EventSink, ObjectEvents, rest_creator
from gpucellpool.kube.provreq import KubeProvisioningRequests
from gpucellpool.kube.rest import AUTOSCALER_FIELD_MANAGER, RestClient, client_in_cluster_or
from gpucellpool.kube.reviews import KubeAccessReviewer
from gpucellpool.kube.workload import (
    IDENTITY_EVENT,
    ClientFactory,
    ClusterKey,
    ClusterUID,
    WorkloadClusters,
)
from gpucellpool.operator import crdcheck
from gpucellpool.operator.adapters import (
    POOLS_PATH,
    CacheWorkloadView,
    KubePoolWriter,
    LeaseClient,
    PrometheusUsage,
)
from gpucellpool.operator.health import HealthServer
from gpucellpool.operator.metrics import OperatorMetrics
from gpucellpool.operator.provisioner_wiring import (
    ClusterState,
    ProvisionerSide,
    collection_path,
)
from gpucellpool.operator.secure_metrics import secure_site
from gpucellpool.operator.settings import (
    Settings,
    served_secret_namespaces,
    watched_namespaces,
)
from gpucellpool.operator.shard_gate import ShardGate, for_pool, key_of
from gpucellpool.operator.status_metrics import StatusMetrics
from gpucellpool.runtime.clock import SystemClock
from gpucellpool.runtime.leader import ElectionSettings, LeaderElector, ShardedElection
from gpucellpool.runtime.shards import ShardPlan, lease_name
from webhook.kube import KubeCrdReader
from webhook.runtime import RunningWebhook, start_webhook
from webhook.tls import FileWatcher

log = logging.getLogger(__name__)
__all__ = ["App", "RoutedWorkloadView", "build"]


class RoutedWorkloadView(CacheWorkloadView):
    """The caches' view, with the pod index the router keeps from the same watch events.

    Rebuilding the index from every cached pod on each change of the Pods cache cost ~100 ms
    per decision once each event woke one pool (10,000 pods; docs/benchmarks.md, live-scale).
    """

    def __init__(self, clusters: WorkloadClusters, router: WorkloadRouter) -> None:
        super().__init__(clusters)
        self.router = router

    def pod_index(self, key: ClusterKey, pods: WatchCache) -> PodIndex:
        index = self.router.pod_index(key, len(pods.objects))
        return index if index is not None else super().pod_index(key, pods)


def validated(kind: str, raw: JSON) -> GPUCellPool | None:
    """A pool watch event's object as the model, validated once for every consumer of the event
    (None: deleted, or invalid - each consumer then reports it its own way)."""
    if kind == "DELETED":
        return None
    try:
        return GPUCellPool.model_validate(raw)
    except ValueError:
        return None


class App:
    """Everything ``run`` starts, and how to stop it."""

    def __init__(
        self,
        settings: Settings,
        infra: RestClient,
        clock: Any = None,
        registry: CollectorRegistry | None = None,
        workload_factory: ClientFactory | None = None,
    ) -> None:
        self.settings = settings
        self.infra = infra
        self.clock = clock or SystemClock()
        self.registry = registry or CollectorRegistry()
        self.metrics = OperatorMetrics(self.registry)
        self.election = ShardedElection(
            ShardPlan(settings.shards, settings.shard_index), self._elector
        )
        self.elector = self.election.own  # this process's own shard's (the only one unsharded)
        first = self.election.electors[0]  # the cluster-wide work's (ProvisioningRequests)
        self.gate = ShardGate(
            self.election.owns,
            lambda: first.is_leader,
            self.election.term_left,
            first.term_left,
        )
        # one connection per workload cluster credential, for both controllers
        self.connections = Connections()
        connect = workload_factory or self.connections.factory(AUTOSCALER_FIELD_MANAGER)
        self.clusters = WorkloadClusters(infra, connect, self._cluster_changed)
        self.router = WorkloadRouter()
        self.usage = PrometheusUsage(infra, self.clock, settings.rules.allowed_prometheus_hosts)
        self.writer = KubePoolWriter(infra, settings.identity, self.clock)
        self.bookings = Bookings()  # ProvisioningRequests' held capacity, seen by the loop
        self.autoscaler = self._autoscaler()
        self.requests = KubeProvisioningRequests(self.clusters)
        self.gangs = GangController(self.autoscaler, self.requests, self.bookings, self.clock)
        self.requests.wake = self.gangs.wake
        self.provisioner = ProvisionerSide(
            infra,
            self.clock,
            self.metrics,
            settings.rules,
            settings.api_timeout_s,
            watched_namespaces(settings),
            self.gate.acting,
            self.connections,
            state=ClusterState(
                watched_namespaces(settings), lambda: self.pool_caches, self.clusters
            ),
            secret_namespaces=served_secret_namespaces(settings),
        )
        self.nodes = self.provisioner.nodes
        self.reconciler = self.provisioner.reconciler
        self.driver = self.provisioner.driver
        self.status_metrics = StatusMetrics(self.metrics, self.gate.acting)
        self.pool_caches = [
            WatchCache(infra, Query(collection_path(ns, POOLS_PATH)), self._pool_changed)
            for ns in watched_namespaces(settings)
        ]
        self._cluster_of: dict[tuple[str, str], ClusterKey] = {}
        self._ignored: set[tuple[str, str]] = set()  # pools outside the served namespaces
        self._releases: set[asyncio.Task[None]] = set()
        self.health, self._metrics_cert = self._health()
        self._tasks: list[asyncio.Task[None]] = []
        self._crd_task: asyncio.Task[None] | None = None
        self.webhook: RunningWebhook | None = None

    # -- construction helpers -----------------------------------------------------------------

    def _elector(self, shard: int) -> LeaderElector:
        s = self.settings
        name = lease_name(s.lease_name, s.shards, shard)
        election = ElectionSettings(
            s.lease_namespace,
            name,
            s.identity,
            s.lease_s,
            s.renew_deadline_s,
            s.retry_s,
            preferred=shard == s.shard_index,
        )
        lease = LeaseClient(self.infra, s.lease_namespace, name)
        on_change = functools.partial(self._leadership, shard=shard)
        return LeaderElector(lease, self.clock, election, on_change)

    def _autoscaler(self) -> Autoscaler:
        return Autoscaler(
            self.bookings.view(RoutedWorkloadView(self.clusters, self.router), self.clock),
            self.writer,
            self.clock,
            metrics=self.metrics,
            usage=self.usage,
            settings=LoopSettings(debounce_s=self.settings.debounce_s, tick_s=self.settings.tick_s),
            is_leader=self.gate.acting,
            activity=self.usage,
            owns=self._decides,
            term_left=self.gate.term_left,
        )

    def _decides(self, key: tuple[str, str]) -> bool:
        """Whether this process decides the pool at all (writes are gated by ``gate.acting``).

        Unsharded, a standby decides every pool too (warm, writing nothing). Sharded, a process
        decides only the pools of the shards it holds: spreading that CPU is why one shards;
        on gaining a shard its pools re-read their memory from the pool, as on a takeover.
        """
        return self.settings.shards == 1 or self.election.owns(key)

    def _health(self) -> tuple[HealthServer, FileWatcher | None]:
        """The probe and metrics server, and the metrics certificate it may rotate."""
        s = self.settings
        site, cert = secure_site(s.metrics, KubeAccessReviewer(self.infra), self.clock.now)
        server = HealthServer(
            self.live, self.ready, self.registry, s.health_host, s.health_port, site
        )
        return server, cert

    # -- wiring -------------------------------------------------------------------------------

    def _pool_changed(self, kind: str, raw: JSON) -> None:
        key = key_of(raw)
        if not self._serves(key):
            return
        wc = (raw.get("spec") or {}).get("workloadCluster") or {}
        secret = (wc.get("kubeconfigSecretRef") or {}).get("name")
        if kind == "DELETED":
            self._cluster_of.pop(key, None)
            self.router.pool_deleted(key)
            # Stop watching a workload cluster no remaining pool uses.
            release = self.clusters.release_unused(set(self._cluster_of.values()))
            self._releases.add(task := asyncio.create_task(release))
            task.add_done_callback(self._releases.discard)
        elif secret:
            cluster = ClusterKey(key[0], str(secret), str(wc.get("key") or "value"))
            self._cluster_of[key] = cluster
            self.clusters.ensure(cluster)
            self.router.pool_changed(pool_route(key, cluster, raw))
        pool = validated(kind, raw)  # once for the autoscaler and the status metrics
        with for_pool(key):  # the pool's tasks, created here, gate on its shard
            self.autoscaler.pool_event(kind, raw, pool)
            if self.settings.provision:
                self.provisioner.pool_event(kind, raw)
            self.status_metrics.observe(kind, raw, None if pool is None else pool.status)

    def _serves(self, key: tuple[str, str]) -> bool:
        """Whether the pool's namespace is served (``Settings.served_namespaces``). A pool
        elsewhere is ignored - no decision, write or retry: the operator may not read its
        Secrets (the chart grants them only in pool namespaces). Logged once per pool."""
        served = self.settings.served_namespaces
        if not served or key[0] in served:
            return True
        if key not in self._ignored:
            self._ignored.add(key)
            log.info("pool ignored: its namespace is not served", extra={"pool": "/".join(key)})
        return False

    def _cluster_changed(self, key: ClusterKey, kind: str, obj: JSON) -> None:
        """A workload watch event wakes only the pools it concerns (``autoscaler.routing``)."""
        wake = self.router.event(key, kind, obj)
        self.autoscaler.wake(wake.decide)
        if kind == IDENTITY_EVENT:  # the pools of other Secrets to that cluster gain/lose rivals
            self.autoscaler.cluster_event(ClusterUID(str(obj.get("uid") or "")))
            self.gangs.wake()
        for pool in wake.act:
            self.driver.wake(pool)

    def _leadership(self, leader: bool, shard: int = 0) -> None:
        """Gaining or losing a shard (all pools when unsharded) starts or ends a term for that
        shard's pools; the pools of the other shards keep theirs (no re-publication, no metrics
        rebuilt: under load a flapping Lease made every pool write again and cost ~0.7 s of CPU
        per change at 200 pools)."""
        pools = [(key_of(raw), raw) for cache in self.pool_caches for raw in cache.items()]
        sharded = self.settings.shards > 1
        pools = [
            (key, raw)
            for key, raw in pools
            if self._serves(key) and (not sharded or self.election.plan.of(key) == shard)
        ]
        # A new term starts from a first sight of its pools: gauges now, no history counted.
        self.status_metrics.reset([key for key, _ in pools] if sharded else None)
        if not leader:  # a standby exports no per-pool series next to the new leader's
            if not sharded:
                self.metrics.forget_all()
            for key, _ in pools:
                self.metrics.forget(*key)
        if leader:
            self.autoscaler.wake_all([key for key, _ in pools] if sharded else None)
            for key, _ in pools:
                self.driver.wake(key)
        for key, raw in pools:
            with for_pool(key):
                self.status_metrics.observe("MODIFIED", raw)

    # -- probes -------------------------------------------------------------------------------

    def live(self) -> tuple[bool, str]:
        dead = [t.get_name() for t in self._tasks if t.done()]
        return (not dead, f"stopped: {', '.join(dead)}")

    def ready(self) -> tuple[bool, str]:
        if not all(c.synced.is_set() for c in self.pool_caches):
            return False, "GPUCellPool cache not synced"
        if not self.election.known:
            return False, "leader election has not completed a round"
        syncing = [
            f"{k.namespace}/{k.secret}"
            for k, c in self.clusters.clusters.items()
            if not c.synced() and not (c.settled() and c.error)  # broken: told in status
        ]
        return (not syncing, f"workload caches syncing: {', '.join(syncing)}")

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self.settings.webhook is not None:  # every replica serves admission, leader or not
            options = dataclasses.replace(self.settings.webhook, settings=self.settings.rules)
            self.webhook = await start_webhook(self.infra, options)
        await self.health.start()
        if self._metrics_cert is not None:
            self._metrics_cert.start()
        self._tasks = [
            asyncio.create_task(self.election.run(), name="leader-election"),
            asyncio.create_task(self.gangs.run(), name="provisioning-requests"),
            *(asyncio.create_task(c.run(), name=f"watch:{c.query.path}") for c in self.pool_caches),
        ]
        # Not in _tasks: it ends by design, and liveness reports any ended task as dead.
        self._crd_task = asyncio.create_task(self._crd_check(), name="crd-drift-check")
        if self.settings.provision:
            self._tasks += [
                asyncio.create_task(c.run(), name=f"watch:{c.query.path}")
                for c in self.provisioner.watches()
            ]

    async def _crd_check(self) -> None:
        """The startup CRD drift check (issue #6): log, Event, gauge; never raises."""
        gauge = self.metrics.collectors["gpucellpool_crd_drift_findings"]
        assert isinstance(gauge, Gauge)
        sink = EventSink(
            rest_creator(self.infra), self.clock.now, "gpucellpool", self.settings.identity
        )
        events = ObjectEvents(sink, "CheckCRD")
        await crdcheck.run_check(KubeCrdReader(self.infra), events, gauge)

    async def stop(self, release_lease: bool = True) -> None:
        """Stop everything; ``release_lease=False`` imitates a crash (tests, failover)."""
        tasks = [*self._tasks, *([self._crd_task] if self._crd_task else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if release_lease:
            await self.election.release()
        await self.autoscaler.close()
        await self.provisioner.close()
        await self.requests.close()
        await self.clusters.close()
        await self.connections.close()
        await self.usage.close()
        if self._metrics_cert is not None:
            await self._metrics_cert.stop()
        await self.health.stop()
        if self.webhook is not None:
            await self.webhook.stop()
        await self.infra.close()


async def build(settings: Settings) -> App:
    """The production graph; credentials from ``settings.kubeconfig``, else ``$KUBECONFIG``, the
    in-cluster service account or ``~/.kube/config`` (``KubeconfigError`` when none works)."""
    infra = await client_in_cluster_or(settings.kubeconfig, settings.api_timeout_s)
    return App(settings, infra)
