"""The twin's monitor series follow a pod's ``sim.cells.kubeswift.io/idle-since``.

What these prove: a busy container reads its allocated cores and a last kernel 0 s ago; once
past its idle-since time it reads 0 % and a last kernel ``now - idle-since`` seconds ago, and
the GPU's host utilisation is the sum over its busy containers only. The operator's pure
reader (``autoscaler.signals.hami_activity``) turns that exposition into an idle pod.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.policy.types import GPUAsk
from autoscaler.signals.hami_activity import ACTIVITY_SCHEMAS, idle_cells, interpret_activity
from autoscaler.signals.hami_metrics import MetricFamily
from autoscaler.signals.promql import QueryResult, Series
from simulations.simulator.traces import TracePod
from simulations.twin.hami_codec import (
    BUSY_SECONDS_ANNOTATION,
    IDLE_SINCE_ANNOTATION,
    ContainerAllocation,
    Device,
    DeviceAllocation,
    NodeAllocation,
    idle_since,
)
from simulations.twin.hami_exporter import render_metrics
from simulations.twin.player import trace_pod_manifest

NOW = 1_800_000_000.0
GPU0 = Device("GPU-0", 0, 10, 24576, 100, "NVIDIA GeForce GTX 1080", True)


def table(quiet_since: float | None) -> list[NodeAllocation]:
    return [
        NodeAllocation(
            "cell-0",
            (DeviceAllocation(GPU0, 12288, 60, 2),),
            (
                ContainerAllocation("ns", "busy", 0, "main", 0, "GPU-0", 8192, 40),
                ContainerAllocation("ns", "quiet", 0, "main", 0, "GPU-0", 4096, 20, quiet_since),
            ),
        )
    ]


def series(text: str) -> list[Series]:
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {"__name__": sample.name, **sample.labels}
            out.append(Series(labels, ((NOW, repr(float(sample.value))),)))
    return out


def values(text: str, name: str) -> dict[str, float]:
    return {
        s.labels.get("pod", s.labels.get("node", "")): float(s.newest[1])
        for s in series(text)
        if s.labels["__name__"] == name
    }


def test_busy_until_idle_since_then_zero_and_an_ageing_last_kernel() -> None:
    before = render_metrics(table(NOW + 10), now=NOW)
    assert values(before, "hami_container_device_utilization_ratio") == {"busy": 40, "quiet": 20}
    assert values(before, "hami_container_last_kernel_elapsed_seconds") == {"busy": 0, "quiet": 0}
    assert values(before, "hami_host_gpu_utilization_ratio") == {"cell-0": 60}
    after = render_metrics(table(NOW - 700), now=NOW)
    assert values(after, "hami_container_device_utilization_ratio") == {"busy": 40, "quiet": 0}
    assert values(after, "hami_container_last_kernel_elapsed_seconds") == {"busy": 0, "quiet": 700}
    assert values(after, "hami_host_gpu_utilization_ratio") == {"cell-0": 40}


def test_the_operator_reads_the_twin_exposition_as_one_idle_pod() -> None:
    found = series(render_metrics(table(NOW - 700), now=NOW))
    schema = ACTIVITY_SCHEMAS[MetricFamily.CURRENT]
    host = QueryResult(
        "matrix", tuple(s for s in found if s.labels["__name__"] == schema.host_utilisation)
    )
    names = (schema.container_utilisation, schema.last_kernel)
    pods = QueryResult("matrix", tuple(s for s in found if s.labels["__name__"] in names))
    keys = ["ns/busy", "ns/quiet"]
    reading = interpret_activity(
        host, pods, schema, ["cell-0"], keys, now=NOW, stale_after_seconds=60
    )
    assert reading.fresh and reading.mean_gpu_percent() == 40
    verdict = idle_cells({"cell-0": keys, "solo": ["ns/quiet"]}, reading, 600)
    assert verdict.idle_cells == frozenset({"solo"}) and verdict.idle_pods == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1800000000.5", 1_800_000_000.5), ("soon", None), ("nan", None), ("", None)],
)
def test_idle_since_annotation_is_read_or_ignored(text: str, expected: float | None) -> None:
    assert idle_since({IDLE_SINCE_ANNOTATION: text}) == expected
    assert idle_since({}) is None


def test_busy_seconds_count_from_the_pods_start() -> None:
    notes = {BUSY_SECONDS_ANNOTATION: "90"}
    assert idle_since(notes, started_at=NOW) == NOW + 90
    assert idle_since(notes) is None  # not started: busy
    both = {**notes, IDLE_SINCE_ANNOTATION: "5"}
    assert idle_since(both, started_at=NOW) == 5  # an explicit time wins


def test_the_player_writes_the_usage_column_as_busy_seconds() -> None:
    ask = GPUAsk(memory_percent=100, cores_percent=100)
    quiet = trace_pod_manifest(TracePod("q", 0.0, 600.0, ask, usage=0.25), "q", "ns", speed=2.0)
    assert quiet["metadata"]["annotations"][BUSY_SECONDS_ANNOTATION] == "75.000"
    busy = trace_pod_manifest(TracePod("b", 0.0, 600.0, ask), "b", "ns")
    assert BUSY_SECONDS_ANNOTATION not in busy["metadata"]["annotations"]
