"""The connect-time half of the URL policy, against a real HTTP server on 127.0.0.1.

The server stands for whatever a hostile name points at (the node's loopback, a metadata
service): a refused request must never reach it. The resolver is injected through the
``Resolver`` port so a name can "resolve" to 127.0.0.1 without touching /etc/hosts or DNS;
everything after the resolver (the policy, the pinned connection, the Host header) is real.
"""

from __future__ import annotations

import copy
import datetime as dt
import ssl
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from autoscaler.signals.guarded_transport import GuardedTransport
from autoscaler.signals.prometheus import PrometheusSource
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.operator.adapters import PrometheusUsage
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_webhook_rules import POOL
from webhook import certs

NAME = "prom.tenant.example"
BODY_SECRET = "db-password-hunter2-from-the-body"


class StaticResolver:
    """``Resolver`` answering every name with fixed addresses; counts its lookups."""

    def __init__(self, *addresses: str) -> None:
        self.addresses, self.lookups = list(addresses), 0

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        self.lookups += 1
        return self.addresses


class Server:
    """A real aiohttp server on 127.0.0.1 recording what reached it."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.garbage = False  # answer 200 with a body that is not a query result
        self.hosts: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.hosts.append(request.headers.get("Host", ""))
        if self.garbage:
            return web.Response(text=f"<html>{BODY_SECRET}</html>")
        if self.status != 200:
            return web.Response(status=self.status, text=f"error page: {BODY_SECRET}")
        result = {"resultType": "vector", "result": []}
        return web.json_response({"status": "success", "data": result})


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, int]]:
    state = Server()
    app = web.Application()
    app.router.add_post("/api/v1/query", state.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    try:
        yield state, port
    finally:
        await runner.cleanup()


def _source(port: int, resolver: StaticResolver, allowed: frozenset[str]) -> PrometheusSource:
    url = f"http://{NAME}:{port}"
    return PrometheusSource(
        url, clock=VirtualClock(1_700_000_000.0), allowed_hosts=allowed, resolver=resolver
    )


async def test_a_name_resolving_to_loopback_is_refused_before_connecting(
    server: tuple[Server, int],
) -> None:
    state, port = server
    resolver = StaticResolver("127.0.0.1")
    async with _source(port, resolver, frozenset()) as src:
        reading = await src.node_gpu_usage(["cell-0"])
    assert not reading.health.fresh and reading.health.read_failed
    assert "refused" in reading.health.detail and "loopback" in reading.health.detail
    assert resolver.lookups == 1
    assert state.hosts == []  # nothing reached the server


@pytest.mark.parametrize(
    "answers",
    [("169.254.169.254",), ("10.0.0.7", "127.0.0.1"), ("::ffff:127.0.0.1",), ("fd00:ec2::254",)],
)
async def test_every_resolved_address_is_judged(
    server: tuple[Server, int], answers: tuple[str, ...]
) -> None:
    state, port = server
    async with _source(port, StaticResolver(*answers), frozenset()) as src:
        reading = await src.node_gpu_usage(["cell-0"])
    assert "prometheus refused" in reading.health.detail
    assert state.hosts == []


async def test_link_local_is_refused_even_for_an_allowlisted_name(
    server: tuple[Server, int],
) -> None:
    state, port = server
    async with _source(port, StaticResolver("169.254.169.254"), frozenset({NAME})) as src:
        reading = await src.node_gpu_usage(["cell-0"])
    assert "link-local" in reading.health.detail
    assert state.hosts == []


async def test_an_allowlisted_name_connects_to_the_checked_address_with_its_host_header(
    server: tuple[Server, int],
) -> None:
    state, port = server
    resolver = StaticResolver("127.0.0.1")
    async with _source(port, resolver, frozenset({NAME})) as src:
        reading = await src.node_gpu_usage(["cell-0"])
    # NAME exists in no DNS: reaching the server proves the checked address was used
    assert state.hosts and all(h == f"{NAME}:{port}" for h in state.hosts)
    assert "refused" not in reading.health.detail
    assert resolver.lookups == len(state.hosts)  # resolved and judged before every request


async def test_a_non_2xx_body_never_reaches_the_health_detail(server: tuple[Server, int]) -> None:
    state, port = server
    state.status = 503
    async with _source(port, StaticResolver("127.0.0.1"), frozenset({NAME})) as src:
        reading = await src.node_gpu_usage(["cell-0"])
    assert state.hosts  # the request was made and answered
    assert reading.health.detail == "prometheus http_5xx: HTTP 503: Service Unavailable"
    assert BODY_SECRET not in reading.health.detail and "error page" not in reading.health.detail


async def test_a_2xx_body_that_is_no_query_result_is_not_quoted(
    server: tuple[Server, int],
) -> None:
    state, port = server
    state.garbage = True
    async with _source(port, StaticResolver("127.0.0.1"), frozenset({NAME})) as src:
        reading = await src.node_gpu_usage(["cell-0"])
    assert state.hosts
    assert reading.health.detail == (
        "prometheus malformed: the answer is not a Prometheus query result"
    )


def _pool(url: str) -> GPUCellPool:
    raw: dict[str, Any] = copy.deepcopy(POOL)
    raw["metadata"] = {"name": "p", "namespace": "cells"}
    raw["spec"]["autoscaling"] = {"prometheus": {"url": url}}
    return GPUCellPool.model_validate(raw)


async def test_the_operator_usage_source_applies_the_policy(server: tuple[Server, int]) -> None:
    """``PrometheusUsage`` (what the operator runs) refuses loopback unless allowlisted."""
    state, port = server
    refused = PrometheusUsage(None, VirtualClock(1_700_000_000.0))  # type: ignore[arg-type]  # no Secret to read
    _, health = await refused.usage(_pool(f"http://127.0.0.1:{port}"), ["cell-0"])
    await refused.close()
    assert "loopback" in health.detail and state.hosts == []
    allowed = PrometheusUsage(None, VirtualClock(1_700_000_000.0), frozenset({"127.0.0.1"}))  # type: ignore[arg-type]
    _, health = await allowed.usage(_pool(f"http://127.0.0.1:{port}"), ["cell-0"])
    await allowed.close()
    assert state.hosts == [f"127.0.0.1:{port}"] * len(state.hosts) and state.hosts


async def test_the_transport_refuses_without_calling_the_inner_transport() -> None:
    class Inner(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.calls = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            self.calls += 1
            raise AssertionError("must not be called")

    inner = Inner()
    async with httpx.AsyncClient(
        transport=GuardedTransport(inner, (), StaticResolver("10.0.0.1"))
    ) as client:
        with pytest.raises(httpx.ConnectError, match="metadata"):
            await client.get("http://metadata.google.internal/")
    assert inner.calls == 0


@pytest.mark.parametrize(("cert_for", "verified"), [(NAME, True), ("other.example", False)])
async def test_https_to_the_pinned_address_verifies_the_original_host_name(
    tmp_path: Path, cert_for: str, verified: bool
) -> None:
    """TLS goes to 127.0.0.1, but SNI and certificate verification use the URL's host name."""
    now = dt.datetime.now(dt.UTC)
    ca = certs.new_ca("test-ca", now, dt.timedelta(days=1))
    serving = certs.new_serving(ca, certs.Names(dns=(cert_for,)), now, dt.timedelta(days=1))
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    state = Server()
    app = web.Application()
    app.router.add_post("/api/v1/query", state.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    port = int(runner.addresses[0][1])
    try:
        async with PrometheusSource(
            f"https://{NAME}:{port}",
            ca_pem=ca.cert_pem.decode(),
            clock=VirtualClock(1_700_000_000.0),
            allowed_hosts=frozenset({NAME}),
            resolver=StaticResolver("127.0.0.1"),
        ) as src:
            reading = await src.node_gpu_usage(["cell-0"])
    finally:
        await runner.cleanup()
    if verified:
        assert state.hosts == [f"{NAME}:{port}"] * len(state.hosts) and state.hosts
        assert not reading.health.detail.startswith("prometheus "), reading.health.detail
    else:
        assert state.hosts == [] and "prometheus connect" in reading.health.detail
