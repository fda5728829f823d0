"""The loop's signals: Prometheus usage (fresh, stale, hanging) and the metrics it records.

What these prove: with ``spec.autoscaling.prometheus`` set the loop reads usage through the
``UsageSource`` port; a stale or hanging source (bounded by a timeout) makes the observation
unfresh, which freezes scale-down instead of reading as idle; decisions land in the real
``OperatorMetrics`` registry (desired cells, reachability, freshness, decision latency counted
once per pod).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from autoscaler.loop import Autoscaler, LoopSettings
from autoscaler.policy.decision import Reason
from autoscaler.policy.types import GPUUsage, MetricsHealth
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.operator.metrics import OperatorMetrics
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import (
    FakeWorkload,
    FakeWriter,
    pending_pod,
    pool_manifest,
    with_cells,
)

SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0, usage_timeout_s=0.05)
PROM: dict[str, Any] = {"prometheus": {"url": "http://prometheus:9090"}}


class Usage:
    def __init__(self, fresh: bool = True, hang: bool = False, failed: bool = False) -> None:
        self.fresh, self.hang, self.failed, self.calls = fresh, hang, failed, 0

    async def usage(
        self, pool: GPUCellPool, nodes: Sequence[str]
    ) -> tuple[Mapping[str, tuple[GPUUsage, ...]] | None, MetricsHealth]:
        self.calls += 1
        if self.hang:
            await asyncio.Event().wait()
        health = MetricsHealth(self.fresh and not self.failed, 0.0, "test", self.failed)
        return {} if self.failed else {n: (GPUUsage(),) for n in nodes}, health


def idle_ready_pool() -> dict[str, object]:
    rows = [{"name": "a-0", "index": 0, "phase": "Ready", "nodeName": "a-0"}]
    raw = with_cells(pool_manifest("a", behavior={"scaleDown": {"stabilizationWindowSeconds": 0}},
                                   scaleDownDelayAfterScaleUp="0s", **PROM), rows)  # fmt: skip
    raw["status"]["desiredReplicas"] = 1
    return raw


async def decide_with(usage: Usage, registry: CollectorRegistry | None = None) -> Reason:
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    workload.nodes = [{"metadata": {"name": "a-0"}}]
    metrics = OperatorMetrics(registry) if registry is not None else None
    scaler = Autoscaler(workload, writer, clock, metrics, usage=usage, settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", idle_ready_pool())
        await clock.advance(0.2)
        if usage.hang:  # the timeout is on the event loop's clock: wait for it, bounded
            for _ in range(200):
                if scaler.pools[("ns", "a")].last_decision is not None:
                    break
                await asyncio.sleep(0.005)
        decision = scaler.pools[("ns", "a")].last_decision
        assert decision is not None and usage.calls == 1
        return decision.reason
    finally:
        await scaler.close()


async def test_fresh_idle_usage_scales_down_stale_or_hanging_freezes() -> None:
    assert await decide_with(Usage(fresh=True)) == Reason.SCALED_DOWN
    assert await decide_with(Usage(fresh=False)) == Reason.METRICS_STALE
    assert await decide_with(Usage(hang=True)) == Reason.METRICS_STALE


async def test_only_a_failed_prometheus_read_counts_as_a_scrape_error() -> None:
    """No answer, an HTTP error or a bad body is a failed read (reason "demand"); Prometheus
    answering with stale or missing series is staleness, which the freshness gauge shows."""
    labels = {"namespace": "ns", "pool": "a", "reason": "demand"}
    counted = {}
    for name, usage in {
        "fresh": Usage(fresh=True),
        "stale": Usage(fresh=False),
        "failed": Usage(failed=True),
        "hanging": Usage(hang=True),
    }.items():
        registry = CollectorRegistry()
        reason = await decide_with(usage, registry)
        assert reason == (Reason.SCALED_DOWN if name == "fresh" else Reason.METRICS_STALE)
        counted[name] = registry.get_sample_value("gpucell_capacity_scrape_errors_total", labels)
    assert counted == {"fresh": 0, "stale": 0, "failed": 1, "hanging": 1}


async def test_decisions_land_in_the_metrics_registry() -> None:
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    registry = CollectorRegistry()
    scaler = Autoscaler(workload, writer, clock, OperatorMetrics(registry), settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", pool_manifest("a"))
        await clock.advance(0.2)
        workload.pods["p"] = pending_pod("p")
        scaler.cluster_event("wl")
        await clock.advance(0.3)
        labels = {"namespace": "ns", "pool": "a"}
        value = registry.get_sample_value
        assert value("gpucellpool_desired_cells", labels) == 1
        assert value("gpucellpool_metrics_fresh", labels) == 1
        assert value("gpucellpool_decision_latency_seconds_count", labels) == 1
        workload.pods["q"] = pending_pod("q", mem_mib=24576)
        scaler.cluster_event("wl")
        await clock.advance(0.3)
        assert value("gpucellpool_desired_cells", labels) == 2
        assert value("gpucellpool_decision_latency_seconds_count", labels) == 2  # q only
    finally:
        await scaler.close()


class Missing(Usage):
    """Prometheus answers, but has no series for ``absent`` Nodes (and says it is stale then)."""

    def __init__(self, absent: set[str]) -> None:
        super().__init__()
        self.absent = absent

    async def usage(
        self, pool: GPUCellPool, nodes: Sequence[str]
    ) -> tuple[Mapping[str, tuple[GPUUsage, ...]] | None, MetricsHealth]:
        self.calls += 1
        found = {n: (GPUUsage(),) for n in nodes if n not in self.absent}
        return found, MetricsHealth(not (self.absent & set(nodes)), 0.0, "test")


def full_cell_pod(node: str) -> dict[str, object]:
    pod = pending_pod(f"on-{node}", mem_mib=24576)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    pod["metadata"]["annotations"] = {
        "hami.io/vgpu-devices-allocated": f"GPU-{node},NVIDIA,24576,100:;"
    }
    return pod


async def test_with_prometheus_down_a_full_cell_is_full_and_pending_pods_scale_up() -> None:
    """Stale metrics freeze scale-down only: the pods' annotations still fill the cell."""
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    workload.nodes = [{"metadata": {"name": "a-0"}}]
    workload.pods = {"busy": full_cell_pod("a-0"), "p": pending_pod("p", mem_mib=24576)}
    scaler = Autoscaler(workload, writer, clock, usage=Missing({"a-0"}), settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", idle_ready_pool())
        await clock.advance(0.2)
        decision = scaler.pools[("ns", "a")].last_decision
        assert decision is not None
        assert decision.reason == Reason.SCALED_UP and decision.desired_replicas == 2
    finally:
        await scaler.close()


async def test_a_victims_metrics_blinking_out_does_not_undo_the_scale_down() -> None:
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    rows = [{"name": f"a-{i}", "index": i, "phase": "Ready", "nodeName": f"a-{i}"} for i in (0, 1)]
    raw = with_cells(pool_manifest("a", behavior={"scaleDown": {"stabilizationWindowSeconds": 0}},
                                   scaleDownDelayAfterScaleUp="0s", **PROM), rows)  # fmt: skip
    raw["status"]["desiredReplicas"] = 2
    workload.nodes = [{"metadata": {"name": "a-0"}}, {"metadata": {"name": "a-1"}}]
    workload.pods = {"busy": full_cell_pod("a-0")}
    usage = Missing(set())
    scaler = Autoscaler(workload, writer, clock, usage=usage, settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", raw)
        await clock.advance(0.2)
        down = writer.for_pool("a")[-1]["status"]
        assert down["desiredReplicas"] == 1 and down["lastDecision"]["victims"] == ["a-1"]
        usage.absent = {"a-1"}  # the victim is cordoned; its series go before its status row
        await clock.advance(SETTINGS.tick_s + 0.1)
        after = writer.for_pool("a")[-1]["status"]
        assert after["desiredReplicas"] == 1, after["lastDecision"]
        assert after["lastDecision"].get("victims", ["a-1"]) == ["a-1"]
    finally:
        await scaler.close()
