"""Which pools one workload-cluster watch event concerns (no I/O).

Why this module exists: many pools share one workload cluster, and waking all of them on every
Pod or Node event made 50 pools decide and publish per event at scale (docs/benchmarks.md,
live-scale). An event is routed instead to the pools it can change:

* a Pod: the pools for which it counts as demand (``counts_as_demand``, the loop's own test,
  selectors first) and the pools owning the Node it is bound to. Both the object before the
  event and after it are routed, so a deletion, a binding (``nodeName`` set) or a relabel wakes
  the pool that counted the pod before as well as the one that counts it now;
* a Node: the pools whose cell it is: a ``status.cells`` row naming it, the cell name pattern
  ``<pool>-<index>`` (cell, guest and Node share the name), or the pool label;
* a Namespace: the pools with a namespace selector (its labels are their demand's input);
* anything else (the cluster rebuilt after a credential change, an unknown kind): every pool.

The provisioner is woken only by Nodes and by Pods on its Nodes: its drain waits for a Node to
empty and its inventory reads the cells' GPU pods; pending demand is the autoscaler's alone.

``WorkloadRouter`` holds the pools' routes and the last object seen per key (the "before" of
the next event, which the watch callback does not carry); the rules are the pure functions.
From the same events it keeps each cluster's ``PodIndex`` up to date (``PodIndexer``):
rebuilding it from the 10,000 cached pods on every change cost ~100 ms per routed event.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.pod_index import PodIndex, PodIndexer, is_unbound_pending, node_of
from autoscaler.policy.pool_demand import counts_as_demand, label_pairs
from gpucellpool.api.autoscaling import DemandSelection
from gpucellpool.api.pool import POOL_LABEL

JSON = dict[str, Any]
PoolKey = tuple[str, str]
NONE: frozenset[PoolKey] = frozenset()


@dataclass(frozen=True, slots=True)
class PoolRoute:
    """What routing needs to know about one pool."""

    key: PoolKey
    cluster: Hashable
    demand: DemandSelection
    node_names: frozenset[str]
    """The Nodes of its ``status.cells`` rows (``nodeName``, else the cell name)."""


@dataclass(frozen=True, slots=True)
class Wake:
    """The pools to wake: ``decide`` for the autoscaler, ``act`` for the provisioner."""

    decide: frozenset[PoolKey] = NONE
    act: frozenset[PoolKey] = NONE


@dataclass(frozen=True, slots=True)
class ClusterRoutes:
    """One cluster's routes, indexed for O(1) Node lookups."""

    routes: tuple[PoolRoute, ...] = ()
    by_node: Mapping[str, frozenset[PoolKey]] = field(default_factory=dict)
    by_name: Mapping[str, frozenset[PoolKey]] = field(default_factory=dict)
    by_pair: Mapping[tuple[str, str], tuple[PoolRoute, ...]] | None = None
    """The routes whose podSelector has ``matchLabels``, each under one of its (key, value)
    pairs (a pod without that label is not its demand); None: not indexed (every route is
    asked, ``demand_routes``)."""
    unkeyed: tuple[PoolRoute, ...] = ()
    """The routes without ``matchLabels`` (asked about every pod)."""

    @property
    def keys(self) -> frozenset[PoolKey]:
        return frozenset(r.key for r in self.routes)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def pool_route(key: PoolKey, cluster: Hashable, raw: JSON) -> PoolRoute:
    """The route of a GPUCellPool manifest; an unreadable demand selection reads as the default
    (the loop ignores a pool that does not validate; waking it is harmless)."""
    auto = (raw.get("spec") or {}).get("autoscaling") or {}
    try:
        demand = DemandSelection.model_validate(auto.get("demand") or {})
    except ValueError:
        demand = DemandSelection()
    rows = (raw.get("status") or {}).get("cells") or []
    names = frozenset(str(r.get("nodeName") or r.get("name")) for r in rows if isinstance(r, dict))
    return PoolRoute(key, cluster, demand, names)


