"""The operator's Prometheus adapter reads the twin HAMi's allocations through a real Prometheus.

What this proves: a real Prometheus scraping ``start_hami_exporter`` holds series the
operator's ``PrometheusSource`` (the query builders of ``autoscaler.signals``) turns into
exactly the simulated HAMi's per-GPU allocation table, and follows it when a pod ends.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from autoscaler.signals.hami_metrics import MetricFamily, MetricsReading
from autoscaler.signals.prometheus import PrometheusSource, WallClock
from provisioner.kube import KINDS, KubeApi
from simulations.twin import start_hami_exporter
from tests.integration import twin_support
from tests.integration.twin_support import GIB, hami_pod, new_hami, register_node

api = twin_support.api  # the fixture: a workload client; deletes the test's Nodes afterwards
DEADLINE_S = 60.0


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Prometheus scraping the file-configured targets every 0.5 s; (url, targets file)."""
    from simulations.harness.procs import ManagedProcess, free_port  # noqa: PLC0415

    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus binary not on PATH")
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
        "scrape_configs:\n  - job_name: hami-twin\n    file_sd_configs:\n"
        f"      - files: ['{targets}']\n        refresh_interval: 1s\n"
    )
    port = free_port()
    process = ManagedProcess(
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        Path(tmp_path / "prometheus.log"),
    )
    try:
        yield f"http://127.0.0.1:{port}", targets
    finally:
        process.stop()


async def ready(url: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    async with httpx.AsyncClient(timeout=1.0) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get(f"{url}/-/ready")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"prometheus at {url} not ready within {DEADLINE_S:g}s")


async def poll(
    probe: Callable[[], Awaitable[MetricsReading]], ok: Callable[[MetricsReading], bool]
) -> MetricsReading:
    deadline = time.monotonic() + DEADLINE_S
    last: MetricsReading | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if ok(last):
            return last
        await asyncio.sleep(0.2)  # polling back-off against the scrape interval
    raise AssertionError(f"no matching reading in {DEADLINE_S:g}s; last: {last}")


async def test_operator_reads_the_twin_allocations_through_real_prometheus(
    api: KubeApi, namespace: str, prometheus: tuple[str, Path]
) -> None:
    url, targets = prometheus
    node = await register_node(api, namespace, "0", gpus=2, memory_mib=16 * GIB)
    hami = new_hami(api, namespace)
    await api.create(hami_pod(namespace, "a", 6 * GIB, cores=40))
    await api.create(hami_pod(namespace, "b", 2 * GIB, cores=10, gpus=2))
    await hami.step()
    expected = hami.allocations()[node].usage()
    assert sum(g.slots for g in expected) == 3
    runner, port = await start_hami_exporter(hami)
    try:
        targets.write_text(f'[{{"targets": ["127.0.0.1:{port}"]}}]')
        await ready(url)
        async with PrometheusSource(url, stale_after_seconds=5.0, clock=WallClock()) as source:
            reading = await poll(lambda: source.node_gpu_usage([node]), lambda r: r.health.fresh)
            assert source.family is MetricFamily.CURRENT
            assert reading.usage_by_node() == {node: expected}
            assert node in reading.reporting_nodes
            await api.delete(KINDS["Pod"], namespace, "b", 0)
            await hami.step()  # HAMi frees b's two devices
            freed = hami.allocations()[node].usage()
            assert sum(g.slots for g in freed) == 1
            reading = await poll(
                lambda: source.node_gpu_usage([node]),
                lambda r: r.usage_by_node().get(node) == freed,
            )
            assert reading.health.fresh
    finally:
        await runner.cleanup()
