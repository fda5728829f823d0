"""The Prometheus adapter: HAMi allocation readings over the HTTP API, behind ``MetricsSource``.

Why this module exists: it is the only place that talks HTTP to Prometheus. It sends every
request through one function with a hard deadline and maps each transport or protocol fault
to :class:`PrometheusUnavailable` with a precise, secret-free detail; the per-node reading
and its freshness verdict come from the pure ``hami_usage`` interpreter. It also detects, and
remembers, whether the server holds current ``hami_*`` or legacy (HAMi <= 2.8) names.

The bearer token never appears in a repr, a log line or an exception message: it lives only
in the client's default headers, and every detail text is scrubbed of it before use. Nothing
the server sends back is quoted in a detail for a non-2xx answer (the URL may be a pool
author's, and the detail reaches the pool's status): only the status code and its phrase.

Given ``allowed_hosts`` (the operator always gives it for a pool's URL), every request goes
through ``guarded_transport.GuardedTransport``: the host is resolved and every address judged
by ``gpucellpool.api.url_policy`` before anything is sent.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from types import TracebackType
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx

from autoscaler.policy.types import MetricsHealth
from autoscaler.signals.guarded_transport import GuardedTransport, Resolver, UrlRefused
from autoscaler.signals.hami_activity import (
    ACTIVITY_SCHEMAS,
    ActivityReading,
    Verdict,
    container_query,
    failed,
    host_query,
    interpret_activity,
)
from autoscaler.signals.hami_metrics import (
    SCHEMAS,
    MetricFamily,
    MetricsReading,
    Schema,
    unavailable,
    usage_query,
)
from autoscaler.signals.hami_usage import interpret_usage
from autoscaler.signals.ports import MetricsSource, PrometheusUnavailable
from autoscaler.signals.promql import QueryResult, ResponseError, duration, parse_response
from gpucellpool.api.clock import Clock
from gpucellpool.runtime.clock import SystemClock

__all__ = [
    "Clock",
    "MetricsSource",
    "PrometheusSource",
    "PrometheusUnavailable",
    "WallClock",
    "split_userinfo",
    "tls_context",
]

log = logging.getLogger(__name__)
_LOG_EVERY_SECONDS = 60.0


WallClock = SystemClock
"""The production clock (Unix time, the scale of Prometheus sample timestamps): the one
``SystemClock``, under the name this module has always exported."""


def tls_context(
    verify: bool | str = True,
    *,
    ca_file: str | None = None,
    ca_pem: str | None = None,
    client_cert: tuple[str, str] | None = None,
) -> ssl.SSLContext:
    """The TLS context: a CA (file or PEM) to trust, optional skip-verify, optional client cert.

    ``verify`` may be a CA file path (the httpx/requests convention).
    """
    if isinstance(verify, str):
        ca_file, verify = ca_file or verify, True
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_pem)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if client_cert:
        context.load_cert_chain(*client_cert)
    return context


class PrometheusSource:
    """``MetricsSource`` over the Prometheus HTTP API (``POST /api/v1/query``)."""

    def __init__(
        self,
        base_url: str,
        *,
        bearer_token: str | None = None,
        verify: bool | str = True,
        ca_file: str | None = None,
        ca_pem: str | None = None,
        client_cert: tuple[str, str] | None = None,
        timeout_seconds: float = 5.0,
        stale_after_seconds: float = 60.0,
        lookback_seconds: float | None = None,
        max_body_bytes: int = 64 * 1024 * 1024,
        clock: Clock,
        transport: httpx.AsyncBaseTransport | None = None,
        allowed_hosts: Iterable[str] | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        if timeout_seconds <= 0 or stale_after_seconds <= 0:
            raise ValueError("timeout_seconds and stale_after_seconds must be positive")
        self._url, basic = split_userinfo(base_url.rstrip("/"))
        self._shown_url = self._url
        self._token = bearer_token or ""
        password = basic[1] if basic else ""
        self._secrets = [s for s in {self._token, password, quote(password, safe="")} if s]
        self._timeout = timeout_seconds
        self.stale_after_seconds = stale_after_seconds
        self.lookback_seconds = lookback_seconds or max(3 * stale_after_seconds, 60.0)
        self.max_body_bytes = max_body_bytes
        self._clock = clock
        self._created_at = clock.now()
        self._last_fresh_at: float | None = None
        self._family: MetricFamily | None = None
        self._logged_at: float | None = None  # when "not fresh" was last logged
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        tls = tls_context(verify, ca_file=ca_file, ca_pem=ca_pem, client_cert=client_cert)
        if allowed_hosts is not None:  # a pool author's URL: check every address first
            inner = transport or httpx.AsyncHTTPTransport(verify=tls)
            transport = GuardedTransport(inner, allowed_hosts, resolver)
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_seconds),
            verify=tls,
            transport=transport,
            follow_redirects=False,
            auth=httpx.BasicAuth(*basic) if basic and not self._token else None,
        )

    def __repr__(self) -> str:
        auth = "bearer ***" if self._token else "none"
        return f"PrometheusSource(url={self._shown_url!r}, auth={auth!r}, family={self._family})"

    @property
    def family(self) -> MetricFamily | None:
        """The metric family found on the server, once detected."""
        return self._family

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> PrometheusSource:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def query(self, promql: str, *, at: float | None = None) -> QueryResult:
        """Run an instant query (evaluated at ``at``, default now on the server)."""
        form = {"query": promql, "timeout": duration(self._timeout)}  # "2.5s" is rejected
        if at is not None:
            form["time"] = f"{at:.3f}"
        body, status = await self._post("/api/v1/query", form)
        if status >= 300:
            raise self._http_error(status, body)
        try:
            return parse_response(body)
        except ResponseError as exc:
            raise PrometheusUnavailable(exc.kind, _fixed_detail(exc)) from None

    async def node_gpu_usage(
        self, node_names: Sequence[str], *, dra: bool = False
    ) -> MetricsReading:
        """HAMi allocations of ``node_names`` with a freshness verdict; faults read unfresh.

        ``dra``: the pool's HAMi runs in DRA mode, whose allocations only HAMi-DRA's monitor
        exports (``hami_dra_*``, hami-facts §5); the device-plugin names are not tried then.
        """
        wanted = sorted(set(node_names))
        now = self._clock.now()
        if not wanted:
            health = MetricsHealth(fresh=True, age_seconds=0.0, detail="no nodes to read")
            return MetricsReading(health=health, nodes={}, family=self._family)
        try:
            reading = await self._read(wanted, now, dra)
        except PrometheusUnavailable as exc:
            since = self._last_fresh_at if self._last_fresh_at is not None else self._created_at
            detail = f"prometheus {exc.kind}: {exc.detail}"
            reading = unavailable(detail, now - since, self._family, read_failed=True)
        if reading.health.fresh:
            self._last_fresh_at = now
        self._log(reading, now)
        return reading

    async def _read(self, wanted: list[str], now: float, dra: bool = False) -> MetricsReading:
        for schema in [SCHEMAS[MetricFamily.DRA]] if dra else self._schemas_to_try():
            query = usage_query(schema, wanted, self.lookback_seconds)
            result = await self.query(query, at=now)
            if result.result_type == "matrix" and not result.series:
                continue
            if result.result_type == "matrix" and not dra:
                self._family = schema.family
            return interpret_usage(
                result,
                schema,
                wanted,
                now=now,
                stale_after_seconds=self.stale_after_seconds,
                lookback_seconds=self.lookback_seconds,
            )
        looked = "HAMi-DRA's hami_dra_*" if dra else "hami_* and legacy HAMi <= 2.8"
        detail = (
            f"no HAMi allocation series for node(s) {', '.join(wanted)} in the last "
            f"{self.lookback_seconds:g}s (looked for {looked} names)"
        )
        since = self._last_fresh_at if self._last_fresh_at is not None else self._created_at
        return unavailable(detail, now - since, self._family)

    async def node_activity(
        self, node_names: Sequence[str], pod_keys: Sequence[str]
    ) -> ActivityReading:
        """Measured use (per-GPU utilisation of ``node_names``, activity of the pods
        ``namespace/name``) from HAMi's monitor, with a verdict; never raises."""
        wanted, now = sorted(set(node_names)), self._clock.now()
        if not wanted:
            return ActivityReading(Verdict.FRESH, "no nodes to read")
        try:
            for schema in self._schemas_to_try():
                monitor = ACTIVITY_SCHEMAS[schema.family]
                host = await self.query(host_query(monitor, wanted, self.lookback_seconds), at=now)
                if host.result_type == "matrix" and not host.series:
                    continue
                pods = sorted({key.partition("/")[2] for key in pod_keys})
                containers = None
                if pods:
                    text = container_query(monitor, pods, self.lookback_seconds)
                    containers = await self.query(text, at=now)
                return interpret_activity(
                    host,
                    containers,
                    monitor,
                    wanted,
                    pod_keys,
                    now=now,
                    stale_after_seconds=self.stale_after_seconds,
                )
        except PrometheusUnavailable as exc:
            verdict = Verdict.UNPARSEABLE if exc.kind == "malformed" else Verdict.UNREACHABLE
            return failed(verdict, f"prometheus {exc.kind}: {exc.detail}")
        detail = (
            f"no HAMi monitor utilisation series for node(s) {', '.join(wanted)} in the last "
            f"{self.lookback_seconds:g}s (looked for hami_* and legacy names)"
        )
        return failed(Verdict.STALE, detail)

    def _schemas_to_try(self) -> list[Schema]:
        order = [MetricFamily.CURRENT, MetricFamily.LEGACY]
        if self._family is not None:
            order.remove(self._family)
            order.insert(0, self._family)
        return [SCHEMAS[family] for family in order]

    async def _post(self, path: str, form: dict[str, str]) -> tuple[bytes, int]:
        """The one request function: hard deadline, transport faults mapped to our errors."""
        url = self._url + path
        try:
            async with asyncio.timeout(self._timeout):
                async with self._client.stream("POST", url, data=form) as response:
                    return await _read_capped(response, self.max_body_bytes), response.status_code
        except (TimeoutError, httpx.TimeoutException):
            detail = f"no answer from {self._shown_url} within {self._timeout:g}s"
            raise PrometheusUnavailable("timeout", detail) from None
        except UrlRefused as exc:
            raise PrometheusUnavailable("refused", self._scrub(str(exc))) from None
        except httpx.ConnectError as exc:
            detail = f"cannot connect to {self._shown_url}: {self._scrub(str(exc)) or 'refused'}"
            raise PrometheusUnavailable("connect", detail) from None
        except httpx.HTTPError as exc:
            detail = f"{type(exc).__name__} talking to {self._shown_url}: {self._scrub(str(exc))}"
            raise PrometheusUnavailable("transport", detail) from None

    def _http_error(self, status: int, _body: bytes) -> PrometheusUnavailable:
        """The status code and its standard phrase only: the body is the server's to choose."""
        kind = "http_5xx" if status >= 500 else "http_4xx" if status >= 400 else "redirect"
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "non-standard status"
        return PrometheusUnavailable(kind, f"HTTP {status}: {phrase}")

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _log(self, reading: MetricsReading, now: float) -> None:
        """Log transitions, and an unfresh state again at most once a minute."""
        detail = reading.health.detail
        if reading.health.fresh:
            if self._logged_at is not None:
                log.info("prometheus metrics fresh again: %s", detail)
            self._logged_at = None
        elif self._logged_at is None or now - self._logged_at >= _LOG_EVERY_SECONDS:
            log.warning("prometheus metrics not fresh: %s", detail)
            self._logged_at = now


ERROR_TYPES = frozenset(
    {"timeout", "canceled", "execution", "bad_data", "internal", "unavailable", "not_found"}
)
"""Prometheus's own ``errorType`` values: fixed words, safe to repeat (its ``error`` is not)."""


def _fixed_detail(exc: ResponseError) -> str:
    """A detail for an unusable 2xx answer that quotes nothing the server sent."""
    if exc.kind == "status_error":
        kind = exc.detail.split(":", 1)[0]
        named = f" of type {kind}" if kind in ERROR_TYPES else ""
        return f"Prometheus answered with an error{named}"
    return "the answer is not a Prometheus query result"


async def _read_capped(response: httpx.Response, limit: int) -> bytes:
    """The body, refusing to buffer more than ``limit`` bytes from a misbehaving server."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            detail = f"response body exceeds {limit} bytes (HTTP {response.status_code})"
            raise PrometheusUnavailable("too_large", detail)
        chunks.append(chunk)
    return b"".join(chunks)


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@`` part, and that part as basic-auth credentials.

    The credentials must not stay in the URL: httpx logs request URLs at INFO level.
    """
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    bare = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return bare, (unquote(user), unquote(password))
