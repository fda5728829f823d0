"""The shared pod index: same demand and per-Node pods as scanning every pod, built once per change.

What these prove: ``index_pods`` keeps every pod any pool could count as demand (whatever its
scheduler name, pod selector or namespace selector) and groups bound pods by Node exactly like
``pods_by_node``; a ``WatchCache``'s ``version`` moves on every change and not on bookmarks;
``CacheWorkloadView`` hands every pool of a cluster the same index until its Pods cache changes
(the fix for 50 pools each walking 10,000 pods per burst; see docs/benchmarks.md).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from autoscaler.observe import pods_by_node
from autoscaler.pod_index import index_pods
from autoscaler.policy.pool_demand import pending_for_pool
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.kube.cache import Query, WatchCache
from gpucellpool.kube.workload import ClusterKey
from gpucellpool.operator.adapters import CacheWorkloadView
from tests.unit.test_loop_fakes import pending_pod, pool_manifest

JSON = dict[str, Any]


def variant(rng: random.Random, i: int) -> JSON:
    """A pod in one of the shapes a workload cluster holds."""
    pod = pending_pod(f"p{i}", 4000, rng.choice(["a", "b"]), team=rng.choice(["ml", "web"]))
    kind = rng.randrange(7)
    if kind == 1:  # bound and running
        pod["spec"]["nodeName"] = f"n{rng.randrange(5)}"
        pod["status"] = {"phase": "Running"}
    elif kind == 2:  # bound, not started yet
        pod["spec"]["nodeName"] = f"n{rng.randrange(5)}"
    elif kind == 3:  # another scheduler
        pod["spec"]["schedulerName"] = "other"
    elif kind == 4:  # finished
        pod["status"] = {"phase": "Succeeded"}
    elif kind == 5:  # no status yet
        del pod["status"]
    return pod


SELECTIONS = [
    {},
    {"schedulerName": "other"},
    {"podSelector": {"matchLabels": {"team": "ml"}}},
    {"namespaceSelector": {"matchLabels": {"gpu": "yes"}}},
]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("demand", SELECTIONS)
def test_index_keeps_every_pools_demand_and_node_pods(seed: int, demand: JSON) -> None:
    rng = random.Random(seed)
    pods = [variant(rng, i) for i in range(200)]
    pool = GPUCellPool.model_validate(pool_manifest("p", demand=demand))
    labels = {"a": {"gpu": "yes"}, "b": {}}
    seen = {p["metadata"]["uid"]: 1.0 for p in pods}
    index = index_pods(pods)
    assert pending_for_pool(pool, index.unbound, labels, seen) == pending_for_pool(
        pool, pods, labels, seen
    )
    assert index.by_node == pods_by_node(pods)
    assert all(not (p.get("spec") or {}).get("nodeName") for p in index.unbound)


class Silent:
    async def list(self, query: Query) -> tuple[list[JSON], str]:
        return [], "1"

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        return
        yield {}


def event(kind: str, name: str, rv: str, node: str = "") -> JSON:
    pod = pending_pod(name)
    pod["metadata"]["resourceVersion"] = rv
    if node:
        pod["spec"]["nodeName"] = node
    return {"type": kind, "object": pod}


def test_cache_version_moves_on_changes_not_bookmarks() -> None:
    cache = WatchCache(Silent(), Query("/api/v1/pods"))
    cache.apply_event(event("ADDED", "a", "2"))
    assert cache.version == 1
    cache.apply_event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "3"}}})
    assert cache.version == 1
    cache.apply_event(event("MODIFIED", "a", "4", node="n1"))
    cache.apply_event(event("DELETED", "a", "5", node="n1"))
    assert cache.version == 3


async def test_view_shares_one_index_until_the_pods_change() -> None:
    view = CacheWorkloadView(clusters=None)  # type: ignore[arg-type]
    key = ClusterKey("ns", "wl")
    cache = WatchCache(Silent(), Query("/api/v1/pods"))
    cache.apply_event(event("ADDED", "a", "2"))
    first = view.pod_index(key, cache)
    assert view.pod_index(key, cache) is first  # every pool of the cluster: no re-scan
    assert [p["metadata"]["name"] for p in first.unbound] == ["a"]
    cache.apply_event(event("MODIFIED", "a", "3", node="n1"))
    second = view.pod_index(key, cache)
    assert second is not first and not second.unbound
    assert [p["metadata"]["name"] for p in second.by_node["n1"]] == ["a"]
    rebuilt = WatchCache(Silent(), Query("/api/v1/pods"))  # a Secret rotation's new cache
    assert view.pod_index(key, rebuilt) is not second


def test_frozen_copies_are_shared_until_the_cache_changes() -> None:
    cache = WatchCache(Silent(), Query("/api/v1/pods"))
    cache.apply_event(event("ADDED", "a", "2"))
    items, by_key = cache.frozen(), cache.frozen_by_key()
    assert cache.frozen() is items and cache.frozen_by_key() is by_key  # every pool's snapshot
    assert [p["metadata"]["name"] for p in items] == ["a"] and list(by_key) == ["default/a"]
    with pytest.raises(TypeError):
        by_key["default/b"] = {}  # type: ignore[index]  # read-only: shared by every reader
    cache.apply_event(event("ADDED", "b", "3"))
    newer, newer_by_key = cache.frozen(), cache.frozen_by_key()
    assert [p["metadata"]["name"] for p in newer] == ["a", "b"] and len(newer_by_key) == 2
    assert [p["metadata"]["name"] for p in items] == ["a"]  # the older copy did not move


def test_namespace_labels_are_mapped_once_per_version_of_the_namespaces_cache() -> None:
    view = CacheWorkloadView(clusters=None)  # type: ignore[arg-type]
    key = ClusterKey("ns", "wl")
    cache = WatchCache(Silent(), Query("/api/v1/namespaces"))
    space = {"metadata": {"name": "a", "resourceVersion": "2", "labels": {"gpu": "yes"}}}
    cache.apply_event({"type": "ADDED", "object": space})
    first = view.namespace_labels(key, cache)
    assert first == {"a": {"gpu": "yes"}} and view.namespace_labels(key, cache) is first
    with pytest.raises(TypeError):
        first["b"] = {}  # type: ignore[index]  # read-only: shared by every pool's snapshot
    relabelled = {"metadata": {"name": "a", "resourceVersion": "3", "labels": {}}}
    cache.apply_event({"type": "MODIFIED", "object": relabelled})
    assert view.namespace_labels(key, cache) == {"a": {}}
    assert first == {"a": {"gpu": "yes"}}  # the older mapping did not move
