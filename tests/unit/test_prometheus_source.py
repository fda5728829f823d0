"""respx tests: the Prometheus adapter under HTTP faults a real server cannot easily produce.

Each fault (timeout, refused connection, 4xx, 5xx, malformed or error bodies, NaN, +Inf,
wrong result types, empty or partial data) must give an unfresh reading whose detail says
which, and the bearer token must never leak into a repr, a log line or an exception.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from urllib.parse import parse_qs

import httpx
import pytest
import respx

from autoscaler.policy.types import GPUUsage
from autoscaler.signals.hami_metrics import CURRENT, LEGACY, MIB, MetricFamily, Schema
from autoscaler.signals.ports import MetricsSource, PrometheusUnavailable
from autoscaler.signals.prometheus import PrometheusSource, tls_context
from autoscaler.signals.prometheus_config import PrometheusSettings, source_from_settings
from simulations.simulator.engine.clock import VirtualClock

URL = "http://prom.test:9090"
QUERY_URL = f"{URL}/api/v1/query"
TOKEN = "s3cr3t-T0KEN-value-9f8e7d"
NOW = 1_800_000_000.0


def gpu(
    node: str,
    uuid: str,
    *,
    schema: Schema = CURRENT,
    age: float = 5.0,
    mem_mib: int = 2048,
    cores: str = "25",
    slots: str = "1",
) -> list[dict[str, object]]:
    values = {
        "memory_allocated": str(mem_mib * MIB),
        "memory_limit": str(24576 * MIB),
        "cores_allocated": cores,
        "cores_limit": "100",
        "slots_used": slots,
    }
    return [
        {
            "metric": {
                "__name__": schema.names[q],
                schema.node_label: node,
                schema.uuid_label: uuid,
                schema.index_label: "0",
            },
            "values": [[NOW - age, values[q.value]]],
        }
        for q in schema.names
    ]


def body(result_type: str, result: object) -> dict[str, object]:
    return {"status": "success", "data": {"resultType": result_type, "result": result}}


def matrix(*series: list[dict[str, object]]) -> dict[str, object]:
    return body("matrix", [s for group in series for s in group])


def form_query(request: httpx.Request) -> str:
    return parse_qs(request.content.decode())["query"][0]


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as mock:
        yield mock


@pytest.fixture
async def source() -> AsyncIterator[PrometheusSource]:
    async with PrometheusSource(
        URL, bearer_token=TOKEN, timeout_seconds=2, clock=VirtualClock(NOW)
    ) as src:
        yield src


def respond(router: respx.MockRouter, handler: Callable[[httpx.Request], httpx.Response]) -> None:
    router.post(QUERY_URL).mock(side_effect=handler)


async def test_healthy_reading_sends_token_time_and_timeout(
    router: respx.MockRouter, source: PrometheusSource
) -> None:
    route = router.post(QUERY_URL).mock(
        return_value=httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a")))
    )
    reading = await source.node_gpu_usage(["cell-0"])
    assert reading.health.fresh, reading.problems
    assert reading.usage_by_node() == {"cell-0": (GPUUsage(2048, 25, 1),)}
    assert source.family is MetricFamily.CURRENT
    request = route.calls.last.request
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    form = parse_qs(request.content.decode())
    assert form["time"] == [f"{NOW:.3f}"]
    assert form["timeout"] == ["2000ms"]  # Prometheus rejects fractional "2.5s"
    assert form["query"][0].startswith('{__name__=~"hami_gpu_core_allocated_ratio|')
    assert 'node=~"cell-0"}[180000ms]' in form["query"][0]


async def test_no_token_no_authorization_header(router: respx.MockRouter) -> None:
    route = router.post(QUERY_URL).mock(return_value=httpx.Response(200, json=matrix()))
    async with PrometheusSource(URL, bearer_token=None, clock=VirtualClock(NOW)) as src:
        await src.query("up")
    assert "Authorization" not in route.calls.last.request.headers


async def test_no_nodes_means_no_request(
    router: respx.MockRouter, source: PrometheusSource
) -> None:
    route = router.post(QUERY_URL)
    reading = await source.node_gpu_usage([])
    assert reading.health.fresh
    assert not route.called


async def test_legacy_detected_after_current_is_empty_then_remembered(
    router: respx.MockRouter, source: PrometheusSource
) -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        query = form_query(request)
        asked.append("legacy" if "GPUDeviceSharedNum" in query else "current")
        if "GPUDeviceSharedNum" in query:
            return httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a", schema=LEGACY)))
        return httpx.Response(200, json=matrix())

    respond(router, handler)
    reading = await source.node_gpu_usage(["cell-0"])
    assert reading.health.fresh, reading.problems
    assert reading.family is MetricFamily.LEGACY
    assert source.family is MetricFamily.LEGACY
    assert asked == ["current", "legacy"]
    await source.node_gpu_usage(["cell-0"])
    assert asked == ["current", "legacy", "legacy"]  # remembered: one query per reading


async def test_upgrade_from_legacy_to_current_switches_family(
    router: respx.MockRouter, source: PrometheusSource
) -> None:
    upgraded = False

    def handler(request: httpx.Request) -> httpx.Response:
        legacy = "GPUDeviceSharedNum" in form_query(request)
        if legacy != upgraded:
            schema = LEGACY if legacy else CURRENT
            return httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a", schema=schema)))
        return httpx.Response(200, json=matrix())

    respond(router, handler)
    assert (await source.node_gpu_usage(["cell-0"])).family is MetricFamily.LEGACY
    upgraded = True
    reading = await source.node_gpu_usage(["cell-0"])
    assert reading.health.fresh
    assert reading.family is MetricFamily.CURRENT


async def test_no_series_in_either_family(router: respx.MockRouter) -> None:
    router.post(QUERY_URL).mock(return_value=httpx.Response(200, json=matrix()))
    clock = VirtualClock(NOW - 42)
    async with PrometheusSource(URL, clock=clock) as src:
        clock.t = NOW
        reading = await src.node_gpu_usage(["cell-1", "cell-0"])
    assert not reading.health.fresh
    assert reading.health.detail == (
        "no HAMi allocation series for node(s) cell-0, cell-1 in the last 180s "
        "(looked for hami_* and legacy HAMi <= 2.8 names)"
    )
    assert reading.health.age_seconds == pytest.approx(42)  # no fresh reading since creation
    assert reading.family is None
    assert not reading.health.read_failed  # Prometheus answered: staleness, not a failed read


async def test_partial_data_names_missing_nodes(
    router: respx.MockRouter, source: PrometheusSource
) -> None:
    router.post(QUERY_URL).mock(
        return_value=httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a")))
    )
    reading = await source.node_gpu_usage(["cell-0", "cell-1"])
    assert not reading.health.fresh
    assert reading.health.detail == "no samples for node(s) cell-1 in the last 180s"
    assert set(reading.usage_by_node()) == {"cell-0"}


@pytest.mark.parametrize(
    ("field", "raw"), [("cores", "NaN"), ("slots", "+Inf"), ("cores", "-Inf"), ("slots", "-2")]
)
async def test_bad_sample_values(
    router: respx.MockRouter, source: PrometheusSource, field: str, raw: str
) -> None:
    series = gpu("cell-0", "GPU-a", **{field: raw})  # type: ignore[arg-type]
    router.post(QUERY_URL).mock(return_value=httpx.Response(200, json=matrix(series)))
    reading = await source.node_gpu_usage(["cell-0"])
    assert not reading.health.fresh
    assert "node cell-0 GPU GPU-a: " in reading.health.detail
    assert repr(raw) in reading.health.detail
    assert reading.usage_by_node() == {}


async def test_stale_series(router: respx.MockRouter, source: PrometheusSource) -> None:
    router.post(QUERY_URL).mock(
        return_value=httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a", age=75)))
    )
    reading = await source.node_gpu_usage(["cell-0"])
    assert not reading.health.fresh
    assert reading.health.age_seconds == pytest.approx(75)
    assert reading.health.detail == "node cell-0: newest sample is 75.0s old (stale after 60s)"
    assert not reading.health.read_failed


FAULTS: list[tuple[str, Callable[[httpx.Request], httpx.Response], str]] = [
    (
        "read timeout",
        lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("timed out", request=r)),
        f"prometheus timeout: no answer from {URL} within 2s",
    ),
    (
        "connect timeout",
        lambda r: (_ for _ in ()).throw(httpx.ConnectTimeout("timed out", request=r)),
        f"prometheus timeout: no answer from {URL} within 2s",
    ),
    (
        "refused",
        lambda r: (_ for _ in ()).throw(httpx.ConnectError("[Errno 111] refused", request=r)),
        f"prometheus connect: cannot connect to {URL}: [Errno 111] refused",
    ),
    (
        "protocol",
        lambda r: (_ for _ in ()).throw(httpx.RemoteProtocolError("peer closed", request=r)),
        f"prometheus transport: RemoteProtocolError talking to {URL}: peer closed",
    ),
    (
        "503 text",
        lambda r: httpx.Response(503, text="Service Unavailable"),
        "prometheus http_5xx: HTTP 503: Service Unavailable",
    ),
    (
        "502 html",
        lambda r: httpx.Response(502, text="<html>bad gateway</html>"),
        "prometheus http_5xx: HTTP 502: Bad Gateway",  # the body is never quoted,
    ),
    (
        "503 prometheus timeout",
        lambda r: httpx.Response(
            503, json={"status": "error", "errorType": "timeout", "error": "query timed out"}
        ),
        "prometheus http_5xx: HTTP 503: Service Unavailable",
    ),
    (
        "400 bad data",
        lambda r: httpx.Response(
            400, json={"status": "error", "errorType": "bad_data", "error": "parse error"}
        ),
        "prometheus http_4xx: HTTP 400: Bad Request",
    ),
    (
        "403",
        lambda r: httpx.Response(403, text="Forbidden"),
        "prometheus http_4xx: HTTP 403: Forbidden",
    ),
    (
        "302",
        lambda r: httpx.Response(302, headers={"Location": "https://elsewhere/"}, text="moved"),
        "prometheus redirect: HTTP 302: Found",
    ),
    (
        "malformed json",
        lambda r: httpx.Response(200, text='{"status": "success", "da'),
        "prometheus malformed: the answer is not a Prometheus query result",
    ),
    (
        "status error with 200",
        lambda r: httpx.Response(
            200, json={"status": "error", "errorType": "execution", "error": "boom"}
        ),
        "prometheus status_error: Prometheus answered with an error of type execution",
    ),
    (
        "no data",
        lambda r: httpx.Response(200, json={"status": "success"}),
        "prometheus malformed: the answer is not a Prometheus query result",
    ),
]


@pytest.mark.parametrize(("handler", "detail"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
async def test_faults_read_unfresh_with_detail(
    router: respx.MockRouter,
    source: PrometheusSource,
    handler: Callable[[httpx.Request], httpx.Response],
    detail: str,
) -> None:
    respond(router, handler)
    reading = await source.node_gpu_usage(["cell-0"])
    assert not reading.health.fresh
    assert reading.health.detail.startswith(detail), reading.health.detail
    assert reading.health.read_failed  # counted as a scrape error by the loop
    assert reading.nodes == {}
    with pytest.raises(PrometheusUnavailable) as info:
        await source.query("up")
    assert f"prometheus {info.value.kind}: {info.value.detail}".startswith(detail)


@pytest.mark.parametrize(
    ("result_type", "result"), [("vector", []), ("scalar", [NOW, "1"]), ("string", [NOW, "x"])]
)
async def test_wrong_result_type(
    router: respx.MockRouter, source: PrometheusSource, result_type: str, result: object
) -> None:
    router.post(QUERY_URL).mock(return_value=httpx.Response(200, json=body(result_type, result)))
    reading = await source.node_gpu_usage(["cell-0"])
    assert not reading.health.fresh
    assert reading.health.detail == (
        f"expected a matrix result from a range selector, got {result_type}"
    )
    assert source.family is None  # a wrong answer teaches nothing about the family


async def test_hard_deadline_even_if_the_transport_never_answers(router: respx.MockRouter) -> None:
    never = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        await never.wait()
        raise AssertionError("unreachable")

    router.post(QUERY_URL).mock(side_effect=hang)
    async with PrometheusSource(URL, timeout_seconds=0.05, clock=VirtualClock(NOW)) as src:
        reading = await src.node_gpu_usage(["cell-0"])
    assert not reading.health.fresh
    assert reading.health.detail == f"prometheus timeout: no answer from {URL} within 0.05s"


async def test_age_on_failure_counts_from_the_last_fresh_reading(router: respx.MockRouter) -> None:
    clock = VirtualClock(NOW)
    healthy = True

    def handler(request: httpx.Request) -> httpx.Response:
        if healthy:
            return httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a", age=0)))
        return httpx.Response(500, text="oops")

    respond(router, handler)
    async with PrometheusSource(URL, clock=clock) as src:
        assert (await src.node_gpu_usage(["cell-0"])).health.fresh
        healthy = False
        clock.t += 30
        reading = await src.node_gpu_usage(["cell-0"])
    assert not reading.health.fresh
    assert reading.health.age_seconds == pytest.approx(30)


async def test_token_never_leaks(
    router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    echoes = [
        httpx.Response(401, text=f"bad token: Bearer {TOKEN}"),
        httpx.Response(500, text=f"internal error handling Authorization: Bearer {TOKEN}"),
        httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": TOKEN}),
        httpx.Response(200, text=f"not json {TOKEN}"),
        httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a", cores="NaN"))),
    ]
    texts: list[str] = []
    userinfo_url = f"https://user:{TOKEN}@prom.test:9090"
    for url in (URL, userinfo_url):
        router.post(f"{url}/api/v1/query").mock(side_effect=echoes + echoes)
        async with PrometheusSource(
            url, bearer_token=TOKEN, clock=VirtualClock(NOW), verify=False
        ) as src:
            texts += [repr(src), str(src)]
            for _ in echoes:
                reading = await src.node_gpu_usage(["cell-0"])
                texts += [repr(reading), reading.health.detail]
            for _ in echoes[:4]:
                with pytest.raises(PrometheusUnavailable) as info:
                    await src.query("up")
                texts += [str(info.value), repr(info.value), info.value.detail]
                assert info.value.__cause__ is None  # no httpx request/response chained in
    texts += [record.getMessage() for record in caplog.records]
    assert caplog.records, "expected the adapter to log the unfresh readings"
    assert "***" in "".join(texts)
    leaks = [text for text in texts if TOKEN in text]
    assert leaks == []


def test_repr_hides_userinfo_and_token() -> None:
    src = PrometheusSource(
        "https://admin:hunter2@prom.test", bearer_token=TOKEN, clock=VirtualClock(NOW)
    )
    assert repr(src) == "PrometheusSource(url='https://prom.test', auth='bearer ***', family=None)"


async def test_userinfo_becomes_basic_auth_not_part_of_the_url(router: respx.MockRouter) -> None:
    route = router.post("https://prom.test/api/v1/query").mock(
        return_value=httpx.Response(200, json=matrix())
    )
    async with PrometheusSource("https://admin:p%40ss@prom.test", clock=VirtualClock(NOW)) as src:
        await src.query("up")
    request = route.calls.last.request
    assert request.url == "https://prom.test/api/v1/query"
    assert request.headers["Authorization"] == "Basic " + base64.b64encode(b"admin:p@ss").decode()


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        PrometheusSource(URL, timeout_seconds=0, clock=VirtualClock(NOW))
    with pytest.raises(ValueError, match="positive"):
        PrometheusSource(URL, stale_after_seconds=-1, clock=VirtualClock(NOW))


async def test_factory_from_pool_settings(router: respx.MockRouter) -> None:
    route = router.post("https://prom.test/api/v1/query").mock(
        return_value=httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a", age=20)))
    )
    settings = PrometheusSettings(
        url="https://prom.test/", stale_after_seconds=15, insecure_skip_verify=True
    )
    src = source_from_settings(settings, bearer_token=TOKEN, clock=VirtualClock(NOW))
    async with src:
        reading = await src.node_gpu_usage(["cell-0"])
    assert src.stale_after_seconds == 15
    assert src.lookback_seconds == 60  # at least a minute of history to tell stale from absent
    assert not reading.health.fresh  # 20 s old > 15 s
    assert "stale after 15s" in reading.health.detail
    assert route.calls.last.request.headers["Authorization"] == f"Bearer {TOKEN}"


def test_tls_context_modes() -> None:
    strict = tls_context()
    assert strict.verify_mode is ssl.CERT_REQUIRED and strict.check_hostname
    insecure = tls_context(False)
    assert insecure.verify_mode is ssl.CERT_NONE and not insecure.check_hostname
    bundle = ssl.get_default_verify_paths().cafile
    if bundle:
        with open(bundle) as handle:
            pem = handle.read()
        assert tls_context(ca_pem=pem).get_ca_certs()
        assert tls_context(bundle).verify_mode is ssl.CERT_REQUIRED
    with pytest.raises(ssl.SSLError):
        tls_context(ca_pem="-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")


async def test_logging_is_transitions_plus_once_a_minute(
    router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="autoscaler.signals.prometheus")
    clock = VirtualClock(NOW)
    healthy = False

    def handler(request: httpx.Request) -> httpx.Response:
        if healthy:
            # sampled at the fake "now" (NOW + 61 s)
            return httpx.Response(200, json=matrix(gpu("cell-0", "GPU-a", age=-61)))
        return httpx.Response(503, text="down")

    respond(router, handler)
    async with PrometheusSource(URL, clock=clock) as src:
        for step in range(7):  # 0 s .. 60 s in 10 s steps
            clock.t = NOW + 10 * step
            await src.node_gpu_usage(["cell-0"])
        healthy = True
        clock.t += 1
        await src.node_gpu_usage(["cell-0"])
        await src.node_gpu_usage(["cell-0"])
    messages = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("auto")]
    assert [level for level, _ in messages] == ["WARNING", "WARNING", "INFO"]
    assert (
        messages[0][1]
        == "prometheus metrics not fresh: prometheus http_5xx: HTTP 503: Service Unavailable"
    )
    assert messages[2][1].startswith("prometheus metrics fresh again: hami metrics: 1 node(s)")


async def test_oversized_bodies_are_refused(router: respx.MockRouter) -> None:
    huge = matrix(*(gpu(f"cell-{i}", "GPU-a") for i in range(50)))
    router.post(QUERY_URL).mock(return_value=httpx.Response(200, json=huge))
    async with PrometheusSource(URL, max_body_bytes=1000, clock=VirtualClock(NOW)) as src:
        reading = await src.node_gpu_usage(["cell-0"])
    assert not reading.health.fresh
    assert reading.health.detail == (
        "prometheus too_large: response body exceeds 1000 bytes (HTTP 200)"
    )


async def test_satisfies_the_metrics_source_port() -> None:
    # mypy checks the assignment; at runtime the port's methods must exist and be async.
    src: MetricsSource = PrometheusSource(URL, clock=VirtualClock(NOW))
    assert inspect.iscoroutinefunction(src.node_gpu_usage)
    assert inspect.iscoroutinefunction(src.query)
    await src.aclose()  # type: ignore[attr-defined]
