"""One operator, several watched namespaces (the chart's ``watchNamespaces``), none beyond them.

``gpucellpool run --namespace a --namespace b`` (or ``a,b``) watches GPUCellPools and their outer
objects in exactly those namespaces; before this, only the first was watched, so a chart with
two watchNamespaces granted RBAC for pools the operator never looked at.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from simulations.harness import ClusterEndpoint, Harness
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pending,
    create_pool,
    decision,
    shut_down,
    start_app,
    watch_pool,
)


@pytest.fixture
def two_more_namespaces(harness: Harness) -> Iterator[tuple[str, str]]:
    names = (f"t-watched-{secrets.token_hex(3)}", f"t-unwatched-{secrets.token_hex(3)}")
    for endpoint in harness.endpoints:
        for name in names:
            endpoint.create_namespace(name, labels={"gpucellpool.test/namespace": "true"})
    try:
        yield names
    finally:
        for endpoint in harness.endpoints:
            for name in names:
                endpoint.delete_namespace(name)


async def test_pools_in_every_watched_namespace_and_none_other_are_decided(
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    two_more_namespaces: tuple[str, str],
) -> None:
    watched, unwatched = two_more_namespaces
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    app = await start_app(infra, namespace, "multi", pool_namespaces=(watched,))
    watches = {ns: await watch_pool(infra_api, ns, "ns") for ns in (namespace, watched, unwatched)}
    try:
        for ns in (unwatched, namespace, watched):  # the unwatched pool first
            await create_pool(infra_api, workload, autoscaled_pool("ns", ns, f"trial-{ns}"))
            await create_pending(workload_api, ns, "p", f"trial-{ns}")
        for ns in (namespace, watched):
            _, status = await watches[ns][0].until(lambda s: s.get("desiredReplicas") == 1, 30)
            assert decision(status)["reason"] == "ScaledUp"
        # Both watched pools decided; the unwatched one, created and pending first, never was.
        last = watches[unwatched][0].seen[-1][1] if watches[unwatched][0].seen else {}
        assert "lastDecision" not in last and "desiredReplicas" not in last
        ready, detail = app.ready()
        assert ready, detail
    finally:
        await shut_down(app, (t for _, t in watches.values()), (infra_api, workload_api))
