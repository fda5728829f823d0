"""``/healthz``, ``/readyz`` and ``/metrics``: probes on a plain port, metrics there or secured.

Why this module exists: the kubelet must be able to tell a wedged process (restart it) from
one still warming its caches (do not send it traffic, do not count it as available). Liveness
is "every background task is still running"; readiness is "the caches have synced and we know
whether we lead or stand by". Both are plain callables injected by the composition root, so
this module knows nothing about caches or leases.

``/metrics`` is served on the probe port (development, the demo) or, with ``SecureMetricsSite``,
on its own TLS port where every request must carry a bearer token the cluster authenticates
and authorises (``gpucellpool.runtime.metrics_access``); the probe port then serves probes only.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpucellpool.runtime.metrics_access import MetricsGuard

Check = Callable[[], tuple[bool, str]]


@dataclass(frozen=True)
class SecureMetricsSite:
    """``/metrics`` over TLS (``context``) on ``host:port``, for callers ``guard`` admits."""

    context: ssl.SSLContext
    guard: MetricsGuard
    host: str = "0.0.0.0"
    port: int = 8443


def _bound_port(site: web.TCPSite, fallback: int) -> int:
    sockets = getattr(site._server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else fallback


class HealthServer:
    def __init__(
        self,
        live: Check,
        ready: Check,
        registry: CollectorRegistry,
        host: str,
        port: int,
        secure: SecureMetricsSite | None = None,
    ) -> None:
        self._live, self._ready, self._registry = live, ready, registry
        self.host, self.port = host, port
        self.secure = secure
        self.metrics_port = secure.port if secure else port
        self._runners: list[web.AppRunner] = []

    def _probe(self, check: Check) -> Callable[[web.Request], object]:
        async def handler(_: web.Request) -> web.Response:
            ok, detail = check()
            return web.Response(status=200 if ok else 503, text=("ok" if ok else detail) + "\n")

        return handler

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _guarded_metrics(self, request: web.Request) -> web.Response:
        assert self.secure is not None
        answer = await self.secure.guard.check(request.headers.get("Authorization"))
        if not answer.allowed:
            headers = {"WWW-Authenticate": "Bearer"} if answer.status == 401 else None
            return web.Response(status=answer.status, text=answer.reason + "\n", headers=headers)
        return await self._metrics(request)

    async def _serve(
        self, app: web.Application, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> int:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, host, port, ssl_context=tls)
        await site.start()
        return _bound_port(site, port)

    async def start(self) -> int:
        """Serve; returns the bound probe port (useful with port 0 in tests)."""
        app = web.Application()
        app.router.add_get("/healthz", self._probe(self._live))  # type: ignore[arg-type]
        app.router.add_get("/readyz", self._probe(self._ready))  # type: ignore[arg-type]
        if self.secure is None:
            app.router.add_get("/metrics", self._metrics)
        self.port = await self._serve(app, self.host, self.port)
        if self.secure is None:
            self.metrics_port = self.port
        else:
            metrics = web.Application()
            metrics.router.add_get("/metrics", self._guarded_metrics)
            s = self.secure
            self.metrics_port = await self._serve(metrics, s.host, s.port, s.context)
        return self.port

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners = []
