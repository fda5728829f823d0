"""One set of watch caches (Pods, Nodes, Namespaces) per workload cluster, shared by its pools.

Why this module exists: several pools usually point at the same workload cluster through the
same kubeconfig Secret; watching its Pods once per pool would multiply the load on that
apiserver. A ``WorkloadCluster`` is keyed by the Secret (namespace, name, key). It watches that
one Secret (field selector on its name, so namespace-scoped RBAC suffices) and, whenever the
kubeconfig bytes change, closes the old client and caches and builds new ones: a rotated
credential takes effect without a restart. Every change in any of its caches calls ``on_change``
with the cluster key so the loop can wake exactly the pools of that cluster. ResourceClaims and
ResourceSlices are mirrored too once a pool of the cluster uses HAMi's DRA mode (``watch_dra``),
and the kubelets' node Leases once the provisioner reads them (``watch_leases``).

Two Secrets (in two namespaces, say) may reach the same cluster. Once a connection's Pods, Nodes
and Namespaces caches are synced it latches the cluster's identity, the UID of its
``kube-system`` Namespace (taken from the Namespaces cache it already holds: no extra request,
no extra right), and announces it with an ``IDENTITY`` wake; until then, and after every rebuild
until it is learned again, the Secret key stands in for it (``identity``). Pools are judged
together (expander, gangs) by that identity, not by the Secret that reached the cluster.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from gpucellpool.kube.cache import JSON, ListWatch, Query, WatchCache
from gpucellpool.kube.kubeconfig import KubeconfigError
from gpucellpool.kube.lean import Lean, LeanNodes, LeanPods

log = logging.getLogger(__name__)
RESOURCE_API = "/apis/resource.k8s.io/v1"
NODE_LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


@dataclass(frozen=True, slots=True)
class ClusterKey:
    namespace: str
    secret: str
    key: str = "value"


IDENTITY_NAMESPACE = "kube-system"
IDENTITY_EVENT = "IDENTITY"
"""The wake kind when a connection learns (object ``{"uid": ...}``) or loses its identity."""


@dataclass(frozen=True, slots=True)
class ClusterUID:
    """A workload cluster by its ``kube-system`` Namespace UID, whichever Secret reached it.

    The de-facto cluster ID: the Namespace lives as long as the cluster, and its UID (a UUID)
    never changes and differs between clusters; OpenTelemetry's ``k8s.cluster.uid`` resource
    attribute is defined the same way. Never equal to a ``ClusterKey``.
    """

    uid: str


class WorkloadClient(ListWatch, Protocol):
    async def close(self) -> None: ...


ClientFactory = Callable[[Mapping[str, Any]], Awaitable[WorkloadClient]]
WakeFn = Callable[[ClusterKey, str, JSON], None]


class WorkloadCluster:
    """The Secret watch plus (once a kubeconfig is read) the Pods/Nodes/Namespaces caches."""

    def __init__(self, key: ClusterKey, infra: ListWatch, factory: ClientFactory, wake: WakeFn):
        self.key = key
        self._factory = factory
        self._wake = wake
        self.pods: WatchCache | None = None
        self.nodes: WatchCache | None = None
        self.namespaces: WatchCache | None = None
        self.claims: WatchCache | None = None
        self.slices: WatchCache | None = None
        self.leases: WatchCache | None = None
        self.lease_watch = False  # the provisioner reads this cluster's node Leases
        self.dra = False  # a pool of this cluster uses HAMi's DRA mode: watch claims and slices
        self._error = "kubeconfig Secret not read yet"
        self._applied = False  # a Secret state was applied once (see ``settled``)
        self.uid = ""  # the cluster's kube-system Namespace UID, once this connection learned it
        self._digest = ""
        self._wanted: str | None = None  # the newest kubeconfig (base64) seen on the Secret
        self._client: WorkloadClient | None = None
        self._cache_tasks: list[asyncio.Task[None]] = []
        self._rebuilds: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()  # one rebuild at a time, always to the newest Secret
        self._secret_task: asyncio.Task[None] | None = None
        self._built = ""  # digest of the Secret content the current caches were built from
        self.rebuilds = 0
        query = Query(
            f"/api/v1/namespaces/{key.namespace}/secrets",
            field_selector=f"metadata.name={key.secret}",
        )
        self.secret = WatchCache(infra, query, self._secret_changed)

    @property
    def client(self) -> WorkloadClient | None:
        """The client the current caches use (None until a kubeconfig works; replaced on a
        credential change), for adapters that keep caches of their own on this cluster."""
        return self._client

    @property
    def identity(self) -> ClusterKey | ClusterUID:
        """The workload cluster this connection reaches: its ``ClusterUID`` once learned on
        the current connection, the Secret key until then."""
        return ClusterUID(self.uid) if self.uid else self.key

    @property
    def error(self) -> str:
        """Why this cluster has no usable caches ("" when it has them), never the credential."""
        if not self._applied and self.secret.forbidden:
            return (
                f"kubeconfig Secret {self.key.namespace}/{self.key.secret} not readable: "
                "forbidden (is its namespace served by this operator?)"
            )
        if self.secret.synced.is_set() and not self.secret.objects:
            # Listed (or watched) as absent: say so, not "not read yet" (NotFound).
            return f"kubeconfig Secret {self.key.namespace}/{self.key.secret} not found"
        return self._error

    def settled(self) -> bool:
        """Whether ``error`` is a verdict: the Secret was read and applied (caches built, or
        ``error`` says why not), or it was listed and does not exist. Before that the cluster
        is syncing, not broken (readiness waits for it). A Secret the operator may not read
        (403: a namespace it does not serve) is a verdict too: waiting will not change it."""
        if not self._applied and self.secret.forbidden:
            return True
        return self._applied or (self.secret.synced.is_set() and not self.secret.objects)

    def synced(self) -> bool:
        caches = [self.pods, self.nodes, self.namespaces]
        caches += [self.claims, self.slices] if self.dra else []
        return all(c is not None and c.synced.is_set() for c in caches)

    def watch_dra(self) -> None:
        """Also mirror ResourceClaims and ResourceSlices (resource.k8s.io/v1), from now on and
        after every rebuild: HAMi's DRA mode keeps capacity and asks there (hami-facts §5)."""
        if self.dra:
            return
        self.dra = True
        if self._client is not None:
            self._start_dra(self._client)

    def watch_leases(self) -> None:
        """Also mirror the kubelets' node Leases (``kube-node-lease``), from now on and after
        every rebuild. Their renewals (every ~10 s per Node) wake nobody: only the
        provisioner's passes read them, each at its own time."""
        if self.lease_watch:
            return
        self.lease_watch = True
        if self._client is not None:
            self._start_leases(self._client)

    def _start_leases(self, client: WorkloadClient) -> None:
        self.leases = WatchCache(client, Query(NODE_LEASES_PATH))
        self._cache_tasks.append(asyncio.create_task(self.leases.run()))

    def live_on(self, kubeconfig: str | None) -> bool:
        """Whether the current caches were built from exactly this kubeconfig (the Secret's
        base64 value) and their Nodes watch is synced and live: the cluster answered this
        credential's requests and nothing has failed since."""
        nodes = self.nodes
        built = self._built == hashlib.sha256(str(kubeconfig).encode()).hexdigest()
        return built and nodes is not None and nodes.synced.is_set() and nodes.live

    def _start_dra(self, client: WorkloadClient) -> None:
        self.claims = WatchCache(client, Query(f"{RESOURCE_API}/resourceclaims"), self._changed)
        self.slices = WatchCache(client, Query(f"{RESOURCE_API}/resourceslices"), self._changed)
        self._cache_tasks += [asyncio.create_task(c.run()) for c in (self.claims, self.slices)]

    def _changed(self, kind: str, obj: JSON) -> None:
        self._wake(self.key, kind, obj)

    def _secret_changed(self, kind: str, secret: JSON) -> None:
        raw = None if kind == "DELETED" else (secret.get("data") or {}).get(self.key.key)
        digest = hashlib.sha256(str(raw).encode()).hexdigest()
        if digest != self._digest:
            self._digest, self._wanted = digest, raw
            task = asyncio.create_task(self._rebuild())
            self._rebuilds.add(task)
            task.add_done_callback(self._rebuilds.discard)

    async def _rebuild(self) -> None:
        async with self._lock:
            raw, digest = self._wanted, self._digest
            if digest == self._built:
                return  # a later rebuild already applied the newest Secret
            self._built = digest
            lost, self.uid = self.uid, ""  # a new credential may reach another cluster
            await self._stop_caches()
            self._error = await self._connect(raw)
            self._applied = True
            self._wake(self.key, "SECRET", {})
            if lost:  # the pools that judged with ours judge without them now
                self._wake(self.key, IDENTITY_EVENT, {"uid": lost})

    async def _connect(self, raw: str | None) -> str:
        """Build the client and caches; the error text (never the credential) or ""."""
        if raw is None:
            return f"Secret {self.key.namespace}/{self.key.secret} key {self.key.key} missing"
        try:
            kubeconfig = yaml.safe_load(base64.b64decode(raw))
            client = await self._factory(kubeconfig)
        except KubeconfigError as exc:  # names the entry and field, never a value
            return f"kubeconfig unusable: {exc}"
        except Exception as exc:  # a bad credential is state, not a crash
            return f"kubeconfig unusable: {type(exc).__name__}"
        self._client = client
        self.rebuilds += 1

        def on_change(kind: str, obj: JSON) -> None:
            self._wake(self.key, kind, obj)

        # the bulk of the memory: kept lean (kube.lean)
        self.pods = WatchCache(Lean(client, LeanPods()), Query("/api/v1/pods"), on_change)
        self.nodes = WatchCache(Lean(client, LeanNodes()), Query("/api/v1/nodes"), on_change)
        self.namespaces = WatchCache(client, Query("/api/v1/namespaces"), on_change)
        self._cache_tasks = [
            asyncio.create_task(c.run()) for c in (self.pods, self.nodes, self.namespaces)
        ]
        self._cache_tasks.append(asyncio.create_task(self._learn_identity()))
        if self.dra:
            self._start_dra(client)
        if self.lease_watch:
            self._start_leases(client)
        return ""

    async def _learn_identity(self) -> None:
        """Latch the cluster's identity once this connection's caches are synced (so a pool on
        it only joins the pools of other Secrets when it sees every pod they see)."""
        caches = [c for c in (self.pods, self.nodes, self.namespaces) if c is not None]
        await asyncio.gather(*(c.synced.wait() for c in caches))
        namespace = self.namespaces.get(IDENTITY_NAMESPACE) if self.namespaces else None
        uid = str(((namespace or {}).get("metadata") or {}).get("uid") or "")
        if not uid:
            log.warning(
                "workload cluster has no kube-system Namespace: its pools are judged per Secret",
                extra={"secret": f"{self.key.namespace}/{self.key.secret}"},
            )
            return
        self.uid = uid
        self._wake(self.key, IDENTITY_EVENT, {"uid": uid})

    async def _stop_caches(self) -> None:
        for task in self._cache_tasks:
            task.cancel()
        for task in self._cache_tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._cache_tasks = []
        self.pods = self.nodes = self.namespaces = self.claims = self.slices = self.leases = None
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    def start(self) -> None:
        self._secret_task = asyncio.create_task(self.secret.run())

    async def stop(self) -> None:
        tasks = [t for t in (self._secret_task, *self._rebuilds) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._stop_caches()


class WorkloadClusters:
    """The registry: ``ensure(key)`` returns the shared cluster, starting it on first use."""

    def __init__(self, infra: ListWatch, factory: ClientFactory, wake: WakeFn) -> None:
        self._infra = infra
        self._factory = factory
        self._wake = wake
        self.clusters: dict[ClusterKey, WorkloadCluster] = {}

    def ensure(self, key: ClusterKey) -> WorkloadCluster:
        cluster = self.clusters.get(key)
        if cluster is None:
            cluster = WorkloadCluster(key, self._infra, self._factory, self._wake)
            self.clusters[key] = cluster
            cluster.start()
        return cluster

    async def release_unused(self, used: set[ClusterKey]) -> None:
        for key in [k for k in self.clusters if k not in used]:
            await self.clusters.pop(key).stop()

    async def close(self) -> None:
        for cluster in self.clusters.values():
            await cluster.stop()
        self.clusters.clear()