def index_routes(routes: Iterable[PoolRoute]) -> ClusterRoutes:
    by_node: dict[str, set[PoolKey]] = defaultdict(set)
    by_name: dict[str, set[PoolKey]] = defaultdict(set)
    by_pair: dict[tuple[str, str], list[PoolRoute]] = defaultdict(list)
    unkeyed: list[PoolRoute] = []
    listed = tuple(routes)
    for route in listed:
        by_name[route.key[1]].add(route.key)
        for node in route.node_names:
            by_node[node].add(route.key)
        selector = route.demand.pod_selector
        wanted = (selector.match_labels or {}) if selector is not None else {}
        if wanted:
            by_pair[min((str(k), str(v)) for k, v in wanted.items())].append(route)
        else:
            unkeyed.append(route)
    return ClusterRoutes(
        listed,
        {k: frozenset(v) for k, v in by_node.items()},
        {k: frozenset(v) for k, v in by_name.items()},
        {k: tuple(v) for k, v in by_pair.items()},
        tuple(unkeyed),
    )


def demand_routes(pod: Mapping[str, Any], routes: ClusterRoutes) -> Iterable[PoolRoute]:
    """The routes whose demand ``pod`` may be: those without ``matchLabels`` and those indexed
    under a label the pod carries (a superset; ``counts_as_demand`` decides)."""
    if routes.by_pair is None:
        return routes.routes
    keyed = (r for pair in label_pairs(pod) for r in routes.by_pair.get(pair, ()))
    return (*routes.unkeyed, *keyed)


def node_pools(name: str, labels: Mapping[str, str], routes: ClusterRoutes) -> frozenset[PoolKey]:
    """The pools whose cell the Node ``name`` is (over-inclusive by design: waking is cheap)."""
    if not name:
        return NONE
    prefix, _, index = name.rpartition("-")
    owners = routes.by_node.get(name, NONE)
    if index.isdigit():
        owners |= routes.by_name.get(prefix, NONE)
    pool = labels.get(POOL_LABEL)
    return owners | routes.by_name.get(pool, NONE) if pool else owners


def pod_demand(
    pod: Mapping[str, Any] | None,
    routes: ClusterRoutes,
    namespace_labels: Mapping[str, str] | None,
) -> frozenset[PoolKey]:
    """The pools for which ``pod`` counts as pending demand."""
    if pod is None or not is_unbound_pending(pod):
        return NONE
    return frozenset(
        r.key
        for r in demand_routes(pod, routes)
        if counts_as_demand(pod, r.demand, namespace_labels)
    )


def route_pod(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    routes: ClusterRoutes,
    namespace_labels: Mapping[str, str] | None,
    node_labels: Callable[[str], Mapping[str, str]],
) -> Wake:
    """A Pod changed from ``before`` to ``after`` (None: it did not exist)."""
    owners = NONE
    for pod in (before, after):
        node = node_of(pod)
        if node:
            owners |= node_pools(node, node_labels(node), routes)
    demand = pod_demand(before, routes, namespace_labels)
    demand |= pod_demand(after, routes, namespace_labels)
    return Wake(demand | owners, owners)


def route_node(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, routes: ClusterRoutes
) -> Wake:
    if before is not None and after is not None and _node_facts(before) == _node_facts(after):
        return Wake(NONE, NONE)  # a status heartbeat: nothing either controller reads changed
    owners = NONE
    for node in (before, after):
        meta = _meta(node)
        if meta:
            owners |= node_pools(str(meta.get("name") or ""), meta.get("labels") or {}, routes)
    return Wake(owners, owners)


