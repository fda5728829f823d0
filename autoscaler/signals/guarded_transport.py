"""An httpx transport that resolves the host itself and connects only to a checked address.

Why this module exists: a Prometheus URL is chosen by the pool author. Admission judges the
host as written, but DNS decides where a request goes: a harmless name can resolve to
169.254.169.254 or 127.0.0.1, today or after the pool was admitted. So before EVERY request this
transport resolves the host through a ``Resolver`` port, judges every answer with the same pure
policy the webhook uses (``gpucellpool.api.url_policy.judge_peer``), and sends the request to
the checked address, never letting the client resolve the name again. The ``Host`` header and
the TLS server name (SNI, and so certificate verification) stay the original host name.

A refusal is an ``httpx.ConnectError`` whose message names the policy's reason and the host, not
the resolved address list or anything the server said.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable, Sequence
from typing import Protocol

import httpx

from gpucellpool.api.url_policy import HostError, judge_peer, literal_address, normalise_host


class Resolver(Protocol):
    """Looks a host name up; returns IP address strings (any order, possibly repeated)."""

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        """Every address ``host`` resolves to for a TCP connection on ``port``."""
        ...


class SystemResolver:
    """The production resolver: the event loop's ``getaddrinfo`` (the same the client uses)."""

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [str(info[4][0]) for info in infos]


class UrlRefused(httpx.ConnectError):
    """The policy refused the host or one of its addresses; nothing was sent."""


class GuardedTransport(httpx.AsyncBaseTransport):
    """Wraps a transport: resolve, judge every address, send to a checked one."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        allowed_hosts: Iterable[str] = (),
        resolver: Resolver | None = None,
    ) -> None:
        self.inner = inner
        self.allowed_hosts = frozenset(allowed_hosts)
        self.resolver: Resolver = resolver or SystemResolver()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.raw_host.decode("ascii")
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        try:
            name = normalise_host(host)
        except HostError as exc:
            raise UrlRefused(f"refused to connect to {host}: {exc}", request=request) from None
        if literal_address(name) is not None:
            addresses: Sequence[str] = [name]
        else:
            try:
                addresses = await self.resolver.resolve(name, port)
            except OSError as exc:
                raise httpx.ConnectError(f"cannot resolve {host}: {exc}", request=request) from None
        verdict = judge_peer(name, addresses, self.allowed_hosts)
        if not verdict.allowed:
            raise UrlRefused(f"refused to connect to {host}: {verdict.reason}", request=request)
        return await self.inner.handle_async_request(_pinned(request, addresses[0], host))

    async def aclose(self) -> None:
        await self.inner.aclose()


def _pinned(request: httpx.Request, address: str, host: str) -> httpx.Request:
    """``request`` sent to ``address``, keeping the Host header and the TLS server name."""
    if address == host:
        return request
    extensions = dict(request.extensions)
    if request.url.scheme == "https":
        extensions["sni_hostname"] = host
    return httpx.Request(
        request.method,
        request.url.copy_with(host=address.split("%", 1)[0]),
        headers=request.headers,  # already carries Host: <original host[:port]>
        stream=request.stream,
        extensions=extensions,
    )
