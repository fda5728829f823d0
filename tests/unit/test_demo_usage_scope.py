"""The loop asks Prometheus only about cells HAMi can report (found by the twin demo).

A booting cell has no Node, or a Node HAMi has not registered, so it can have no ``hami_*``
series yet; asking for it made every reading "stale" while any cell booted, which froze
scale-down for the whole of a scale-up (the twin held 12 cells for 18 s the simulator had
already released). Likewise a Draining row whose Node is already deleted (its series end, and
30 s later read as stale: the twin froze scale-down for 50 s). Then draining cells at all (their
series go with the HAMi registration) and cells Ready for less than ``staleAfter`` (not
scraped yet: a one-read gap froze scale-down and cancelled drains the simulator completed).
Ready cells with a Node, Ready for at least ``staleAfter``, are read, and their staleness
still counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from autoscaler.loop import Autoscaler
from autoscaler.policy.types import GPUUsage, MetricsHealth
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.operator.metrics import OperatorMetrics
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import FakeWorkload, FakeWriter, with_cells
from tests.unit.test_loop_signals import PROM, SETTINGS, pool_manifest


class Recording:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def usage(
        self, pool: GPUCellPool, nodes: Sequence[str]
    ) -> tuple[Mapping[str, tuple[GPUUsage, ...]] | None, MetricsHealth]:
        del pool
        self.asked.append(sorted(nodes))
        return {n: (GPUUsage(),) for n in nodes}, MetricsHealth(True, 0.0, "test")


def _at(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_only_settled_ready_cells_are_read_from_prometheus() -> None:
    clock = VirtualClock()
    long_ago, just_now = _at(clock.now() - 600), _at(clock.now() - 5)  # staleAfter: 2m
    rows = [
        {"name": "a-0", "index": 0, "phase": "Ready", "nodeName": "a-0",
         "lastTransitionTime": long_ago},
        {"name": "a-1", "index": 1, "phase": "Draining", "nodeName": "a-1",
         "lastTransitionTime": long_ago},
        {"name": "a-2", "index": 2, "phase": "Booting"},
        {"name": "a-3", "index": 3, "phase": "AwaitingGPUCapacity", "nodeName": "a-3"},
        {"name": "a-4", "index": 4, "phase": "Ready", "nodeName": "a-4",
         "lastTransitionTime": long_ago},  # Node deleted
        {"name": "a-5", "index": 5, "phase": "Ready", "nodeName": "a-5",
         "lastTransitionTime": just_now},  # Ready 5 s ago: maybe not scraped yet
    ]  # fmt: skip
    workload, writer, usage = FakeWorkload(), FakeWriter(), Recording()
    workload.nodes = [{"metadata": {"name": n}} for n in ("a-0", "a-1", "a-3", "a-5")]
    scaler = Autoscaler(workload, writer, clock, usage=usage, settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", with_cells(pool_manifest("a", **PROM), rows))
        await clock.advance(0.2)
        assert usage.asked and usage.asked[-1] == ["a-0"]
    finally:
        await scaler.close()


async def test_cells_by_phase_and_limits_are_recorded_each_decision() -> None:
    """The dashboards' "Demand vs cells" and "Cells by phase" need these (empty on the twin)."""
    rows = [
        {"name": "a-0", "index": 0, "phase": "Ready", "nodeName": "a-0"},
        {"name": "a-1", "index": 1, "phase": "Joining", "nodeName": "a-1"},
    ]
    registry = CollectorRegistry()
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    scaler = Autoscaler(workload, writer, clock, OperatorMetrics(registry), settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", with_cells(pool_manifest("a"), rows))
        await clock.advance(0.2)
        labels = {"namespace": "ns", "pool": "a"}
        value = registry.get_sample_value
        assert value("gpucellpool_cells", {**labels, "phase": "Ready"}) == 1
        assert value("gpucellpool_cells", {**labels, "phase": "Booting"}) == 1
        assert value("gpucell_cells", {**labels, "phase": "Joining"}) == 1
        assert value("gpucellpool_max_cells", labels) is not None
        assert value("gpucellpool_expected_boot_seconds", labels) == 300
    finally:
        await scaler.close()
