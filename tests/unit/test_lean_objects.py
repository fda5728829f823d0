"""The workload Pods and Nodes caches keep objects without ``metadata.managedFields``.

What these prove: the lean ``ListWatch`` drops exactly that field from every listed item and
every watched object (an ERROR event's Status is passed on as sent), and a workload cluster's
Pods and Nodes caches hold objects without that field, which is what cut each operator
process's memory at 40,000 pods (kube.lean). The Pods cache's projection onto the fields the
readers use: tests/unit/test_lean_pods.py.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import yaml

from gpucellpool.kube.cache import Query, WatchCache
from gpucellpool.kube.lean import Lean, without_managed_fields
from gpucellpool.kube.workload import ClusterKey, WorkloadClusters

JSON = dict[str, Any]
OWNERS = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]


def pod(name: str, rv: str) -> JSON:
    meta = {"name": name, "namespace": "ns", "resourceVersion": rv, "labels": {"a": "b"}}
    return {
        "metadata": {**meta, "managedFields": copy.deepcopy(OWNERS)},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }


def lean(obj: JSON) -> JSON:
    out = copy.deepcopy(obj)
    del out["metadata"]["managedFields"]
    return out


class Source:
    """Lists one pod; its watch sends a modified pod, a bookmark and then waits."""

    def __init__(self) -> None:
        self.sent: list[JSON] = []

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        self.sent.append(pod("p1", "1"))
        return [self.sent[-1]], "1"

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        self.sent.append(pod("p1", "2"))
        yield {"type": "MODIFIED", "object": self.sent[-1]}
        yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "3"}}}
        await asyncio.Event().wait()


async def until(check: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)  # polling with a deadline


def test_only_managed_fields_go() -> None:
    before = pod("p", "1")
    after = without_managed_fields(copy.deepcopy(before))
    assert after == lean(before)
    assert without_managed_fields({"kind": "Status"}) == {"kind": "Status"}


async def test_listed_and_watched_objects_arrive_lean_and_otherwise_unchanged() -> None:
    source = Source()
    listed, version = await Lean(source).list(Query("/api/v1/pods"))
    assert (listed, version) == ([lean(pod("p1", "1"))], "1")
    seen: list[tuple[str, JSON]] = []
    cache = WatchCache(Lean(source), Query("/api/v1/pods"), lambda k, o: seen.append((k, o)))
    task = asyncio.create_task(cache.run())
    try:
        await until(lambda: cache.resource_version == "3")
    finally:
        task.cancel()
    assert cache.objects == {"ns/p1": lean(pod("p1", "2"))}
    assert all("managedFields" not in o["metadata"] for _, o in seen)


async def test_an_error_event_is_passed_on_as_sent() -> None:
    status = {"kind": "Status", "code": 410, "metadata": {"managedFields": "kept"}}

    class Failing(Source):
        async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
            yield {"type": "ERROR", "object": status}

    events = [e async for e in Lean(Failing()).watch(Query("/x"), "1")]
    assert events == [{"type": "ERROR", "object": status}]


class Cluster:
    """A workload cluster with one Node and one Pod, both with managedFields."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        if query.path == "/api/v1/pods":
            return [pod("p1", "5")], "5"
        if query.path == "/api/v1/nodes":
            node = pod("n1", "5")
            node["metadata"].pop("namespace")
            return [node], "5"
        return [], "5"

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        await asyncio.Event().wait()
        yield {}

    async def close(self) -> None:
        pass


class Infra:
    """The kubeconfig Secret, listed once; the watch waits."""

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        raw = base64.b64encode(yaml.safe_dump({"server": "https://w"}).encode()).decode()
        return [{"metadata": {"name": "wl", "namespace": "ns", "resourceVersion": "1"},
                 "data": {"value": raw}}], "1"  # fmt: skip

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        await asyncio.Event().wait()
        yield {}


async def test_a_workload_clusters_pods_and_nodes_are_cached_lean() -> None:
    async def factory(config: Mapping[str, Any]) -> Cluster:
        return Cluster(config)

    clusters = WorkloadClusters(Infra(), factory, lambda *a: None)
    cluster = clusters.ensure(ClusterKey("ns", "wl"))
    try:
        await until(cluster.synced)
        assert cluster.pods is not None and cluster.nodes is not None
        assert cluster.pods.objects == {"ns/p1": lean(pod("p1", "5"))}
        node = cluster.nodes.get("n1")
        assert node is not None and "managedFields" not in node["metadata"]
        assert node["metadata"]["labels"] == {"a": "b"}
    finally:
        await clusters.close()


class PagedSource(Source):
    """Lists three pods a page at a time (``RestClient.pages``), noting, before it sends each
    page, whether the pages already sent were trimmed."""

    def __init__(self) -> None:
        super().__init__()
        self.trimmed_before_next: list[bool] = []

    async def pages(self, query: Query) -> AsyncIterator[tuple[list[JSON], str]]:
        for k in range(3):
            self.trimmed_before_next.append(
                all("managedFields" not in p["metadata"] for p in self.sent)
            )
            self.sent.append(pod(f"p{k}", "5"))
            yield [self.sent[-1]], "5"


async def test_a_paged_list_is_trimmed_page_by_page() -> None:
    source = PagedSource()
    listed, version = await Lean(source).list(Query("/api/v1/pods"))
    assert (listed, version) == ([lean(pod(f"p{k}", "5")) for k in range(3)], "5")
    # Each page lost its managedFields before the next was decoded: trimmed only at the end,
    # the freed fields stayed as holes in the process's memory (RSS as if never trimmed).
    assert source.trimmed_before_next == [True, True, True]
