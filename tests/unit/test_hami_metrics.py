"""Pure tests: the HAMi metric catalogue and the query builders (signals.hami_metrics)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autoscaler.policy.types import GPUUsage
from autoscaler.signals.hami_metrics import (
    CATALOGUE,
    CURRENT,
    LEGACY,
    REMOVED_LEGACY_NAMES,
    SCHEMAS,
    GPUReading,
    MetricFamily,
    NodeReading,
    Quantity,
    Schema,
    Unit,
    pressure_queries,
    summarise,
    usage_query,
)

FACTS = Path(__file__).resolve().parents[3] / "shared" / "reference" / "hami-facts.md"

LEGACY_SCHEDULER = [
    "GPUDeviceMemoryLimit",
    "GPUDeviceCoreLimit",
    "GPUDeviceMemoryAllocated",
    "GPUDeviceSharedNum",
    "GPUDeviceCoreAllocated",
    "nodeGPUOverview",
    "nodeGPUMemoryPercentage",
    "nodeGPUMigInstance",
    "vGPUMemoryAllocated",
    "vGPUCoreAllocated",
    "QuotaUsed",
]
LEGACY_MONITOR = [
    "HostGPUMemoryUsage",
    "HostCoreUtilization",
    "vGPU_device_memory_usage_in_bytes",
    "vGPU_device_memory_limit_in_bytes",
    "Device_memory_desc_of_container",
    "Device_utilization_desc_of_container",
    "Device_last_kernel_of_container",
    "MigInfo",
]


def test_legacy_names_are_exactly_the_documented_ones() -> None:
    legacy = [e.legacy for e in CATALOGUE if e.legacy]
    assert legacy == LEGACY_SCHEDULER + LEGACY_MONITOR
    assert not set(REMOVED_LEGACY_NAMES) & set(legacy)


def test_current_names_are_unique_and_all_hami_prefixed() -> None:
    current = [e.current for e in CATALOGUE if e.current]
    assert len(current) == len(set(current)) == len(CATALOGUE)
    assert all(name.startswith("hami_") for name in current)


@pytest.mark.skipif(not FACTS.exists(), reason=f"{FACTS} not beside the project")
def test_catalogue_covers_every_hami_name_in_the_facts() -> None:
    section = FACTS.read_text().split("## 4. Prometheus metrics", 1)[1].split("\n## 5.", 1)[0]
    documented = set(re.findall(r"`(hami_[a-z_]+)`", section))
    documented -= {"hami_"}
    current = {e.current for e in CATALOGUE}
    assert documented <= current, documented - current
    legacy = {e.legacy for e in CATALOGUE}
    for name in LEGACY_SCHEDULER + LEGACY_MONITOR:
        assert f"`{name}`" in section
        assert name in legacy


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("hami_gpu_memory_limit_bytes", Unit.BYTES),
        ("hami_gpu_core_limit_ratio", Unit.PERCENT),  # 100 per GPU despite the name
        ("hami_gpu_core_allocated_ratio", Unit.PERCENT),
        ("hami_node_gpu_memory_allocated_ratio", Unit.FRACTION),  # 0-1
        ("hami_gpu_shared_count", Unit.COUNT),
        ("hami_host_gpu_utilization_ratio", Unit.PERCENT),
        ("hami_container_last_kernel_elapsed_seconds", Unit.SECONDS),
    ],
)
def test_units(name: str, unit: Unit) -> None:
    assert next(e.unit for e in CATALOGUE if e.current == name) is unit


def test_schemas_use_the_family_labels() -> None:
    assert (CURRENT.node_label, CURRENT.uuid_label, CURRENT.index_label) == (
        "node",
        "device_uuid",
        "device_index",
    )
    assert (LEGACY.node_label, LEGACY.uuid_label, LEGACY.index_label) == (
        "nodeid",
        "deviceuuid",
        "deviceidx",
    )
    assert SCHEMAS[MetricFamily.LEGACY] is LEGACY


def test_schema_names_are_catalogue_pairs() -> None:
    pairs = {(e.current, e.legacy) for e in CATALOGUE}
    for quantity in Quantity:
        current, legacy = CURRENT.names[quantity], LEGACY.names[quantity]
        assert (current, legacy) in pairs
        assert CURRENT.quantity_of(current) is quantity
        assert LEGACY.quantity_of(legacy) is quantity
    assert CURRENT.quantity_of("GPUDeviceSharedNum") is None


@pytest.mark.parametrize(
    ("schema", "nodes", "lookback", "expected"),
    [
        (
            CURRENT,
            ["cell-1", "cell-0"],
            180,
            '{__name__=~"hami_gpu_core_allocated_ratio|hami_gpu_core_limit_ratio|'
            "hami_gpu_memory_allocated_bytes|hami_gpu_memory_limit_bytes|hami_gpu_shared_count"
            '",node=~"cell-0|cell-1"}[180000ms]',
        ),
        (
            LEGACY,
            ["gpu.node-a"],
            60.5,
            '{__name__=~"GPUDeviceCoreAllocated|GPUDeviceCoreLimit|GPUDeviceMemoryAllocated|'
            'GPUDeviceMemoryLimit|GPUDeviceSharedNum",nodeid=~"gpu\\\\.node-a"}[60500ms]',
        ),
    ],
)
def test_usage_query(schema: Schema, nodes: list[str], lookback: float, expected: str) -> None:
    assert usage_query(schema, nodes, lookback) == expected


def test_usage_query_escapes_quotes_and_backslashes_in_node_names() -> None:
    query = usage_query(CURRENT, ['a"b\\c'], 60)
    assert 'node=~"a\\\\\\"b\\\\\\\\c"' in query


def test_pressure_queries_follow_the_facts_shapes() -> None:
    queries = pressure_queries(CURRENT, ["cell-0"])
    sel = '{node=~"cell-0"}'
    assert queries == {
        "memory": f"sum by (node)(hami_gpu_memory_allocated_bytes{sel}) / "
        f"sum by (node)(hami_gpu_memory_limit_bytes{sel})",
        "cores": f"sum by (node)(hami_gpu_core_allocated_ratio{sel}) / "
        f"sum by (node)(hami_gpu_core_limit_ratio{sel})",
        "slots": f"sum by (node)(hami_gpu_shared_count{sel})",
    }
    legacy = pressure_queries(LEGACY, ["cell-0"])
    assert legacy["slots"] == 'sum by (nodeid)(GPUDeviceSharedNum{nodeid=~"cell-0"})'


def test_gpu_usage_needs_every_required_value() -> None:
    full = GPUReading("GPU-1", 0, 4096, 24576, 30.0, 100.0, 2)
    assert full.usage() == GPUUsage(memory_mib=4096, cores_percent=30, slots=2)
    assert GPUReading("GPU-1", 0, 4096, 24576, 30.2, 100.0, 2).usage() == GPUUsage(4096, 31, 2)
    assert GPUReading("GPU-1", 0, None, 24576, 30.0, 100.0, 2).usage() is None
    assert GPUReading("GPU-1", 0, 4096, 24576, None, 100.0, 2).usage() is None
    assert GPUReading("GPU-1", 0, 4096, 24576, 30.0, 100.0, None).usage() is None
    # limits are not required for usage
    assert GPUReading("GPU-1", 0, 0, None, 0.0, None, 0).usage() == GPUUsage(0, 0, 0)


def test_node_usage_is_none_when_any_gpu_is_incomplete_or_no_gpus() -> None:
    ok = GPUReading("GPU-1", 0, 1, 2, 3.0, 100.0, 1)
    bad = GPUReading("GPU-2", 1)
    assert NodeReading("n", (ok,), 0.0).usage() == (GPUUsage(1, 3, 1),)
    assert NodeReading("n", (ok, bad), 0.0).usage() is None
    assert NodeReading("n", (), 0.0).usage() is None


@pytest.mark.parametrize(
    ("problems", "detail"),
    [
        (["a"], "a"),
        (["a", "b", "c"], "a; b; c"),
        (["a", "b", "c", "d", "e"], "a; b; c; (+2 more)"),
    ],
)
def test_summarise(problems: list[str], detail: str) -> None:
    assert summarise(problems) == detail
