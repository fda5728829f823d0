"""The validating webhook's HTTPS server (aiohttp): AdmissionReview v1 in, verdict out.

Why this module exists: it is the thin shell around the pure rules. It terminates TLS with the
hot-reloadable context from ``webhook.tls``, reads the body with a size cap and a nesting cap
(``webhook.body_depth``, checked on the bytes before decoding), lets ``webhook.review`` parse
and route it, fetches the stored pool for scale requests through the
``PoolReader`` port (the AdmissionReview of a subresource carries only Scale objects), and
answers every input with a well-formed response: a 400 with a message for a body that is not
an AdmissionReview or cannot be read, a denial with ``InternalError`` if judging fails, never a
traceback. Decoding and the rules run on a small thread pool, never on the event loop (a large
pool takes a second of CPU to judge; health checks and other reviews must not wait), and each
review has a time budget: past it, the request is denied with a message saying so.
When the rules admit a pool, every Secret it newly references is checked through the
``SecretAccess`` port (a SubjectAccessReview for the requesting user); a refusal, or a review
that fails or times out, denies the request (fail closed).

Paths: ``/validate-cells-kubeswift-io-v1alpha1-gpucellpool`` (POST), ``/healthz`` (liveness:
the loop answers) and ``/readyz`` (a certificate is loaded).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from webhook.body_depth import depth_problem
from webhook.review import (
    BadReview,
    ReviewRequest,
    UserInfo,
    decide,
    internal_error,
    needs_stored_pool,
    parse_review,
    response,
    secret_checks,
    with_secret_access,
)
from webhook.rules import DEFAULT_SETTINGS, RuleSettings, Verdict
from webhook.tls import ServingTLS

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate-cells-kubeswift-io-v1alpha1-gpucellpool"
HEALTH_PATH, READY_PATH = "/healthz", "/readyz"
MAX_BODY = 3 * 1024 * 1024
"""The apiserver caps objects near 1.5 MiB; an AdmissionReview carries two of them."""
POOL_READ_TIMEOUT = 5.0
REVIEW_BUDGET_SECONDS = 3.0
"""Wall time the rules may take for one review (queueing included); the chart gives the
apiserver's call 10 s (``webhook.timeoutSeconds``), so a denial saying why arrives first."""
JUDGE_THREADS = 2
"""Reviews judged at once; more wait their turn (inside their budget)."""
ACCESS_REVIEW_TIMEOUT = 5.0


