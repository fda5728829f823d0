"""PrometheusSource against a real Prometheus scraping small aiohttp HAMi exporters.

Why: the unit tests prove the adapter's reactions to canned answers; this proves the canned
answers are what a real Prometheus says: sample timestamps in range selectors, ``"NaN"``
values, staleness once a scrape target disappears (an instant query goes empty while the range
selector still shows the last samples, which is how "stale for N s" is told apart from "never
reported"), regex escaping of dotted node names, legacy-name detection, and real connection
refusal and read timeouts.

The prometheus binary comes from ``simulations.harness.binaries`` (PATH, cache or the pinned
Debian package), else PATH. Missing: skip, or fail when ``CI=true``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from autoscaler.policy.types import GPUUsage
from autoscaler.signals.hami_metrics import (
    CURRENT,
    LEGACY,
    MIB,
    MetricFamily,
    MetricsReading,
    Quantity,
    Schema,
    usage_query,
)
from autoscaler.signals.prometheus import PrometheusSource, PrometheusUnavailable, WallClock
from tests.integration import prometheus_support

pytestmark = pytest.mark.integration

SCRAPE_INTERVAL = 1.0
STALE_AFTER = 4.0
DEADLINE = 45.0
TOKEN = "integration-t0ken-7c1d"
DOTTED = "cell-0.pool.test"
DECOY = "cell-0Xpool.test"  # matches an unescaped "cell-0.pool.test" regex


def prometheus_binary() -> str:
    """The prometheus binary, or skip (fail under CI=true) with a clear message."""
    path: str | None = None
    why = "not on PATH"
    try:
        from simulations.harness import binaries  # noqa: PLC0415 - optional harness

        path = str(binaries.ensure(["prometheus"])["prometheus"])
    except ImportError:
        path = shutil.which("prometheus")
    except Exception as exc:  # BinaryError or a harness change: fall back to PATH
        why = f"harness could not provide it ({exc})"
        path = shutil.which("prometheus")
    if path:
        return path
    message = f"prometheus binary unavailable: {why}; run `make bins`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


# ---------------------------------------------------------------------------------------------
# A tiny HAMi scheduler exporter
# ---------------------------------------------------------------------------------------------


@dataclass
class FakeGPU:
    node: str
    uuid: str
    index: int
    mem_mib: int
    cores: int
    slots: int
    override: dict[Quantity, str] = field(default_factory=dict)


def exposition(schema: Schema, gpus: list[FakeGPU]) -> str:
    """Prometheus text format for the five per-GPU scheduler series, HAMi-style."""
    lines: list[str] = []
    for quantity, name in schema.names.items():
        lines.append(f"# TYPE {name} gauge")
        for g in gpus:
            value = {
                Quantity.MEMORY_ALLOCATED: str(g.mem_mib * MIB),
                Quantity.MEMORY_LIMIT: str(24576 * MIB),
                Quantity.CORES_ALLOCATED: str(g.cores),
                Quantity.CORES_LIMIT: "100",
                Quantity.SLOTS_USED: str(g.slots),
            }[quantity]
            value = g.override.get(quantity, value)
            labels = (
                f'{schema.node_label}="{g.node}",{schema.uuid_label}="{g.uuid}",'
                f'{schema.index_label}="{g.index}",zone="vGPU"'
            )
            lines.append(f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


class Exporter:
    def __init__(self, schema: Schema, gpus: list[FakeGPU]) -> None:
        self.schema = schema
        self.gpus = gpus
        self.scrapes = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _metrics(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        return web.Response(text=exposition(self.schema, self.gpus), content_type="text/plain")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def exporters() -> AsyncIterator[dict[str, Exporter]]:
    current = Exporter(
        CURRENT,
        [
            FakeGPU(DOTTED, "GPU-a", 0, 4096, 30, 2),
            FakeGPU(DOTTED, "GPU-b", 1, 0, 0, 0),
            FakeGPU("cell-1", "GPU-c", 0, 12288, 50, 1),
            FakeGPU(DECOY, "GPU-z", 0, 1, 1, 1),
        ],
    )
    legacy = Exporter(LEGACY, [FakeGPU("old-0", "GPU-l", 0, 2048, 10, 1)])
    for exporter in (current, legacy):
        await exporter.start()
    yield {"current": current, "legacy": legacy}
    for exporter in (current, legacy):
        await exporter.stop()


@pytest.fixture(scope="module")
def prometheus_url(
    exporters: dict[str, Exporter], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    binary = prometheus_binary()
    work = tmp_path_factory.mktemp("prometheus")
    targets = ", ".join(f'"127.0.0.1:{e.port}"' for e in exporters.values())
    config = work / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL:g}s\n  scrape_timeout: 900ms\n"
        f"scrape_configs:\n  - job_name: hami\n    static_configs:\n"
        f"      - targets: [{targets}]\n"
    )
    url, process = prometheus_support.launch(binary, config)
    try:
        yield url
    finally:
        process.stop()
        assert not process.running()


async def poll(
    what: str, probe: Callable[[], Awaitable[MetricsReading]], ok: Callable[[MetricsReading], bool]
) -> MetricsReading:
    return await prometheus_support.poll(what, probe, ok, DEADLINE)


async def ready(url: str) -> None:
    await prometheus_support.ready(url, DEADLINE)


@pytest.fixture
async def source(prometheus_url: str) -> AsyncIterator[PrometheusSource]:
    await ready(prometheus_url)
    async with PrometheusSource(
        prometheus_url,
        bearer_token=TOKEN,
        stale_after_seconds=STALE_AFTER,
        timeout_seconds=2.5,  # a fractional server-side timeout must be accepted
        clock=WallClock(),
    ) as src:
        yield src


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


async def test_legacy_names_are_detected(prometheus_url: str) -> None:
    await ready(prometheus_url)
    async with PrometheusSource(
        prometheus_url, stale_after_seconds=STALE_AFTER, clock=WallClock()
    ) as src:
        reading = await poll(
            "legacy metrics", lambda: src.node_gpu_usage(["old-0"]), lambda r: r.health.fresh
        )
        assert src.family is MetricFamily.LEGACY
    assert reading.usage_by_node() == {"old-0": (GPUUsage(2048, 10, 1),)}


async def test_readings_nan_and_staleness_against_real_prometheus(
    source: PrometheusSource, exporters: dict[str, Exporter], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    exporter = exporters["current"]
    nodes = [DOTTED, "cell-1"]

    reading = await poll("fresh metrics", lambda: source.node_gpu_usage(nodes), _fresh)
    assert source.family is MetricFamily.CURRENT
    assert reading.usage_by_node() == {
        DOTTED: (GPUUsage(4096, 30, 2), GPUUsage(0, 0, 0)),
        "cell-1": (GPUUsage(12288, 50, 1),),
    }
    assert reading.nodes[DOTTED].gpus[0].memory_limit_mib == 24576
    assert reading.health.age_seconds < STALE_AFTER

    # The dotted name is escaped: the decoy node that an unescaped "." would match is absent.
    raw = await source.query(usage_query(CURRENT, [DOTTED], 60))
    assert {s.labels["node"] for s in raw.series} == {DOTTED}

    missing = await source.node_gpu_usage([*nodes, "cell-9"])
    assert not missing.health.fresh
    assert "no samples for node(s) cell-9 in the last 60s" in missing.problems

    exporter.gpus[2].override[Quantity.CORES_ALLOCATED] = "NaN"
    nan = await poll("NaN seen", lambda: source.node_gpu_usage(nodes), _says("'NaN'"))
    assert nan.health.detail == (
        "node cell-1 GPU GPU-c: hami_gpu_core_allocated_ratio value 'NaN' is not a finite number"
    )
    assert "cell-1" not in nan.usage_by_node()
    exporter.gpus[2].override.clear()
    await poll("recovery", lambda: source.node_gpu_usage(nodes), _fresh)

    await exporter.stop()  # the scrape target disappears
    stale = await poll("staleness", lambda: source.node_gpu_usage(nodes), _says("newest sample"))
    assert not stale.health.fresh
    assert f"(stale after {STALE_AFTER:g}s)" in stale.health.detail
    assert stale.health.age_seconds > STALE_AFTER
    # Why a range selector: once the target is down, an instant query shows nothing at all.
    instant = await source.query(f'hami_gpu_shared_count{{node="{DOTTED}"}}')
    assert instant.series == ()

    texts = [r.getMessage() for r in caplog.records] + [repr(source)]
    assert not [t for t in texts if TOKEN in t]


async def test_connection_refused_is_unfresh() -> None:
    from simulations.harness.procs import free_port  # noqa: PLC0415

    url = f"http://127.0.0.1:{free_port()}"
    async with PrometheusSource(url, bearer_token=TOKEN, clock=WallClock()) as src:
        reading = await src.node_gpu_usage(["cell-0"])
        with pytest.raises(PrometheusUnavailable) as info:
            await src.query("up")
    assert not reading.health.fresh
    assert reading.health.detail.startswith(f"prometheus connect: cannot connect to {url}")
    assert info.value.kind == "connect"
    assert TOKEN not in str(info.value)


async def test_a_server_that_never_answers_times_out() -> None:
    accepted = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()  # wait for the client to give up; never answer

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with PrometheusSource(
            f"http://127.0.0.1:{port}", timeout_seconds=0.5, clock=WallClock()
        ) as src:
            started = time.monotonic()
            reading = await src.node_gpu_usage(["cell-0"])
            elapsed = time.monotonic() - started
    finally:
        server.close()
        await server.wait_closed()
    assert accepted.is_set()
    assert not reading.health.fresh
    assert (
        reading.health.detail
        == f"prometheus timeout: no answer from http://127.0.0.1:{port} within 0.5s"
    )
    assert elapsed < 4.0  # the 0.5 s asked for, plus a loaded machine; the default is 5 s


def _fresh(reading: MetricsReading) -> bool:
    return reading.health.fresh


def _says(fragment: str) -> Callable[[MetricsReading], bool]:
    def check(reading: MetricsReading) -> bool:
        return fragment in reading.health.detail

    return check
