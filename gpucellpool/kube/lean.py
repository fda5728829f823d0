"""Workload Pods and Nodes as the caches keep them: the fields the operator reads, no more.

Why this module exists: every operator process mirrors every Pod and Node of each workload
cluster (``gpucellpool.kube.workload``), so what one cached object weighs, times 40,000 pods,
is most of a process's memory. Two rules, applied to each object as it arrives (a list page,
a watch event), so a dropped field is never held beyond its page:

* Nodes (and anything else) lose ``metadata.managedFields``, the server-side-apply record of
  which writer owns which field: close to half of an object's JSON, never read for a workload
  object (the field ownership the provisioner migrates is the GPUCellPool's). Nodes keep
  every other field, equal parts of many Nodes shared as one object (``LeanNodes``).
* Pods are projected (``LeanPods``) onto ``POD_FIELDS``, the fields some reader uses; each is
  listed there with its readers. Everything else (images, commands, env, volumes, probes,
  container statuses, IPs, QoS class ...) is dropped. Pods are never written back from the
  cache (the provisioner evicts or deletes them by name), so a projection cannot lose data on
  the server. A value of an unexpected shape is kept as sent, so the parsers still name the
  malformed field (``autoscaler.policy.demand``: malformed input comes back as ``AskError``).
  The keys of the projected dicts are this module's constants, and equal values of many pods
  (a Deployment's container resources, the default tolerations, the HAMi annotations of the
  pods on one Node, phases, namespaces) are one object (``Flyweights``).

Measured on the 200-pool benchmark's pods as the harness apiserver sends them (decoded page by
page, 500 a page, trimmed as the cache does): tracemalloc 11.1 KiB of Python objects per bound
pod as listed, 5.1 KiB without managedFields, 4.1 KiB projected, 1.3 KiB projected and shared;
the RSS of a process caching 40,000 of them (190 bound on 20 Nodes per pool, 10 pending) grew
by 216 MiB without managedFields, 59 MiB with ``LeanPods``. tests/unit/test_lean_pods.py shows
every reader reads the same from a projected pod as from the full one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from gpucellpool.kube.cache import JSON, ListWatch, Query

KEEP = "keep"
"""In a shape: keep the value as sent."""
SHARE = "share"
"""In a shape: keep the value, one object for every equal value (``Flyweights``)."""
Shape = Mapping[str, Any]
"""Field name -> ``KEEP``, ``SHARE``, a nested ``Shape`` (a mapping projected the same way),
or a one-element tuple ``(Shape,)`` (a list whose mappings are each projected so)."""

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""An annotation ``kubectl apply`` leaves: the whole manifest again, read by no one here."""

CONTAINER: Shape = {
    "name": SHARE,  # demand and DRA asks name the container (claims by container)
    "resources": SHARE,  # HAMi asks (limits, then requests), DRA claims, the drainer's GPU test
}

POD_FIELDS: Shape = {
    "apiVersion": SHARE,
    "kind": SHARE,  # autoscaler.routing tells a Pod event from a Node's by it
    "metadata": {
        "name": KEEP,  # the cache key, pod keys, evictions, Events
        "namespace": SHARE,  # the same, namespace selectors of pools, gang keys
        "uid": KEEP,  # demand's first-seen memory, gang and ProvisioningRequest bookings
        "resourceVersion": KEEP,  # the cache (relist diffs), the provisioner's cached reads
        "creationTimestamp": SHARE,  # gang order (autoscaler.gangs: oldest first)
        "deletionTimestamp": KEEP,  # terminating pods (routing, the drainer)
        "labels": SHARE,  # pool demand selectors, gangs, HAMi-DRA's label, cached-read selectors
        "annotations": SHARE,  # HAMi's allocation and bind annotations (usage), gang and
        # ProvisioningRequest annotations, the mirror-pod annotation (the drainer); without
        # LAST_APPLIED (see without_last_applied)
        "ownerReferences": SHARE,  # DaemonSet pods are not evicted (the drainer)
    },
    "spec": {
        "nodeName": SHARE,  # bound or pending, usage per Node, the provisioner's per-Node lists
        "schedulerName": SHARE,  # only HAMi's (or the DRA scheduler's) pods are demand
        "priority": KEEP,
        "nodeSelector": SHARE,  # placement constraints of a pending pod, gang placeholders
        "affinity": SHARE,  # the required node affinity of a pending pod
        "tolerations": SHARE,  # which cells' taints a pending pod tolerates
        "resourceClaims": SHARE,  # DRA: the claims a pod waits on; the drainer's GPU test
        "containers": (CONTAINER,),
        "initContainers": (CONTAINER,),  # the init-container rule of HAMi asks
    },
    "status": {
        "phase": SHARE,  # Pending / Running / Succeeded / Failed everywhere
        "conditions": SHARE,  # PodScheduled=False reason Unschedulable: pending demand
        "resourceClaimStatuses": KEEP,  # DRA: generated claim names
    },
}


