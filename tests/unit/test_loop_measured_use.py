"""The loop publishes measured use: MetricsAvailable, status.utilization, gauges, Usage mode.

What these prove: with Prometheus configured the loop reads HAMi's monitor through the
``ActivitySource`` port; a fresh reading gives ``MetricsAvailable=True`` and a
``status.utilization`` block and gauges; a stale, unparseable or failed one gives
``MetricsAvailable=False`` with that reason and freezes usage-driven scale-down; without
Prometheus the condition says NotConfigured. A fully allocated cell whose pod is idle is
drained in Usage mode and kept in Allocation mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.loop import Autoscaler
from autoscaler.policy.decision import Reason
from autoscaler.policy.types import GPUUsage, MetricsHealth
from autoscaler.signals.hami_activity import ActivityReading, PodActivity, Verdict, failed
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
from tests.unit.test_loop_signals import PROM, SETTINGS

JSON = dict[str, Any]


class FullUsage:
    """Allocation: every node's one GPU fully allocated, fresh."""

    async def usage(
        self, pool: GPUCellPool, nodes: Sequence[str]
    ) -> tuple[Mapping[str, tuple[GPUUsage, ...]] | None, MetricsHealth]:
        return {n: (GPUUsage(24576, 100, 1),) for n in nodes}, MetricsHealth(True, 1.0, "ok")


class Activity:
    def __init__(self, idle_seconds: float, verdict: Verdict = Verdict.FRESH) -> None:
        self.idle_seconds, self.verdict = idle_seconds, verdict
        self.asked: list[tuple[list[str], list[str]]] = []

    async def activity(
        self, pool: GPUCellPool, nodes: Sequence[str], pods: Sequence[str]
    ) -> ActivityReading:
        self.asked.append((list(nodes), list(pods)))
        if self.verdict is not Verdict.FRESH:
            return failed(self.verdict, f"test says {self.verdict.value}")
        use = {k: PodActivity(k, 0.0, self.idle_seconds) for k in pods}
        return ActivityReading(Verdict.FRESH, "fresh", 1.0, {n: (12.0,) for n in nodes}, use)


def busy_pod(node: str) -> JSON:
    pod = pending_pod(f"on-{node}", mem_mib=24576)
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    pod["metadata"]["annotations"] = {
        "hami.io/vgpu-devices-allocated": f"GPU-{node},NVIDIA,24576,100:;"
    }
    return pod


def pool(**auto: Any) -> JSON:
    rows = [{"name": "a-0", "index": 0, "phase": "Ready", "nodeName": "a-0"}]
    rules = {"scaleDown": {"stabilizationWindowSeconds": 0}}
    manifest = pool_manifest("a", behavior=rules, scaleDownDelayAfterScaleUp="0s", **auto)
    raw = with_cells(manifest, rows)
    raw["status"]["desiredReplicas"] = 1
    return raw


async def run(raw: JSON, activity: Activity | None, registry: CollectorRegistry | None = None):  # type: ignore[no-untyped-def]
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    workload.nodes = [{"metadata": {"name": "a-0"}}]
    workload.pods = {"busy": busy_pod("a-0")}
    metrics = OperatorMetrics(registry) if registry is not None else None
    scaler = Autoscaler(workload, writer, clock, metrics, FullUsage(), SETTINGS, activity=activity)
    try:
        scaler.pool_event("ADDED", raw)
        await clock.advance(0.2)
        decision = scaler.pools[("ns", "a")].last_decision
        assert decision is not None
        return decision, writer.for_pool("a")[-1]["status"]
    finally:
        await scaler.close()


def metrics_available(status: JSON) -> JSON:
    return next(c for c in status["conditions"] if c["type"] == "MetricsAvailable")


async def test_usage_mode_drains_the_idle_full_cell_and_publishes_utilisation() -> None:
    activity = Activity(idle_seconds=4000)
    registry = CollectorRegistry()
    decision, status = await run(
        pool(scaleDownOn="Usage", usageIdleWindow="1h", **PROM), activity, registry
    )
    assert activity.asked == [(["a-0"], ["default/on-a-0"])]
    assert (decision.reason, decision.victims) == (Reason.SCALED_DOWN, ("a-0",))
    cond = metrics_available(status)
    assert (cond["status"], cond["reason"]) == ("True", "Fresh")
    util = status["utilization"]
    assert (util["gpuUtilizationPercent"], util["gpus"], util["pods"], util["idlePods"]) == (
        12,
        1,
        1,
        1,
    )
    assert util["idleCells"] == ["a-0"] and util["lastObserved"]
    labels = {"namespace": "ns", "pool": "a"}
    assert registry.get_sample_value("gpucellpool_metrics_available", labels) == 1
    assert registry.get_sample_value("gpucellpool_measured_utilization_ratio", labels) == 0.12
    assert registry.get_sample_value("gpucellpool_idle_pods", labels) == 1
    assert registry.get_sample_value("gpucellpool_idle_cells", labels) == 1


async def test_allocation_mode_keeps_the_idle_full_cell() -> None:
    decision, status = await run(pool(usageIdleWindow="1h", **PROM), Activity(idle_seconds=4000))
    assert decision.reason is Reason.NO_IDLE_CELL and decision.desired_replicas == 1
    assert status["utilization"]["idleCells"] == ["a-0"]  # reported, not acted on


async def test_a_pod_busy_within_the_window_keeps_the_cell() -> None:
    decision, status = await run(
        pool(scaleDownOn="Usage", usageIdleWindow="1h", **PROM), Activity(100)
    )
    assert decision.reason is Reason.NO_IDLE_CELL
    assert status["utilization"]["idlePods"] == 0 and "idleCells" not in status["utilization"]


@pytest.mark.parametrize("verdict", [Verdict.STALE, Verdict.UNPARSEABLE, Verdict.UNREACHABLE])
async def test_unfresh_monitor_is_metrics_unavailable_and_freezes_usage_scale_down(
    verdict: Verdict,
) -> None:
    registry = CollectorRegistry()
    raw = pool(scaleDownOn="Usage", usageIdleWindow="1h", **PROM)
    decision, status = await run(raw, Activity(4000, verdict), registry)
    assert decision.reason is Reason.NO_IDLE_CELL and decision.victims == ()
    cond = metrics_available(status)
    assert (cond["status"], cond["reason"]) == ("False", verdict.value)
    assert "usage-driven scale-down frozen" in cond["message"]
    assert "utilization" not in status  # never written from an unfresh reading
    labels = {"namespace": "ns", "pool": "a"}
    assert registry.get_sample_value("gpucellpool_metrics_available", labels) == 0
    assert registry.get_sample_value("gpucellpool_idle_pods", labels) is None  # not 0


async def test_without_prometheus_the_condition_says_not_configured() -> None:
    activity = Activity(4000)
    _, status = await run(pool(), activity)
    cond = metrics_available(status)
    assert (cond["status"], cond["reason"]) == ("False", "NotConfigured")
    assert activity.asked == [] and "utilization" not in status
