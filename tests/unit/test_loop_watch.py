"""Watch caches and the shared workload clusters on a scripted ``ListWatch``.

What these prove: a cache lists then watches from the list's resourceVersion; bookmarks move
the resourceVersion without touching the store; a 410 (as an ERROR event) relists and reports
the difference (added, modified, deleted) to subscribers; other failures back off and resume
from the last resourceVersion; a kubeconfig Secret change rebuilds the workload caches with the
new credential, and an unusable one becomes an error string that never contains the content.
A cache is ``live`` from a successful list or event until a failure; a workload cluster vouches
(``live_on``) only for the kubeconfig its live caches were built from; its node Lease cache,
once asked for, survives rebuilds and wakes nobody.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import yaml

from gpucellpool.kube.cache import Query, WatchCache
from gpucellpool.kube.errors import Gone
from gpucellpool.kube.workload import NODE_LEASES_PATH, ClusterKey, WorkloadClusters

JSON = dict[str, Any]


def obj(name: str, rv: str, **extra: Any) -> JSON:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, **extra}


class Script:
    """Lists return ``lists`` in order; each watch call replays the next event batch."""

    def __init__(self, lists: list[tuple[list[JSON], str]], watches: list[list[Any]]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []
        self.done = asyncio.Event()

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        return self.lists.pop(0)

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        self.watched_from.append(resource_version)
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()  # park forever
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


async def until(check: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)  # polling with a deadline


async def test_bookmarks_and_gone_relist_report_differences() -> None:
    script = Script(
        lists=[
            ([obj("a", "1"), obj("b", "2")], "2"),
            ([obj("a", "5", changed=True), obj("c", "6")], "6"),  # after 410: b gone, c new
        ],
        watches=[
            [
                {"type": "BOOKMARK", "object": obj("", "3")},
                {"type": "ERROR", "object": {"code": 410}},
            ],
        ],
    )
    changes: list[tuple[str, str]] = []
    cache = WatchCache(script, Query("/x"), lambda k, o: changes.append((k, o["metadata"]["name"])))
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(script.done.wait(), 5)
    task.cancel()
    assert script.watched_from == ["2", "6"]  # watched from each list's version
    assert changes == [
        ("ADDED", "a"), ("ADDED", "b"),                      # first list
        ("MODIFIED", "a"), ("ADDED", "c"), ("DELETED", "b"),  # relist diff
    ]  # fmt: skip
    assert set(cache.objects) == {"ns/a", "ns/c"} and cache.relists == 2


async def test_http_gone_and_errors_resume_correctly() -> None:
    script = Script(
        lists=[([obj("a", "1")], "1"), ([obj("a", "1")], "9")],
        watches=[
            [{"type": "ADDED", "object": obj("b", "4")}, ConnectionError("reset")],
            [Gone("410")],
        ],
    )
    cache = WatchCache(script, Query("/x"), retry_s=0.001)
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(script.done.wait(), 5)
    task.cancel()
    # After the connection error it resumed from the last seen version (4), not from scratch;
    # after Gone it relisted and watched from the new list's version.
    assert script.watched_from == ["1", "4", "9"]
    assert "ConnectionError" in cache.last_error


async def test_a_cache_is_live_from_a_success_until_a_failure() -> None:
    parked = Script(lists=[([obj("a", "1")], "1")], watches=[])
    cache = WatchCache(parked, Query("/x"))
    assert not cache.live
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(parked.done.wait(), 5)
    assert cache.live  # listed, watching
    task.cancel()

    broken = Script(lists=[([obj("a", "1")], "1")], watches=[[ConnectionError("reset")]])
    cache = WatchCache(broken, Query("/x"), retry_s=30)  # sits in its back-off after the error
    task = asyncio.create_task(cache.run())
    await until(lambda: cache.last_error != "")
    assert not cache.live
    task.cancel()

    recovered = Script(
        lists=[([obj("a", "1")], "1")],
        watches=[[ConnectionError("reset")], [{"type": "ADDED", "object": obj("b", "2")}]],
    )
    cache = WatchCache(recovered, Query("/x"), retry_s=0.001)
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(recovered.done.wait(), 5)
    assert cache.live and cache.last_error  # an event after the failure: live again
    task.cancel()


class FakeClient:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.closed = False

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        return [], "1"

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        await asyncio.Event().wait()
        yield {}

    async def close(self) -> None:
        self.closed = True


def secret(rv: str, kubeconfig: str | None) -> JSON:
    data = {} if kubeconfig is None else {"value": base64.b64encode(kubeconfig.encode()).decode()}
    return {"metadata": {"name": "wl", "namespace": "ns", "resourceVersion": rv}, "data": data}


async def test_secret_change_rebuilds_workload_caches() -> None:
    made: list[FakeClient] = []

    async def factory(config: Mapping[str, Any]) -> FakeClient:
        if "server" not in config:
            raise ValueError(f"bad kubeconfig {config}")  # the message contains the content
        made.append(FakeClient(config))
        return made[-1]

    def infra(*versions: str | None) -> Script:
        first, *rest = versions
        events = [{"type": "MODIFIED", "object": secret(str(i + 2), v)} for i, v in enumerate(rest)]
        return Script(lists=[([secret("1", first)], "1")], watches=[events])

    wakes: list[ClusterKey] = []
    key = ClusterKey("ns", "wl")
    one, two = yaml.safe_dump({"server": "https://one"}), yaml.safe_dump({"server": "https://two"})
    clusters = WorkloadClusters(infra(one, two), factory, lambda k, kind, o: wakes.append(k))
    cluster = clusters.ensure(key)
    assert clusters.ensure(key) is cluster  # shared by every pool using that Secret
    await until(lambda: cluster.synced() and made and made[-1].config["server"] == "https://two")
    assert all(c.closed for c in made[:-1]) and not made[-1].closed  # old clients closed
    assert key in wakes and cluster.error == ""
    await clusters.close()
    assert made[-1].closed

    bad = WorkloadClusters(infra(yaml.safe_dump({"token-abc": 1})), factory, lambda *a: None)
    broken = bad.ensure(key)
    await until(lambda: broken.error != "kubeconfig Secret not read yet")
    assert broken.error == "kubeconfig unusable: ValueError" and not broken.synced()
    await bad.close()


class Rotation:
    """The kubeconfig Secret, listed as ``first``; its watch turns it into ``then`` once
    ``rotate`` is set."""

    def __init__(self, first: JSON, then: JSON) -> None:
        self.first, self.then = first, then
        self.rotate = asyncio.Event()

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        return [self.first], "1"

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        await self.rotate.wait()
        yield {"type": "MODIFIED", "object": self.then}
        await asyncio.Event().wait()  # park forever


class LeaseClient(FakeClient):
    """A workload cluster holding one Node and its kubelet Lease."""

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        if query.path == NODE_LEASES_PATH:
            return [obj("cell-0", "7")], "7"
        return ([obj("cell-0", "3")] if query.path == "/api/v1/nodes" else []), "3"


async def test_a_cluster_vouches_for_its_own_kubeconfig_and_mirrors_leases_quietly() -> None:
    made: list[FakeClient] = []

    async def factory(config: Mapping[str, Any]) -> FakeClient:
        made.append(LeaseClient(config))
        return made[-1]

    one, two = yaml.safe_dump({"server": "https://one"}), yaml.safe_dump({"server": "https://two"})
    raw_one, raw_two = (secret("1", k)["data"]["value"] for k in (one, two))
    infra = Rotation(secret("1", one), secret("2", two))
    wakes: list[tuple[str, str]] = []
    clusters = WorkloadClusters(infra, factory, lambda k, kind, o: wakes.append((kind, str(o))))
    cluster = clusters.ensure(ClusterKey("ns", "wl"))
    await until(cluster.synced)
    assert cluster.live_on(raw_one) and not cluster.live_on(raw_two)
    assert cluster.leases is None  # nobody asked for Leases yet
    cluster.watch_leases()
    leases = cluster.leases
    assert leases is not None
    await until(leases.synced.is_set)
    assert leases.get("ns/cell-0") is not None
    assert not any("'7'" in o for _, o in wakes)  # the Lease wakes nobody (Nodes do)
    assert any("'3'" in o for _, o in wakes)
    infra.rotate.set()
    await until(lambda: len(made) == 2 and cluster.synced())  # the Secret rotated: rebuilt
    assert cluster.live_on(raw_two) and not cluster.live_on(raw_one)
    rebuilt = cluster.leases
    assert rebuilt is not None and rebuilt is not leases  # Leases mirrored on the new client
    await until(rebuilt.synced.is_set)
    await clusters.close()
    assert not cluster.live_on(raw_two)  # stopped: vouches for nothing
