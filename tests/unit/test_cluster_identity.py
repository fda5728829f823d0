"""A workload cluster's identity, whichever kubeconfig Secret reached it.

What these prove: a connection's identity is its Secret key until its Pods, Nodes and
Namespaces caches are synced, then the UID of the cluster's kube-system Namespace (two Secrets
in two namespaces reaching one cluster get the same identity, and an ``IDENTITY`` wake says
so); a credential change that reaches another cluster falls back to the key at once, announces
the lost identity, then learns the new one; a cluster without a kube-system Namespace keeps the
key (judged per Secret). ``CacheWorkloadView.identity`` answers the same for a pool's key.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import yaml

from gpucellpool.kube.cache import Query
from gpucellpool.kube.workload import IDENTITY_EVENT, ClusterKey, ClusterUID, WorkloadClusters
from gpucellpool.operator.adapters import CacheWorkloadView
from tests.unit.test_loop_watch import FakeClient, until

JSON = dict[str, Any]
UIDS = {"https://one": "uid-one", "https://two": "uid-two", "https://bare": ""}


class Cluster(FakeClient):
    """A workload apiserver: its kube-system Namespace carries the server's UID (none for
    ``bare``); listing Pods waits for ``pods_listed`` (the cache syncs when the test says)."""

    def __init__(self, config: Mapping[str, Any], pods_listed: asyncio.Event) -> None:
        super().__init__(config)
        self.pods_ready = pods_listed

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        if query.path == "/api/v1/pods":
            await self.pods_ready.wait()
        uid = UIDS[self.config["server"]]
        if query.path == "/api/v1/namespaces" and uid:
            return [{"metadata": {"name": "kube-system", "uid": uid, "resourceVersion": "1"}}], "1"
        return [], "1"


def kubeconfig(server: str) -> str:
    return base64.b64encode(yaml.safe_dump({"server": server}).encode()).decode()


class Infra:
    """The infrastructure apiserver: one kubeconfig Secret ``wl`` per namespace (``servers``);
    ``rotate`` sends a MODIFIED event carrying another server to that namespace's watch."""

    def __init__(self, servers: dict[str, str]) -> None:
        self.servers = servers
        self.events: dict[str, asyncio.Queue[JSON]] = {ns: asyncio.Queue() for ns in servers}

    def secret(self, namespace: str, rv: str) -> JSON:
        meta = {"name": "wl", "namespace": namespace, "resourceVersion": rv}
        return {"metadata": meta, "data": {"value": kubeconfig(self.servers[namespace])}}

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        return [self.secret(query.path.split("/")[4], "1")], "1"

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        queue = self.events[query.path.split("/")[4]]
        while True:
            yield await queue.get()

    def rotate(self, namespace: str, server: str) -> None:
        self.servers[namespace] = server
        self.events[namespace].put_nowait(
            {"type": "MODIFIED", "object": self.secret(namespace, "2")}
        )


async def test_two_secrets_to_one_cluster_share_its_identity_once_synced() -> None:
    pods_listed = asyncio.Event()
    wakes: list[tuple[ClusterKey, str, JSON]] = []

    async def factory(config: Mapping[str, Any]) -> Cluster:
        return Cluster(config, pods_listed)

    infra = Infra({"team-a": "https://one", "team-b": "https://one"})
    clusters = WorkloadClusters(infra, factory, lambda k, kind, o: wakes.append((k, kind, o)))
    view = CacheWorkloadView(clusters)
    a, b = ClusterKey("team-a", "wl"), ClusterKey("team-b", "wl")
    first, second = clusters.ensure(a), clusters.ensure(b)
    await until(lambda: first.client is not None and second.client is not None)
    # Connected, Namespaces listed, Pods not yet: each Secret stands for itself.
    await until(lambda: first.namespaces is not None and first.namespaces.synced.is_set())
    assert (first.identity, second.identity) == (a, b) and view.identity(a) == a
    pods_listed.set()
    await until(lambda: first.uid != "" and second.uid != "")
    assert first.identity == second.identity == ClusterUID("uid-one") == view.identity(b)
    learned = [(k, o) for k, kind, o in wakes if kind == IDENTITY_EVENT]
    assert sorted(learned, key=repr) == [(a, {"uid": "uid-one"}), (b, {"uid": "uid-one"})]
    assert view.identity("not a key") == "not a key"  # fakes' and unknown keys stand for themselves

    # team-b's credential now reaches another cluster: the old identity is given up and
    # announced, then the new one is learned.
    infra.rotate("team-b", "https://two")
    await until(lambda: second.identity == ClusterUID("uid-two"))
    kinds = [(kind, o) for k, kind, o in wakes if k == b and kind == IDENTITY_EVENT]
    assert kinds[-2:] == [
        (IDENTITY_EVENT, {"uid": "uid-one"}),
        (IDENTITY_EVENT, {"uid": "uid-two"}),
    ]
    assert first.identity == ClusterUID("uid-one")
    await clusters.close()


async def test_a_cluster_without_kube_system_is_judged_per_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pods_listed = asyncio.Event()
    pods_listed.set()

    async def factory(config: Mapping[str, Any]) -> Cluster:
        return Cluster(config, pods_listed)

    clusters = WorkloadClusters(Infra({"team-a": "https://bare"}), factory, lambda *a: None)
    key = ClusterKey("team-a", "wl")
    cluster = clusters.ensure(key)
    await until(lambda: "no kube-system Namespace" in caplog.text)  # the identity task ended
    assert cluster.synced()
    assert cluster.identity == key and cluster.uid == ""
    await clusters.close()