class Flyweights:
    """One object for every equal value seen lately: the pods of one workload (one Deployment,
    one node's HAMi annotations, the default tolerations) then hold one copy, not one each.

    Equal is judged on the type and ``repr`` (for decoded JSON, equal reprs of one type mean
    equal values). The memo
    keeps at most ``limit`` values and starts over when full (values already shared stay
    shared), so values unique to one pod cost a bounded memo, not a leak. Sound only because
    no reader changes a cached object in place (they are shared by the cache, the router's
    index and every decision's snapshot already).
    """

    def __init__(self, limit: int = 16384) -> None:
        self._limit = limit
        self._seen: dict[tuple[str, str], Any] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def share(self, value: Any) -> Any:
        """``value``, or an equal value seen before (the very same object)."""
        key = ("", value) if isinstance(value, str) else (type(value).__name__, repr(value))
        found = self._seen.get(key)
        if found is not None:
            return found
        if len(self._seen) >= self._limit:
            self._seen.clear()
        self._seen[key] = value
        return value


def project(value: Any, shape: Any, shared: Flyweights) -> Any:
    """``value`` keeping only what ``shape`` names; a value of another shape is kept as sent."""
    if shape is KEEP:
        return value
    if shape is SHARE:
        return shared.share(value)
    if isinstance(shape, tuple):
        if not isinstance(value, list):
            return value
        return [project(item, shape[0], shared) for item in value]
    if not isinstance(value, dict):
        return value
    return {key: project(value[key], sub, shared) for key, sub in shape.items() if key in value}


def without_last_applied(obj: JSON) -> JSON:
    """``obj`` itself, the ``LAST_APPLIED`` annotation removed (nothing else touched)."""
    annotations = (obj.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
    return obj


class LeanPods:
    """The Pods cache's trim: a new dict with the ``POD_FIELDS`` of each pod (no
    ``LAST_APPLIED``), equal parts shared across the pods this trim has seen."""

    def __init__(self, limit: int = 16384) -> None:
        self.shared = Flyweights(limit)

    def __call__(self, obj: JSON) -> JSON:
        projected: JSON = project(without_last_applied(obj), POD_FIELDS, self.shared)
        return projected


def without_managed_fields(obj: JSON) -> JSON:
    """``obj`` itself, its ``metadata.managedFields`` removed (nothing else touched)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class LeanNodes:
    """The Nodes cache's trim: every field kept, ``metadata.managedFields`` dropped, and each
    field of ``spec`` and ``status`` one object for equal values across Nodes (capacity,
    allocatable, taints, nodeInfo of a pool's identical cells): 17.9 -> 8.4 MiB for the
    benchmark's 4,000 Nodes (tracemalloc)."""

    def __init__(self, limit: int = 16384) -> None:
        self.shared = Flyweights(limit)

    def __call__(self, obj: JSON) -> JSON:
        without_managed_fields(obj)
        for part in ("spec", "status"):
            fields = obj.get(part)
            if isinstance(fields, dict):
                obj[part] = {key: self.shared.share(value) for key, value in fields.items()}
        return obj


@runtime_checkable
class Paged(Protocol):
    """A source that lists page by page (``RestClient.pages``)."""

    def pages(self, query: Query) -> AsyncIterator[tuple[list[JSON], str]]: ...


class Lean:
    """A ``ListWatch`` over ``source`` whose listed and watched objects pass through ``trim``
    (``without_managed_fields`` unless told otherwise; ``LeanPods`` for Pods)."""

    def __init__(self, source: ListWatch, trim: Callable[[JSON], JSON] = without_managed_fields):
        self._source = source
        self._trim = trim

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        if not isinstance(self._source, Paged):
            items, version = await self._source.list(query)
            return [self._trim(item) for item in items], version
        # Page by page: trimmed after all pages were decoded, the freed fields were holes in
        # memory the process never gave back (RSS as high as without trimming).
        kept: list[JSON] = []
        version = ""
        async for page, page_version in self._source.pages(query):
            kept += [self._trim(item) for item in page]
            version = page_version
        return kept, version

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        async for event in self._source.watch(query, resource_version):
            obj = event.get("object")
            if isinstance(obj, dict) and event.get("type") not in ("ERROR", "BOOKMARK"):
                yield {**event, "object": self._trim(obj)}
            else:
                yield event
