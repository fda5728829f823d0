"""Watch caches and the shared workload clusters on a scripted ``ListWatch``.

What these prove: a cache lists then watches from the list's resourceVersion; bookmarks move
the resourceVersion without touching the store; a 410 (as an ERROR event) relists and reports
the difference (added, modified, deleted) to subscribers; other failures back off and resume
from the last resourceVersion; a kubeconfig Secret change rebuilds the workload caches with the
new credential, and an unusable one becomes an error string that never contains the content.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import yaml

from gpucellpool.kube.cache import Gone, Query, WatchCache
from gpucellpool.kube.workload import ClusterKey, WorkloadClusters

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
