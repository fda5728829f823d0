"""A list longer than one page, against a real apiserver: every object once, one snapshot.

``RestClient.list`` (the lists behind every watch cache) asks for ``LIST_PAGE_LIMIT`` items a
request and follows the apiserver's ``continue`` token, so 40,000 pods are never one answer
that must arrive within one request timeout (tests/bench/test_shard_scale_bench.py). The unit
tests script the pages; this shows a real kube-apiserver pages and that the pages join up.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial

from gpucellpool.kube.cache import Query, WatchCache
from gpucellpool.kube.rest import LIST_PAGE_LIMIT, RestClient
from simulations.harness import ClusterEndpoint
from tests.bench.scale_objects import bounded
from tests.integration.test_loop_helpers import client_for

OBJECTS = 2 * LIST_PAGE_LIMIT + 7  # three pages, the last one short


async def create_map(api: RestClient, namespace: str, i: int) -> None:
    body = {"metadata": {"name": f"cm-{i:04d}"}, "data": {"i": str(i)}}
    await api.create(f"/api/v1/namespaces/{namespace}/configmaps", body)


async def test_a_list_longer_than_a_page_returns_every_object_once(
    infra: ClusterEndpoint, namespace: str
) -> None:
    api = await client_for(infra)
    try:
        await bounded([partial(create_map, api, namespace, i) for i in range(OBJECTS)], 16)
        sent: list[list[tuple[str, str]]] = []
        call = api.call

        async def counted(method: str, path: str, query: list[tuple[str, str]]) -> object:
            sent.append(query)
            return await call(method, path, query)

        api.call = counted  # type: ignore[assignment,method-assign]
        query = Query(f"/api/v1/namespaces/{namespace}/configmaps")
        items, version = await api.list(query)
        names = [i["metadata"]["name"] for i in items]
        assert sorted(names) == [f"cm-{i:04d}" for i in range(OBJECTS)]  # each once
        assert len(sent) == 3, sent
        assert sum(1 for q in sent if any(k == "continue" for k, _ in q)) == 2
        assert all(("limit", str(LIST_PAGE_LIMIT)) in q for q in sent)
        assert version and all(i["kind"] == "ConfigMap" for i in items)
        cache = WatchCache(api, query)  # a cache over it holds them all once synced
        mirror = asyncio.create_task(cache.run())
        try:
            await asyncio.wait_for(cache.synced.wait(), 60)
            assert len(cache.objects) == OBJECTS and cache.resource_version
        finally:
            mirror.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mirror
    finally:
        await api.close()
