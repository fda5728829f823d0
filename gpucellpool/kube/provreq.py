"""ProvisioningRequests and PodTemplates of the workload clusters, for the gang controller.

Why this module exists: ``autoscaler.gangs`` reads requests through a ``RequestSource`` port;
this is that port over the apiservers. Per workload cluster it mirrors
``provisioningrequests.autoscaling.x-k8s.io`` (v1) and PodTemplates with the same list+watch
caches as Pods, on the client that cluster's caches use (rebuilt when the kubeconfig Secret
changes), and writes the request status by server-side apply under its own field manager.
A cluster without the ProvisioningRequest CRD just never syncs its request cache (the watch
backs off): no request there is served, nothing else is affected.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpucellpool.kube.cache import JSON, Query, WatchCache
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.workload import ClusterKey, WorkloadClient, WorkloadClusters

REQUESTS_PATH = "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
TEMPLATES_PATH = "/api/v1/podtemplates"
FIELD_MANAGER = "gpucellpool-provisioning-requests"


@dataclass(slots=True)
class _Caches:
    client: WorkloadClient
    requests: WatchCache
    templates: WatchCache
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def synced(self) -> bool:
        return self.requests.synced.is_set() and self.templates.synced.is_set()


class KubeProvisioningRequests:
    """``RequestSource``: caches follow each workload cluster's client; ``wake`` on changes."""

    def __init__(self, clusters: WorkloadClusters, wake: Callable[[], None] = lambda: None) -> None:
        self.workload = clusters
        self.wake = wake  # the controller's wake-up, set by the composition root
        self._caches: dict[ClusterKey, _Caches] = {}

    def _refresh(self) -> None:
        """Start caches on new clients, stop those whose cluster or client went away."""
        for key in [k for k in self._caches if k not in self.workload.clusters]:
            self._stop(key)
        for key, cluster in self.workload.clusters.items():
            mine, client = self._caches.get(key), cluster.client
            if mine is not None and mine.client is client:
                continue
            if mine is not None:
                self._stop(key)
            if client is not None:
                self._caches[key] = self._start(client)

    def _start(self, client: WorkloadClient) -> _Caches:
        def changed(kind: str, obj: JSON) -> None:
            del kind, obj
            self.wake()

        requests = WatchCache(client, Query(REQUESTS_PATH), changed, max_retry_s=60.0)
        templates = WatchCache(client, Query(TEMPLATES_PATH), changed)
        caches = _Caches(client, requests, templates)
        caches.tasks = [asyncio.create_task(c.run()) for c in (requests, templates)]
        return caches

    def _stop(self, key: ClusterKey) -> None:
        caches = self._caches.pop(key, None)
        for task in caches.tasks if caches else []:
            task.cancel()

    def clusters_synced(self) -> list[ClusterKey]:
        self._refresh()
        return [k for k, c in self._caches.items() if c.synced()]

    def clusters(self) -> Sequence[object]:
        return self.clusters_synced()

    def requests(self, cluster: object) -> Sequence[JSON]:
        caches = self._caches.get(cluster) if isinstance(cluster, ClusterKey) else None
        return caches.requests.items() if caches else []

    def template(self, cluster: object, namespace: str, name: str) -> JSON | None:
        caches = self._caches.get(cluster) if isinstance(cluster, ClusterKey) else None
        return caches.templates.get(f"{namespace}/{name}") if caches else None

    async def apply_status(self, cluster: object, body: JSON) -> None:
        caches = self._caches.get(cluster) if isinstance(cluster, ClusterKey) else None
        if caches is None or not isinstance(caches.client, RestClient):
            raise RuntimeError("workload cluster not connected")
        meta = body["metadata"]
        path = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{meta['namespace']}"
        path += f"/provisioningrequests/{meta['name']}/status"
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        await caches.client.call("PATCH", path, query, body, "application/apply-patch+yaml")

    async def close(self) -> None:
        tasks = [t for c in self._caches.values() for t in c.tasks]
        self._caches.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
