"""Shared helpers of the tests that run a real Prometheus (a plain module, not a test file).

Why this module exists: the adapter tests against small fake exporters
(``test_prometheus_real``) and the twin HAMi test (``test_twin_hami_prometheus``) start the same
Prometheus process, wait for it the same way and poll ``PrometheusSource`` readings until the
scrapes catch up; the twin tests (``test_twin_hami_prometheus``, ``test_usage_scale_down``) scrape
the exporters they list in a file-discovered targets file.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from autoscaler.signals.hami_metrics import MetricsReading
from tests.integration.binary_support import required_binary

if TYPE_CHECKING:
    from simulations.harness.procs import ManagedProcess


def launch(binary: str, config: Path) -> tuple[str, ManagedProcess]:
    """Start Prometheus on ``config`` (data and log next to it) on a free port; (url, process)."""
    from simulations.harness.procs import ManagedProcess, free_port  # noqa: PLC0415

    work = config.parent
    port = free_port()
    process = ManagedProcess(
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        work / "prometheus.log",
    )
    return f"http://127.0.0.1:{port}", process


@contextlib.contextmanager
def file_sd_prometheus(work: Path) -> Iterator[tuple[str, Path, ManagedProcess]]:
    """A Prometheus in ``work`` scraping, every 0.5 s (job ``hami-twin``), the targets listed in
    ``work/targets.json`` (file service discovery, re-read every second; it starts empty);
    (url, targets file, process), stopped on exit. With CI=true a missing binary fails."""
    binary = str(required_binary("prometheus"))
    targets = work / "targets.json"
    targets.write_text("[]")
    config = work / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
        "scrape_configs:\n  - job_name: hami-twin\n    file_sd_configs:\n"
        f"      - files: ['{targets}']\n        refresh_interval: 1s\n"
    )
    url, process = launch(binary, config)
    try:
        yield url, targets, process
    finally:
        process.stop()


async def ready(url: str, deadline_s: float) -> None:
    """Wait until Prometheus answers ``/-/ready``."""
    deadline = time.monotonic() + deadline_s
    async with httpx.AsyncClient(timeout=1.0) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get(f"{url}/-/ready")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"prometheus at {url} not ready within {deadline_s:g}s")


async def poll(
    what: str,
    probe: Callable[[], Awaitable[MetricsReading]],
    ok: Callable[[MetricsReading], bool],
    deadline_s: float,
) -> MetricsReading:
    """Probe until ``ok`` holds, with a deadline; the pause is polling back-off only."""
    deadline = time.monotonic() + deadline_s
    last: MetricsReading | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if ok(last):
            return last
        await asyncio.sleep(0.2)  # polling back-off against the scrape interval
    detail = last.health.detail if last else "no reading"
    raise AssertionError(f"timed out after {deadline_s:g}s waiting for {what}; last: {detail}")
