"""The validating webhook's HTTPS server (aiohttp): AdmissionReview v1 in, verdict out.

Why this module exists: it is the thin shell around the pure rules. It terminates TLS with the
hot-reloadable context from ``webhook.tls``, reads the body with a size cap, lets
``webhook.review`` parse and route it, fetches the stored pool for scale requests through the
``PoolReader`` port (the AdmissionReview of a subresource carries only Scale objects), and
answers every input with a well-formed response: a 400 with a message for a body that is not
an AdmissionReview, a denial with ``InternalError`` if judging fails, never a traceback.

Paths: ``/validate-cells-kubeswift-io-v1alpha1-gpucellpool`` (POST), ``/healthz`` (liveness:
the loop answers) and ``/readyz`` (a certificate is loaded).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from webhook.review import (
    BadReview,
    ReviewRequest,
    decide,
    internal_error,
    needs_stored_pool,
    parse_review,
    response,
)
from webhook.rules import DEFAULT_SETTINGS, RuleSettings, Verdict
from webhook.tls import ServingTLS

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate-cells-kubeswift-io-v1alpha1-gpucellpool"
HEALTH_PATH, READY_PATH = "/healthz", "/readyz"
MAX_BODY = 3 * 1024 * 1024
"""The apiserver caps objects near 1.5 MiB; an AdmissionReview carries two of them."""
POOL_READ_TIMEOUT = 5.0


class PoolReader(Protocol):
    """Reads the stored GPUCellPool (raw dict) for a scale request; None when it is absent."""

    async def get_pool(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The pool as the apiserver stores it."""
        ...


@dataclass
class Stats:
    """Counters for tests and metrics: requests seen, denied, bad bodies, internal errors."""

    requests: int = 0
    denied: int = 0
    bad_requests: int = 0
    errors: int = 0


class WebhookServer:
    """Serves admission reviews over TLS on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        tls: ServingTLS,
        pools: PoolReader,
        settings: RuleSettings = DEFAULT_SETTINGS,
        host: str = "0.0.0.0",
        port: int = 9443,
    ) -> None:
        self.tls, self.pools, self.settings = tls, pools, settings
        self.host, self.port = host, port
        self.stats = Stats()
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        """The aiohttp application (also usable with aiohttp's test client, without TLS)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(VALIDATE_PATH, self.handle_review)
        app.router.add_get(HEALTH_PATH, self.handle_health)
        app.router.add_get(READY_PATH, self.handle_ready)
        return app

    async def start(self) -> int:
        """Listen with TLS; returns the bound port."""
        if not self.tls.ready:
            raise RuntimeError("load a serving certificate before starting the webhook server")
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls.context)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        log.info("webhook server listening on %s:%d", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        """Stop listening and finish in-flight requests."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def handle_health(self, _request: web.Request) -> web.Response:
        """Liveness: the event loop answers."""
        return web.Response(text="ok")

    async def handle_ready(self, _request: web.Request) -> web.Response:
        """Readiness: a certificate is being served."""
        ok = self.tls.ready
        return web.Response(text="ok" if ok else "no certificate", status=200 if ok else 503)

    async def handle_review(self, request: web.Request) -> web.Response:
        """One AdmissionReview; always a JSON answer."""
        self.stats.requests += 1
        try:
            body = await request.read()
            req = parse_review(body)
        except BadReview as exc:
            self.stats.bad_requests += 1
            return _error(400, str(exc))
        except web.HTTPRequestEntityTooLarge:
            self.stats.bad_requests += 1
            return _error(413, f"body larger than {MAX_BODY} bytes")
        started = time.monotonic()
        try:
            verdict = await self._judge(req)
            answer = response(req, verdict)
        except Exception:  # a rule bug must not become a 500 traceback for the apiserver
            self.stats.errors += 1
            log.exception(
                "webhook failed to judge %s %s/%s", req.operation, req.namespace, req.name
            )
            answer = internal_error(req, "the webhook failed to judge this request; see its log")
        else:
            self.stats.denied += 0 if verdict.allowed else 1
            _log_verdict(req, verdict, time.monotonic() - started)
        return web.json_response(answer)

    async def _judge(self, req: ReviewRequest) -> Verdict:
        stored = None
        if needs_stored_pool(req):
            try:
                stored = await asyncio.wait_for(
                    self.pools.get_pool(req.namespace, req.name), POOL_READ_TIMEOUT
                )
            except Exception as exc:  # judged as "could not read": a denial with a retry hint
                log.warning("cannot read pool %s/%s for a scale check: %s", req.namespace,
                            req.name, exc)  # fmt: skip
        return decide(req, self.settings, stored)


def _error(status: int, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _log_verdict(req: ReviewRequest, verdict: Verdict, seconds: float) -> None:
    if verdict.allowed:
        log.debug("admitted %s %s/%s in %.3fs", req.operation, req.namespace, req.name, seconds)
    else:
        log.info(
            "denied %s %s/%s%s: %s",
            req.operation,
            req.namespace,
            req.name,
            " (scale)" if req.is_scale else "",
            verdict.message(),
        )
