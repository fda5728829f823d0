"""The pending-pod series behind ``trace record``: one per waiting pod, exact, capped, and
written by the loop from first seen pending until the pod is bound."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.gang_pods import PLACEHOLDER_UID_PREFIX
from autoscaler.loop import Autoscaler, LoopSettings
from autoscaler.loop_state import pending_labels, pending_series
from autoscaler.policy.types import GPUAsk, PendingPod
from gpucellpool.api.metric_catalogue import PENDING_LABELS, PENDING_SERIES_CAP
from gpucellpool.operator.metrics import OperatorMetrics, label_sets
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import FakeWorkload, FakeWriter, pending_pod, pool_manifest

NAME = "gpucellpool_pending_pod_first_seen_timestamp_seconds"
SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0)


def _series(reg: CollectorRegistry) -> dict[str, float]:
    out = {}
    for family in reg.collect():
        for sample in family.samples:
            if sample.name == NAME:
                out[sample.labels["pod"]] = sample.value
    return out


def test_labels_carry_the_pod_and_its_ask() -> None:
    whole = PendingPod("ml/a", GPUAsk(gpu_count=2, cores_percent=100), 10.0)
    part = PendingPod("ml/b", GPUAsk(memory_mib=4096, cores_percent=30), 11.0)
    share = PendingPod("x/c", GPUAsk(memory_percent=50), 12.0)
    assert dict(zip(PENDING_LABELS, pending_labels(whole), strict=True)) == {
        "pod_namespace": "ml",
        "pod": "a",
        "gpus": "2",
        "memory_mib": "",
        "memory_percent": "",
        "cores_percent": "100",
    }
    assert pending_labels(part)[2:] == ("1", "4096", "", "30")
    assert pending_labels(share)[:2] == ("x", "c") and pending_labels(share)[3:5] == ("", "50")


def test_exactly_the_pending_pods_are_exported_and_removed_when_they_stop() -> None:
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("ns", "p")
    a, b = ("ml", "a", "1", "", "", "100"), ("ml", "b", "1", "2048", "", "0")
    pool.record_pending({a: 100.0, b: 105.0})
    assert _series(reg) == {"a": 100.0, "b": 105.0}
    labels = label_sets(reg, [NAME])
    assert {"namespace": "ns", "pool": "p"}.items() <= labels[0].items()
    pool.record_pending({b: 105.0})  # a was bound
    assert _series(reg) == {"b": 105.0}
    pool.record_pending({})
    assert _series(reg) == {}


def test_cardinality_is_capped_keeping_the_longest_waits() -> None:
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("ns", "p")
    many: dict[tuple[str, ...], float] = {
        ("ml", f"p{i}", "1", "", "", "0"): 1000.0 + i for i in range(PENDING_SERIES_CAP + 5)
    }
    pool.record_pending(many)
    exported = _series(reg)
    assert len(exported) == PENDING_SERIES_CAP
    assert "p0" in exported and f"p{PENDING_SERIES_CAP - 1}" in exported
    assert f"p{PENDING_SERIES_CAP}" not in exported


def test_forgetting_the_pool_drops_its_pending_series() -> None:
    reg = CollectorRegistry()
    metrics = OperatorMetrics(reg)
    metrics.pool("ns", "p").record_pending({("ml", "a", "1", "", "", "0"): 1.0})
    metrics.forget("ns", "p")
    assert _series(reg) == {}


async def test_the_loop_exports_each_pending_pod_from_first_seen_until_bound() -> None:
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    reg = CollectorRegistry()
    scaler = Autoscaler(workload, writer, clock, OperatorMetrics(reg), settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", pool_manifest("a"))
        await clock.advance(0.5)  # its first decision (after the debounce), then quiet
        workload.pods["a"] = pending_pod("a", mem_mib=4096)
        scaler.cluster_event("wl")
        seen_a = clock.now()  # the decision that first sees it: at once, the pool was quiet
        await clock.advance(0.5)
        assert _series(reg) == {"a": pytest.approx(seen_a)}
        (labels,) = label_sets(reg, [NAME])
        assert labels == {
            "namespace": "ns",
            "pool": "a",
            "pod_namespace": "default",
            "pod": "a",
            "gpus": "1",
            "memory_mib": "4096",
            "memory_percent": "",
            "cores_percent": "0",
        }
        workload.pods["b"] = pending_pod("b")
        scaler.cluster_event("wl")
        await clock.advance(0.5)
        assert set(_series(reg)) == {"a", "b"} and _series(reg)["a"] == seen_a
        workload.pods["a"]["spec"]["nodeName"] = "cell-0"  # bound: no longer pending
        workload.pods["a"]["status"] = {"phase": "Running"}
        scaler.cluster_event("wl")
        await clock.advance(0.5)
        assert set(_series(reg)) == {"b"}
    finally:
        await scaler.close()


def test_booked_gang_placeholders_are_not_exported_as_pending_pods() -> None:
    real = PendingPod("ml/worker", GPUAsk(cores_percent=100), 10.0)
    held = PendingPod("ml/job-0-0", GPUAsk(cores_percent=100), 11.0)  # gang_pods.placeholders
    first_seen = {"uid-worker": 10.0, f"{PLACEHOLDER_UID_PREFIX}ml/job-0-0": 11.0}
    assert pending_series(first_seen, [real, held]) == {pending_labels(real): 10.0}
