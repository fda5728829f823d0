"""A real Prometheus for the twin: scrapes the simulated HAMi exporter and the operator.

Why this module exists: the operator reads utilisation from Prometheus and freezes scale-down
when it cannot, and the Grafana dashboards only mean something against series a real
Prometheus scraped. So the demo runs the pinned binary (``simulations.harness.binaries``) with a
1 s scrape interval and a throwaway data directory, waits for ``/-/ready``, and stops the whole
process group at the end (``ManagedProcess``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from simulations.harness.binaries import ensure
from simulations.harness.procs import ManagedProcess, free_port

SCRAPE_S = 1.0
READY_DEADLINE_S = 60.0


def scrape_config(targets: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """One job per name, 1 s interval; the operator's own ``namespace``/``pool`` labels win."""
    return {
        "global": {"scrape_interval": f"{SCRAPE_S:g}s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": True,
                "static_configs": [{"targets": list(hosts)}],
            }
            for job, hosts in targets.items()
        ],
    }


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@dataclass
class Prometheus:
    """A running Prometheus (``url``); ``stop()`` ends it and waits for the exit."""

    process: ManagedProcess
    url: str

    @classmethod
    async def start(cls, workdir: Path, targets: Mapping[str, Sequence[str]]) -> Prometheus:
        binary = (await asyncio.to_thread(ensure, ["prometheus"]))["prometheus"]
        config = workdir / "prometheus.yml"
        await asyncio.to_thread(_write, config, yaml.safe_dump(scrape_config(targets)))
        port = free_port()
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        process = ManagedProcess("prometheus", argv, workdir / "prometheus.log")
        running = cls(process, f"http://127.0.0.1:{port}")
        try:
            await running.wait_ready()
        except BaseException:
            running.stop()
            raise
        return running

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_DEADLINE_S
        async with httpx.AsyncClient(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if not self.process.running():
                    raise RuntimeError(f"prometheus exited:\n{self.process.log_tail()}")
                try:
                    if (await http.get(f"{self.url}/-/ready")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)  # polling a readiness probe, with a deadline
        raise TimeoutError(
            f"prometheus not ready in {READY_DEADLINE_S:g}s:\n{self.process.log_tail()}"
        )

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result list (raises on an API error)."""
        async with httpx.AsyncClient(timeout=10.0) as http:
            resp = await http.get(f"{self.url}/api/v1/query", params={"query": expr})
        body = resp.json()
        if body.get("status") != "success":
            raise RuntimeError(f"{expr}: {body.get('error')}")
        return list(body["data"]["result"])

    async def query_range(
        self, expr: str, start: float, end: float, step: float = 2.0
    ) -> list[dict[str, Any]]:
        """A range query's series (what a dashboard panel draws over [start, end])."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        async with httpx.AsyncClient(timeout=30.0) as http:
            resp = await http.get(f"{self.url}/api/v1/query_range", params=params)
        body = resp.json()
        if body.get("status") != "success":
            raise RuntimeError(f"{expr}: {body.get('error')}")
        return list(body["data"]["result"])

    async def targets_up(self) -> dict[str, bool]:
        """scrape URL -> last scrape healthy."""
        async with httpx.AsyncClient(timeout=10.0) as http:
            body = (await http.get(f"{self.url}/api/v1/targets")).json()
        return {t["scrapeUrl"]: t["health"] == "up" for t in body["data"]["activeTargets"]}

    def stop(self) -> None:
        self.process.stop()

    async def restart(self) -> None:
        """Start the stopped server again: same flags, port (URL) and data directory, as a
        Prometheus back from an outage."""
        if self.process.running():
            raise RuntimeError("prometheus is still running; stop() it first")
        log = self.process.log_path.with_suffix(".restarted.log")
        self.process = ManagedProcess("prometheus", self.process.argv, log)
        await self.wait_ready()