def _node_facts(node: Mapping[str, Any]) -> tuple[object, ...]:
    """What a Node event can change for a pool: its labels and annotations (HAMi's
    registration and handshake), its spec (unschedulable, taints), capacity, allocatable and
    each condition's type, status and reason - not the heartbeat times a kubelet refreshes."""
    meta = _meta(node)
    status = node.get("status") or {}
    conditions = status.get("conditions") or []
    return (
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("deletionTimestamp"),
        node.get("spec"),
        status.get("capacity"),
        status.get("allocatable"),
        [
            (c.get("type"), c.get("status"), c.get("reason"))
            for c in conditions
            if isinstance(c, Mapping)
        ],
    )


def route_namespace(routes: ClusterRoutes) -> Wake:
    selecting = frozenset(r.key for r in routes.routes if r.demand.namespace_selector is not None)
    return Wake(selecting, NONE)


def _object_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = _meta(obj)
    return str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", ""))


class WorkloadRouter:
    """Routes events with the pools' current routes; remembers the last object per key."""

    def __init__(self) -> None:
        self._routes: dict[PoolKey, PoolRoute] = {}
        self._indexed: dict[Hashable, ClusterRoutes] = {}
        self._seen: dict[Hashable, dict[tuple[str, str, str], JSON]] = {}
        self._pods: dict[Hashable, PodIndexer] = {}

    def pool_changed(self, route: PoolRoute) -> None:
        old = self._routes.get(route.key)
        if old != route:
            self._routes[route.key] = route
            self._forget_index(route, old)

    def pool_deleted(self, key: PoolKey) -> None:
        old = self._routes.pop(key, None)
        if old is not None:
            self._forget_index(old, None)
            if not any(r.cluster == old.cluster for r in self._routes.values()):
                self._seen.pop(old.cluster, None)  # no pool left there: its caches go too
                self._pods.pop(old.cluster, None)

    def _forget_index(self, route: PoolRoute, old: PoolRoute | None) -> None:
        self._indexed.pop(route.cluster, None)
        if old is not None:
            self._indexed.pop(old.cluster, None)

    def pod_index(self, cluster: Hashable, cached_pods: int) -> PodIndex | None:
        """The cluster's pods as its events reported them; None unless that is as many pods
        as its cache holds (an event missed: the caller rebuilds from the cache)."""
        indexer = self._pods.setdefault(cluster, PodIndexer())
        return indexer.index() if indexer.pods == cached_pods else None

    def routes(self, cluster: Hashable) -> ClusterRoutes:
        indexed = self._indexed.get(cluster)
        if indexed is None:
            mine = (r for r in self._routes.values() if r.cluster == cluster)
            indexed = self._indexed[cluster] = index_routes(mine)
        return indexed

    def event(self, cluster: Hashable, kind: str, obj: JSON) -> Wake:
        """The pools one watch event (``kind``: ADDED, MODIFIED, DELETED, ...) concerns."""
        routes = self.routes(cluster)
        what = str(obj.get("kind", ""))
        if what not in ("Pod", "Node", "Namespace"):
            if kind == "SECRET":  # the caches were rebuilt: their objects come again as ADDED
                self._seen.pop(cluster, None)
                self._pods.pop(cluster, None)
            return Wake(routes.keys, routes.keys)
        seen = self._seen.setdefault(cluster, {})
        key = _object_key(obj)
        before = seen.pop(key, None) if kind == "DELETED" else seen.get(key)
        if kind != "DELETED":
            seen[key] = obj
        if what == "Namespace":
            return route_namespace(routes)
        if what == "Node":
            return route_node(before, obj, routes)
        pods = self._pods.setdefault(cluster, PodIndexer())
        pods.apply("/".join(key[1:]), None if kind == "DELETED" else obj)
        namespace = seen.get(("Namespace", "", key[1]))
        ns_labels = (_meta(namespace).get("labels") or {}) if namespace is not None else None

        def node_labels(name: str) -> Mapping[str, str]:
            return _meta(seen.get(("Node", "", name))).get("labels") or {}

        return route_pod(before, obj, routes, ns_labels, node_labels)
