"""``CachedReads``: a pass's gets come from the watch caches, never older than its own writes.

What this proves: with the cache caught up a get does not reach the apiserver; after the
provisioner's own write (or a 409, or a delete) the next get is a GET until the cache holds the
very version the provisioner last saw, after which the cache answers again; objects no cache
mirrors, and an unsynced cache, are always GETs. A list is answered from the cache (selectors
evaluated as the apiserver would) only while every object the provisioner wrote is caught up
there, and is a GET for selectors it cannot evaluate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from provisioner.cached_reads import CachedReads, Store, selector_match
from provisioner.kube import JSON, KINDS, Conflict, Kind, KubeApi, KubeError

POOL = KINDS["GPUCellPool"]


def _obj(name: str, version: int, **extra: Any) -> JSON:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version)}, **extra}


@dataclass
class Server:
    """The apiserver: objects by name, a resourceVersion bumped on every write."""

    objects: dict[str, JSON] = field(default_factory=dict)
    gets: int = 0
    lists: int = 0
    version: int = 10
    conflict: bool = False

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        self.gets += 1
        return self.objects.get(name)

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        self.lists += 1
        return list(self.objects.values())  # the tests list without narrowing selectors

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        if self.conflict:
            raise Conflict(409, "stale resourceVersion")
        self.version += 1
        self.objects[name] = _obj(name, self.version, **dict(patch))
        return self.objects[name]

    async def delete(
        self, kind: Kind, namespace: str | None, name: str, grace_period_s: int | None = None
    ) -> bool:
        return self.objects.pop(name, None) is not None

    async def evict(self, namespace: str, name: str) -> None:
        if self.conflict:  # here: a PodDisruptionBudget allows no disruption
            raise KubeError(429, "Cannot evict pod as it would violate the pod's disruption budget")
        self.objects.pop(name, None)


@dataclass
class Cache:
    """A watch cache the test moves by hand (``catch_up`` = the watch delivered)."""

    server: Server
    objects: dict[str, JSON] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    def get(self, key: str) -> JSON | None:
        return self.objects.get(key)

    def items(self) -> list[JSON]:
        return list(self.objects.values())

    def catch_up(self) -> None:
        self.objects = {f"ns/{n}": o for n, o in self.server.objects.items()}
        self.synced.set()


def _reads(server: Server, cache: Cache, kind_cached: str = "GPUCellPool") -> CachedReads:
    def stores(kind: str, namespace: str | None, name: str) -> Store | None:
        return cache if kind == kind_cached else None

    return CachedReads(cast(KubeApi, server), stores)


@pytest.fixture
def world() -> tuple[Server, Cache, CachedReads]:
    server = Server({"p": _obj("p", 10)})
    cache = Cache(server)
    return server, cache, _reads(server, cache)


async def test_a_synced_cache_answers_without_a_request(world: Any) -> None:
    server, cache, reads = world
    cache.catch_up()
    assert (await reads.get(POOL, "ns", "p"))["metadata"]["resourceVersion"] == "10"
    assert (server.gets, reads.served) == (0, 1)


async def test_an_unsynced_cache_or_an_unmirrored_kind_is_a_get(world: Any) -> None:
    server, cache, reads = world
    await reads.get(POOL, "ns", "p")  # cache not synced yet
    cache.catch_up()
    server.objects["s"] = {"metadata": {"name": "s"}}
    await reads.get(KINDS["Secret"], "ns", "s")  # no cache mirrors Secrets here
    assert server.gets == 2


async def test_after_its_own_write_a_lagging_cache_is_not_read(world: Any) -> None:
    server, cache, reads = world
    cache.catch_up()
    written = await reads.patch(POOL, "ns", "p", {"spec": {"replicas": 3}})
    assert written["metadata"]["resourceVersion"] == "11"
    # the watch has not delivered version 11 yet: the get goes to the apiserver
    got = await reads.get(POOL, "ns", "p")
    assert got is not None and got["metadata"]["resourceVersion"] == "11"
    assert server.gets == 1
    cache.catch_up()  # the cache now holds version 11: it answers again
    got = await reads.get(POOL, "ns", "p")
    assert got is not None and got["spec"] == {"replicas": 3}
    assert server.gets == 1
    await reads.get(POOL, "ns", "p")
    assert (server.gets, reads.served, reads.fetched) == (1, 2, 1)


async def test_a_lost_conflict_reads_fresh_until_the_cache_agrees(world: Any) -> None:
    server, cache, reads = world
    cache.catch_up()
    server.conflict = True
    with pytest.raises(Conflict):
        await reads.patch(POOL, "ns", "p", {"spec": {}})
    server.objects["p"] = _obj("p", 12)  # someone else's write, not yet in the cache
    got = await reads.get(POOL, "ns", "p")
    assert got is not None and got["metadata"]["resourceVersion"] == "12"
    assert server.gets == 1
    cache.catch_up()
    await reads.get(POOL, "ns", "p")
    assert server.gets == 1


async def test_a_delete_is_seen_before_the_cache_drops_the_object(world: Any) -> None:
    server, cache, reads = world
    cache.catch_up()
    assert await reads.delete(POOL, "ns", "p")
    assert await reads.get(POOL, "ns", "p") is None  # cache still holds it: a GET says gone
    assert server.gets == 1
    cache.catch_up()
    assert await reads.get(POOL, "ns", "p") is None
    assert server.gets == 1  # gone in the cache too: answered there


async def test_an_answer_from_the_cache_is_a_copy_the_pass_may_edit(world: Any) -> None:
    _, cache, reads = world
    cache.catch_up()
    got = await reads.get(POOL, "ns", "p")
    got["metadata"]["resourceVersion"] = "edited by the pass"
    assert cache.get("ns/p")["metadata"]["resourceVersion"] == "10"  # the shared view unchanged


def _labelled(name: str, version: int, node: str, **labels: str) -> JSON:
    obj = _obj(name, version, spec={"nodeName": node})
    obj["metadata"]["labels"] = labels
    return obj


@pytest.mark.parametrize(
    ("labels", "fields", "selected"),
    [
        ("", "", {"a", "b", "c"}),
        ("pool=x", "", {"a", "b"}),
        ("pool==x,role!=spare", "", {"a"}),
        ("role", "", {"b"}),
        ("!role", "", {"a", "c"}),
        ("pool=x", "spec.nodeName=n1", {"b"}),
        ("", "metadata.name!=a", {"b", "c"}),
    ],
)
def test_selectors_select_as_the_apiserver_does(
    labels: str, fields: str, selected: set[str]
) -> None:
    objects = [
        _labelled("a", 1, "n0", pool="x"),
        _labelled("b", 1, "n1", pool="x", role="spare"),
        _labelled("c", 1, "n1", pool="y"),
    ]
    match = selector_match(labels, fields)
    assert match is not None
    assert {o["metadata"]["name"] for o in objects if match(o)} == selected


def test_selectors_it_cannot_evaluate_leave_the_list_to_the_apiserver() -> None:
    assert selector_match("pool in (x,y)", "") is None
    assert selector_match("", "status.phase=Running") is None


async def test_a_list_comes_from_the_cache_once_it_holds_the_passs_writes(world: Any) -> None:
    server, cache, reads = world
    server.objects["q"] = _obj("q", 10)
    cache.catch_up()
    assert {o["metadata"]["name"] for o in await reads.list(POOL, "ns")} == {"p", "q"}
    assert server.lists == 0
    await reads.patch(POOL, "ns", "p", {"spec": {"replicas": 2}})
    await reads.list(POOL, "ns")  # the cache lags the write: a GET
    assert server.lists == 1
    cache.catch_up()
    listed = await reads.list(POOL, "ns")
    assert server.lists == 1  # caught up: the cache answers, with the write
    assert {o["metadata"]["name"]: o.get("spec") for o in listed}["p"] == {"replicas": 2}
    listed[0]["metadata"]["name"] = "edited by the pass"
    assert "edited by the pass" not in {o["metadata"]["name"] for o in cache.items()}


async def test_a_deleted_object_keeps_lists_fresh_until_the_cache_drops_it(world: Any) -> None:
    server, cache, reads = world
    cache.catch_up()
    await reads.delete(POOL, "ns", "p")
    assert await reads.list(POOL, "ns") == []  # the cache still holds p: a GET
    cache.catch_up()
    assert await reads.list(POOL, "ns") == []
    assert server.lists == 1


async def test_an_unevaluable_selector_or_unsynced_cache_lists_from_the_apiserver(
    world: Any,
) -> None:
    server, cache, reads = world
    await reads.list(POOL, "ns")  # not synced yet
    cache.catch_up()
    await reads.list(POOL, "ns", label_selector="pool in (x)")
    await reads.list(KINDS["Secret"], "ns")  # no cache mirrors Secrets here
    assert server.lists == 3


async def test_pods_listed_fresh_after_an_eviction_until_the_cache_drops_the_pod() -> None:
    server = Server({"a": _labelled("a", 10, "n0"), "b": _labelled("b", 10, "n0")})
    cache = Cache(server)
    reads = _reads(server, cache, "Pod")
    cache.catch_up()
    server.conflict = True  # refused (429): the pod stays, the cache is still right
    with pytest.raises(KubeError):
        await reads.evict("ns", "a")
    assert len(await reads.list(KINDS["Pod"], None, field_selector="spec.nodeName=n0")) == 2
    assert server.lists == 0
    server.conflict = False
    await reads.evict("ns", "a")
    listed = await reads.list(KINDS["Pod"], None, field_selector="spec.nodeName=n0")
    assert [p["metadata"]["name"] for p in listed] == ["b"]  # a GET: the cache still has a
    assert server.lists == 1
    cache.catch_up()  # the watch delivered a's deletion
    await reads.list(KINDS["Pod"], None, field_selector="spec.nodeName=n0")
    assert server.lists == 1


@dataclass(eq=False)
class VersionedCache(Cache):
    """A cache with ``WatchCache.version`` (bumped by ``catch_up``), counting full scans."""

    version: int = 0
    scans: int = 0

    def items(self) -> list[JSON]:
        self.scans += 1
        return super().items()

    def catch_up(self) -> None:
        super().catch_up()
        self.version += 1


async def test_pods_on_a_node_come_from_an_index_rebuilt_only_on_change() -> None:
    server = Server({f"p{i}": _labelled(f"p{i}", 10, f"n{i % 3}") for i in range(9)})
    cache = VersionedCache(server)
    reads = _reads(server, cache, "Pod")
    cache.catch_up()
    for node in ("n0", "n1", "n2", "n0"):  # one pass: every cell's pods
        listed = await reads.list(KINDS["Pod"], None, field_selector=f"spec.nodeName={node}")
        assert {p["spec"]["nodeName"] for p in listed} == {node} and len(listed) == 3
    assert cache.scans == 1  # one scan of the cluster's pods, not one per cell
    server.objects["new"] = _labelled("new", 11, "n1")
    cache.catch_up()  # the watch delivered a new pod: the index is rebuilt once
    listed = await reads.list(KINDS["Pod"], None, field_selector="spec.nodeName=n1")
    assert "new" in {p["metadata"]["name"] for p in listed}
    assert await reads.list(KINDS["Pod"], "other", field_selector="spec.nodeName=n1") == []
    assert await reads.list(KINDS["Pod"], None, field_selector="spec.nodeName=n9") == []
    assert cache.scans == 2 and server.lists == 0
