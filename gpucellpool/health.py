"""``/healthz``, ``/readyz`` and ``/metrics`` on one aiohttp port.

Why this module exists: the kubelet must be able to tell a wedged process (restart it) from
one still warming its caches (do not send it traffic, do not count it as available). Liveness
is "every background task is still running"; readiness is "the caches have synced and we know
whether we lead or stand by". Both are plain callables injected by the composition root, so
this module knows nothing about caches or leases.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, str]]


class HealthServer:
    def __init__(
        self, live: Check, ready: Check, registry: CollectorRegistry, host: str, port: int
    ) -> None:
        self._live, self._ready, self._registry = live, ready, registry
        self.host, self.port = host, port
        self._runner: web.AppRunner | None = None

    def _probe(self, check: Check) -> Callable[[web.Request], object]:
        async def handler(_: web.Request) -> web.Response:
            ok, detail = check()
            return web.Response(status=200 if ok else 503, text=("ok" if ok else detail) + "\n")

        return handler

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> int:
        """Serve; returns the bound port (useful with port 0 in tests)."""
        app = web.Application()
        app.router.add_get("/healthz", self._probe(self._live))  # type: ignore[arg-type]
        app.router.add_get("/readyz", self._probe(self._ready))  # type: ignore[arg-type]
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
