"""The operator's Prometheus adapter reads the twin HAMi's allocations through a real Prometheus.

What this proves: a real Prometheus scraping ``start_hami_exporter`` holds series the
operator's ``PrometheusSource`` (the query builders of ``autoscaler.signals``) turns into
exactly the simulated HAMi's per-GPU allocation table, and follows it when a pod ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.signals.hami_metrics import MetricFamily, MetricsReading
from autoscaler.signals.prometheus import PrometheusSource, WallClock
from provisioner.kube import KINDS, KubeApi
from simulations.twin import start_hami_exporter
from tests.integration import prometheus_support, twin_support
from tests.integration.prometheus_support import poll
from tests.integration.twin_support import GIB, hami_pod, new_hami, register_node

api = twin_support.api  # the fixture: a workload client; deletes the test's Nodes afterwards
DEADLINE_S = 60.0


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Prometheus scraping the file-configured targets every 0.5 s; (url, targets file)."""
    with prometheus_support.file_sd_prometheus(tmp_path) as (url, targets, _):
        yield url, targets


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
        await prometheus_support.ready(url, DEADLINE_S)
        async with PrometheusSource(url, stale_after_seconds=5.0, clock=WallClock()) as source:

            async def probe() -> MetricsReading:
                return await source.node_gpu_usage([node])

            reading = await poll("a fresh reading", probe, lambda r: r.health.fresh, DEADLINE_S)
            assert source.family is MetricFamily.CURRENT
            assert reading.usage_by_node() == {node: expected}
            assert node in reading.reporting_nodes
            await api.delete(KINDS["Pod"], namespace, "b", 0)
            await hami.step()  # HAMi frees b's two devices
            freed = hami.allocations()[node].usage()
            assert sum(g.slots for g in freed) == 1
            reading = await poll(
                "b's devices freed",
                probe,
                lambda r: r.usage_by_node().get(node) == freed,
                DEADLINE_S,
            )
            assert reading.health.fresh
    finally:
        await runner.cleanup()
