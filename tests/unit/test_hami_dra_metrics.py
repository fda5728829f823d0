"""HAMi-DRA's monitor series: the DRA schema's reading, and the twin's exporter of them.

A pool in DRA mode reads ``hami_dra_*`` (hami-facts §5): core ratios on 0-1, no per-GPU slot
series (slots = pods on the GPU in its newest scrape), and nothing of it may read as zero when
it is missing or garbage.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import httpx
import respx

import tests.unit.test_loop_measured_use as measured
from autoscaler.measured_use import judge
from autoscaler.policy.decision import Reason
from autoscaler.policy.hami_dra import DEVICE_CLASS, claim_usage
from autoscaler.policy.types import GPUUsage, MetricsHealth
from autoscaler.signals.hami_metrics import (
    CATALOGUE,
    CURRENT,
    DRA,
    MIB,
    MetricFamily,
    Quantity,
    pressure_queries,
    usage_query,
)
from autoscaler.signals.hami_usage import interpret_usage
from autoscaler.signals.prometheus import PrometheusSource
from autoscaler.signals.promql import QueryResult, Series
from gpucellpool.api.pool import GPUCellPool
from simulations.simulator.engine.clock import VirtualClock
from simulations.twin.hami_dra import hami_slice, webhook_pod
from simulations.twin.hami_dra_exporter import render_dra_metrics

NOW = 1_800_000_000.0
JSON = dict[str, Any]


def device(uuid: str, index: int, *, mem_mib: int, cores: str, age: float = 5.0) -> list[Series]:
    labels = {"node": "cell-0", "device_uuid": uuid, "device_index": str(index)}
    raw = {
        Quantity.MEMORY_LIMIT: repr(24576 * MIB),
        Quantity.CORES_LIMIT: "1",
        Quantity.MEMORY_ALLOCATED: repr(mem_mib * MIB),
        Quantity.CORES_ALLOCATED: cores,
    }
    return [
        Series({"__name__": DRA.names[q], **labels}, ((NOW - age, value),))
        for q, value in raw.items()
    ]


def share(uuid: str, pod: str, *, age: float = 5.0) -> Series:
    labels = {"node": "cell-0", "device_uuid": uuid, "namespace": "ml", "pod": pod}
    return Series(
        {"__name__": "hami_dra_vgpu_memory_allocated_bytes", **labels}, ((NOW - age, "1"),)
    )


def read(series: list[Series], schema=DRA):  # type: ignore[no-untyped-def]
    result = QueryResult("matrix", tuple(series))
    return interpret_usage(
        result, schema, ["cell-0"], now=NOW, stale_after_seconds=60, lookback_seconds=180
    )


def test_dra_series_read_as_mib_percent_and_pods_in_the_newest_scrape() -> None:
    series = [
        *device("GPU-a", 0, mem_mib=16000, cores="0.3"),
        *device("GPU-b", 1, mem_mib=0, cores="0"),
        share("GPU-a", "first"),
        share("GPU-a", "gone", age=40.0),  # evicted: its last sample is older than the scrape
    ]
    reading = read(series)
    assert reading.health.fresh, reading.problems
    assert reading.family is MetricFamily.DRA
    # 0.3 x 100 is 30 cores, not 31 (float error must not ceil up)
    assert reading.usage_by_node() == {"cell-0": (GPUUsage(16000, 30, 1), GPUUsage(0, 0, 0))}
    assert reading.nodes["cell-0"].gpus[0].cores_limit_percent == 100.0
    assert reading.reporting_nodes == frozenset({"cell-0"})


def test_device_plugin_series_are_not_read_as_dra_nor_dra_as_device_plugin() -> None:
    dra = [*device("GPU-a", 0, mem_mib=100, cores="0.1"), share("GPU-a", "p")]
    assert read(dra, CURRENT).nodes == {}
    assert not read(dra, CURRENT).health.fresh
    plugin = [
        Series({"__name__": name, "node": "cell-0", "device_uuid": "GPU-a"}, ((NOW, "5"),))
        for name in CURRENT.names.values()
    ]
    reading = read(plugin)
    assert not reading.health.fresh
    assert "no samples for node(s) cell-0" in reading.health.detail


def test_missing_or_garbage_dra_series_are_problems_never_zero() -> None:
    without_memory = [s for s in device("GPU-a", 0, mem_mib=1, cores="0.2")]
    without_memory = [
        s for s in without_memory if s.labels["__name__"] != "hami_dra_gpu_memory_allocated_bytes"
    ]
    reading = read(without_memory)
    assert not reading.health.fresh
    assert "no hami_dra_gpu_memory_allocated_bytes series" in reading.health.detail
    assert "no hami_dra_vgpu_memory_allocated_bytes series" in reading.health.detail
    assert reading.usage_by_node() == {}
    nan = read(device("GPU-a", 0, mem_mib=1, cores="NaN"))
    assert not nan.health.fresh
    assert "hami_dra_gpu_core_allocated_ratio value 'NaN'" in nan.health.detail
    stale = read(device("GPU-a", 0, mem_mib=1, cores="0.1", age=90.0))
    assert not stale.health.fresh and "stale after 60s" in stale.health.detail


def test_dra_queries_select_the_share_series_for_slots() -> None:
    query = usage_query(DRA, ["cell-0"], 180)
    assert "hami_dra_vgpu_memory_allocated_bytes" in query
    assert "hami_gpu_shared_count" not in query
    assert pressure_queries(DRA, ["cell-0"])["slots"].startswith(
        "count by (node)(hami_dra_vgpu_memory_allocated_bytes{"
    )


def _allocated(claim: dict, node: str, cores: int, memory_mib: int) -> dict:  # type: ignore[type-arg]
    result = {
        "request": "gpu",
        "driver": "hami-core-gpu.project-hami.io",
        "pool": node,
        "device": "hami-gpu-0",
        "consumedCapacity": {"memory": f"{memory_mib}Mi", "cores": str(cores)},
    }
    claim["status"] = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": claim["metadata"]["name"], "uid": "u"}],
    }
    return claim


def test_twin_exporter_serves_what_the_claims_hold_and_the_reader_agrees() -> None:
    slices = [hami_slice("cell-0", "uid", 2, 24576, "s")]
    claims = [
        _allocated(webhook_pod("ml", "a", 16000, cores=30)[0], "cell-0", 30, 16000),
        _allocated(webhook_pod("ml", "b", 4000, cores=20)[0], "cell-0", 20, 4000),
    ]
    text = render_dra_metrics(slices, claims)
    assert 'hami_dra_gpu_core_allocated_ratio{device_index="0"' in text
    samples: list[Series] = []
    for line in text.splitlines():
        if line.startswith("hami_dra_"):
            name, _, rest = line.partition("{")
            labels_text, _, value = rest.rpartition("} ")
            labels = dict(
                (k, v.strip('"')) for k, v in (kv.split("=", 1) for kv in labels_text.split('",'))
            )
            samples.append(Series({"__name__": name, **labels}, ((NOW, value),)))
    dra_names = {e.current for e in CATALOGUE if e.exporter == "dra-monitor"}
    assert {s.labels["__name__"] for s in samples} == dra_names  # all of them, nothing else
    reading = read(samples)
    assert reading.health.fresh, reading.problems
    expected = claim_usage(slices, claims, DEVICE_CLASS, 2)["cell-0"]
    assert reading.usage_by_node()["cell-0"] == (GPUUsage(20000, 50, 2), GPUUsage(0, 0, 0))
    assert reading.usage_by_node()["cell-0"] == expected


def _dra_pool(**auto: Any) -> JSON:
    raw: JSON = measured.pool(**auto)
    raw["spec"]["capacity"]["hami"] = {"mode": "DRA", "deviceClassName": DEVICE_CLASS}
    return raw


async def test_a_dra_pool_is_metrics_available_from_allocations_alone() -> None:
    activity = measured.Activity(idle_seconds=4000)
    raw = _dra_pool(scaleDownOn="Usage", usageIdleWindow="1h", **measured.PROM)
    decision, status = await measured.run(raw, activity)
    assert activity.asked == []  # HAMi-DRA has no monitor utilisation series to read
    cond = measured.metrics_available(status)
    assert (cond["status"], cond["reason"]) == ("True", "Fresh")
    assert "HAMi-DRA exports no measured utilisation" in cond["message"]
    assert decision.reason is Reason.NO_IDLE_CELL and decision.victims == ()
    assert "utilization" not in status  # nothing measured, nothing written


def test_a_dra_pool_with_unfresh_allocations_is_not_available() -> None:
    pool = GPUCellPool.model_validate(_dra_pool(**measured.PROM))
    stale = judge(pool, MetricsHealth(False, 90.0, "node cell-0: stale"), None, {})
    assert (stale.available, stale.reason) == (False, "Stale")
    assert "HAMi-DRA allocation metrics not fresh (node cell-0: stale)" in stale.message
    failed_read = MetricsHealth(False, 0.0, "refused", read_failed=True)
    assert judge(pool, failed_read, None, {}).reason == "Unreachable"


async def test_the_source_asks_only_for_hami_dra_names_for_a_dra_pool() -> None:
    url = "http://prometheus.test:9090"
    empty = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    with respx.mock(assert_all_called=True) as router:
        route = router.post(f"{url}/api/v1/query").mock(
            return_value=httpx.Response(200, json=empty)
        )
        async with PrometheusSource(url, clock=VirtualClock(NOW)) as source:
            reading = await source.node_gpu_usage(["cell-0"], dra=True)
    assert route.call_count == 1  # the device-plugin names are not tried for a DRA pool
    query = parse_qs(route.calls.last.request.content.decode())["query"][0]
    assert query.startswith('{__name__=~"hami_dra_gpu_core_allocated_ratio|')
    assert not reading.health.fresh and not reading.health.read_failed
    assert "looked for HAMi-DRA's hami_dra_* names" in reading.health.detail
    assert source.family is None  # a DRA answer says nothing about the device-plugin family
