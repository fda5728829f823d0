"""Recorder → exposition → real Prometheus scrape → the chart's rules → firing alerts.

Why: the promtool cases prove each rule against hand-written series; this proves the rules
against what ``gpucellpool.operator.metrics`` really exposes (names, label sets, honour of the
pool's ``namespace`` label over the target's) as scraped by a real Prometheus. The rules file is
loaded with every ``for`` set to 0 so the test waits for scrapes, not for minutes. One pool is
driven into every bad state, a second pool is healthy: every alert must fire for the first
(or cluster-wide), none for the second.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server

from gpucellpool.api.status import CellPhase
from gpucellpool.operator.metrics import OperatorMetrics, PoolMetrics
from simulations.harness.procs import ManagedProcess, free_port
from tests.integration.binary_support import required_binary
from tests.integration.test_alerts import RULES

DEADLINE = 60.0
T = TypeVar("T")


def _decide(pool: PoolMetrics, reason: str, desired: int, at: float, pending_age: float) -> None:
    pool.record_decision(
        reason=reason, desired=desired, demand_cells=desired, allocated_cells=1.0,
        pending_asks=1 if pending_age else 0, unschedulable=0,
        oldest_pending_age_seconds=pending_age, now=at,
    )  # fmt: skip


def bad_pool(pool: PoolMetrics, now: float) -> None:
    """Every alertable condition at once."""
    pool.record_limits(min_cells=0, max_cells=4, boot_seconds=300, stabilization_seconds=600)
    for reason, desired, ago in (("Idle", 1, 400), ("ScaledUp", 3, 300),
                                 ("ScaledDown", 2, 100), ("ScaledUp", 3, 50)):  # fmt: skip
        _decide(pool, reason, desired, now - ago, pending_age=900)
    pool.record_cells({CellPhase.READY: 1, CellPhase.FAILED: 1})
    pool.record_reachable(False)
    pool.record_physical(held=2, free=0)
    pool.record_capacity(devices=1, memory_bytes={"total": 8e9, "allocated": 8e9, "available": 0},
                         compute_percent=None)  # fmt: skip
    pool.record_utilization(None, fresh=False, age_seconds=900)


def good_pool(pool: PoolMetrics, now: float) -> None:
    pool.record_limits(min_cells=0, max_cells=4, boot_seconds=300, stabilization_seconds=600)
    for reason, desired, ago in (("Idle", 2, 5000), ("ScaledUp", 3, 4000), ("ScaledDown", 2, 100)):
        _decide(pool, reason, desired, now - ago, pending_age=0)
    pool.record_cells({CellPhase.READY: 2})
    pool.record_reachable(True)
    pool.record_physical(held=2, free=3)
    pool.record_capacity(devices=2, memory_bytes={"total": 8e9, "allocated": 1e9, "available": 7e9},
                         compute_percent=None)  # fmt: skip
    pool.record_utilization(0.3, fresh=True, age_seconds=2)


def bump(pool: PoolMetrics) -> None:
    """Counter increases between scrapes, for the rate() alerts.

    rate() divides by the whole range: flapping (> 0.01/s over 30 m) needs > 18 changes.
    """
    for _ in range(12):
        pool.cell_transition("Joining", "Ready")
        pool.cell_transition("Ready", "Joining")
    pool.scrape_error("capacity")
    pool.reconcile_error()


def _get(url: str, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}{path}{query}", timeout=5) as resp:
        return json.loads(resp.read())["data"]


def _until(what: str, probe: Callable[[], T | None]) -> T:
    """Probe until it returns something, with a deadline (pause = polling back-off only)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            if (got := probe()) is not None:
                return got
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out after {DEADLINE:g}s waiting for {what}")


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, OperatorMetrics]]:
    binary = required_binary("prometheus")
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    dead = free_port()  # nothing listens: up == 0 for this instance
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                   "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [{"job_name": "gpucellpool-operator", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{port}",
                                                            f"127.0.0.1:{dead}"]}]}],
    }  # fmt: skip
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom_port = free_port()
    process = ManagedProcess(
        "prometheus",
        [str(binary), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        tmp_path / "prometheus.log",
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{prom_port}", metrics
    finally:
        process.stop()
        server.shutdown()
        thread.join(timeout=5)


def test_every_alert_fires_on_the_real_exposition(live: tuple[str, OperatorMetrics]) -> None:
    url, metrics = live
    now = time.time()
    bad, good = metrics.pool("ns", "bad"), metrics.pool("ns", "good")
    bad_pool(bad, now)
    good_pool(good, now)
    metrics.record_crd_drift({"FieldMissing": 2})

    def scraped(query: str) -> Callable[[], bool | None]:
        return lambda: True if _get(url, "/api/v1/query", query=query)["result"] else None

    _until("the first scrape", scraped('gpucell_reconcile_errors_total{pool="bad"}'))
    bump(bad)  # counters rise after their first sample, so rate() > 0
    # transitions have no zero series (from/to are open-ended): scrape them, then bump again
    _until("the transitions", scraped('gpucell_cell_transitions_total{pool="bad"}'))
    bump(bad)
    expected = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}

    def firing() -> list[dict[str, Any]] | None:
        alerts = [a for a in _get(url, "/api/v1/alerts")["alerts"] if a["state"] == "firing"]
        return alerts if {a["labels"]["alertname"] for a in alerts} >= expected else None

    try:
        alerts = _until("every alert to fire", firing)
    except AssertionError:
        got = {a["labels"]["alertname"] for a in _get(url, "/api/v1/alerts")["alerts"]}
        raise AssertionError(f"never fired: {sorted(expected - got)}") from None
    for alert in alerts:
        labels = alert["labels"]
        assert labels.get("pool") in (None, "bad"), f"{labels['alertname']} fired for {labels}"
        if "pool" in labels:
            assert labels["namespace"] == "ns"  # the pool's namespace, honoured over the target's