class PoolReader(Protocol):
    """Reads the stored GPUCellPool (raw dict) for a scale request; None when it is absent."""

    async def get_pool(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The pool as the apiserver stores it."""
        ...


class SecretAccess(Protocol):
    """Asks the apiserver whether a user may ``get`` one Secret (a SubjectAccessReview)."""

    async def may_get_secret(self, user: UserInfo, namespace: str, name: str) -> bool:
        """True when allowed; raises when the review could not be made or answered."""
        ...


class NoSecretAccess:
    """The fail-closed default: no reviewer configured, so no reference can be confirmed."""

    async def may_get_secret(self, user: UserInfo, namespace: str, name: str) -> bool:
        raise RuntimeError("no SubjectAccessReview client configured")


@dataclass
class Stats:
    """Counters for tests and metrics: requests seen, denied, bad bodies, internal errors,
    reviews denied because the rules ran past their budget."""

    requests: int = 0
    denied: int = 0
    bad_requests: int = 0
    errors: int = 0
    over_budget: int = 0


class OverBudget(Exception):
    """The rules did not finish within the review's time budget."""


class WebhookServer:
    """Serves admission reviews over TLS on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        tls: ServingTLS,
        pools: PoolReader,
        settings: RuleSettings = DEFAULT_SETTINGS,
        host: str = "0.0.0.0",
        port: int = 9443,
        budget_seconds: float = REVIEW_BUDGET_SECONDS,
        secret_access: SecretAccess | None = None,
    ) -> None:
        self.tls, self.pools, self.settings = tls, pools, settings
        self.secret_access: SecretAccess = secret_access or NoSecretAccess()
        self.host, self.port = host, port
        self.stats = Stats()
        self._runner: web.AppRunner | None = None
        self.budget_seconds = budget_seconds
        self._judges: ThreadPoolExecutor | None = None

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
        if self._judges is not None:
            self._judges.shutdown(wait=False, cancel_futures=True)
            self._judges = None

    async def _off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the judging threads (never on the event loop)."""
        if self._judges is None:
            self._judges = ThreadPoolExecutor(JUDGE_THREADS, thread_name_prefix="webhook-rules")
        return await asyncio.get_running_loop().run_in_executor(self._judges, fn, *args)

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
        except web.HTTPRequestEntityTooLarge:
            self.stats.bad_requests += 1
            return _error(413, f"body larger than {MAX_BODY} bytes")
        except Exception as exc:  # a broken upload (bad encoding, cut short): the client's fault
            self.stats.bad_requests += 1
            detail = " ".join(str(exc).split())[:120] or type(exc).__name__
            return _error(400, f"cannot read the request body: {detail}")
        try:
            req = await self._off_loop(decode_review, body)
        except BadReview as exc:
            self.stats.bad_requests += 1
            return _error(400, str(exc))
        started = time.monotonic()
        try:
            verdict = await self._judge(req)
            answer = response(req, verdict)
        except OverBudget:
            self.stats.over_budget += 1
            log.warning("judging %s %s/%s ran past its %gs budget; denied", req.operation,
                        req.namespace, req.name, self.budget_seconds)  # fmt: skip
            answer = over_budget(req, self.budget_seconds)
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
        verdict = await self._decide(req, stored)
        checks = secret_checks(req) if verdict.allowed else ()
        if not checks:
            return verdict
        answers = await asyncio.gather(
            *(self._may_get(req, name) for _, name in checks), return_exceptions=True
        )
        refused = [ref for ref, ok in zip(checks, answers, strict=True) if ok is False]
        unchecked = [
            ref for ref, ok in zip(checks, answers, strict=True) if ok not in (True, False)
        ]
        return with_secret_access(verdict, refused, unchecked)

    async def _may_get(self, req: ReviewRequest, secret: str) -> bool:
        try:
            return await asyncio.wait_for(
                self.secret_access.may_get_secret(req.user, req.namespace, secret),
                ACCESS_REVIEW_TIMEOUT,
            )
        except Exception as exc:
            log.warning("secret access review failed for %s/%s: %s", req.namespace, secret,
                        type(exc).__name__)  # fmt: skip
            raise

    async def _decide(self, req: ReviewRequest, stored: Any) -> Verdict:
        """The rules on the judging threads, within the review's budget."""
        try:
            verdict: Verdict = await asyncio.wait_for(
                self._off_loop(decide, req, self.settings, stored), self.budget_seconds
            )
        except TimeoutError:
            raise OverBudget from None
        return verdict


def decode_review(body: bytes) -> ReviewRequest:
    """The body as a ``ReviewRequest``; ``BadReview`` (a 400) for anything it will not decode.

    The nesting depth is checked on the bytes first: the JSON decoder recurses per level.
    """
    problem = depth_problem(body)
    if problem is not None:
        raise BadReview(problem)
    try:
        return parse_review(body)
    except RecursionError:  # belt and braces: the depth check should have caught it
        raise BadReview("body nests too deeply to decode") from None


def over_budget(req: ReviewRequest, budget_seconds: float) -> dict[str, Any]:
    """A denial for a review whose rules ran past the budget (the spec is huge, or we are busy)."""
    message = (
        f"the webhook could not judge this request within its {budget_seconds:g}s budget "
        "(the spec is unusually large, or the webhook is busy); shrink the spec or retry"
    )
    body = {
        "uid": req.uid,
        "allowed": False,
        "status": {"code": 504, "reason": "Timeout", "message": message},
    }
    return {"apiVersion": req.api_version, "kind": "AdmissionReview", "response": body}


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
