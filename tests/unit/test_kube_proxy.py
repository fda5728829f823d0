"""The proxy a connection to an apiserver goes through: the kubeconfig's ``proxy-url``, else the
environment's (``HTTPS_PROXY``/``HTTP_PROXY`` less ``NO_PROXY``, as client-go), read once when
the connection is made rather than by aiohttp in a worker thread for every request."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpucellpool.kube.access import Access
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.transport import Connection, env_proxy

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")
API = "http://apiserver.invalid:6443"  # never resolved: only a proxy can answer for it


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


def test_the_environment_names_the_proxy_per_scheme_and_no_proxy_exempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert env_proxy("https://api.example:6443") is None  # nothing set
    monkeypatch.setenv("HTTPS_PROXY", "http://tls-proxy:3128")
    monkeypatch.setenv("http_proxy", "http://plain-proxy:3128")
    assert env_proxy("https://api.example:6443") == "http://tls-proxy:3128"
    assert env_proxy("http://api.example:8080") == "http://plain-proxy:3128"
    monkeypatch.setenv("NO_PROXY", "other.example,.example")
    assert env_proxy("https://api.example:6443") is None
    assert env_proxy("https://api.elsewhere:6443") == "http://tls-proxy:3128"


@pytest.fixture
async def forward_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A forward proxy that answers every request itself and records the URL it was asked for."""
    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(str(request.url))
        return web.json_response({"kind": "Namespace", "metadata": {"name": "answered"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    server = TestServer(app)
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), asked
    await server.close()


async def get_through(access: Access) -> dict[str, object]:
    rest = RestClient(Connection(access), timeout_s=5.0)
    try:
        return await rest.call("GET", "/api/v1/namespaces/default")
    finally:
        await rest.close()


async def test_a_request_goes_through_the_environments_proxy(
    forward_proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, asked = forward_proxy
    monkeypatch.setenv("HTTP_PROXY", proxy)
    answer = await get_through(Access(API, token="t"))
    assert answer["metadata"] == {"name": "answered"}
    assert asked == [f"{API}/api/v1/namespaces/default"]


async def test_the_kubeconfigs_proxy_url_wins_over_the_environment(
    forward_proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, asked = forward_proxy
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens: would fail
    await get_through(Access(API, token="t", proxy=proxy))
    assert asked == [f"{API}/api/v1/namespaces/default"]
