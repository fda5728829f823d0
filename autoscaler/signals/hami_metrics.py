"""HAMi's Prometheus metrics: the name catalogue, query builders and reading interpretation.

Why this module exists: utilisation is cross-checked against what HAMi's scheduler exports,
and the clusters we meet run any HAMi release: v2.9+ export ``hami_*`` names, v2.8 and
earlier only the legacy camel-case names with different labels (hami-facts §4). The names,
labels and units are facts, so they live in one table here. Turning a query result into
per-node, per-GPU allocations is pure judgement: a sample that is NaN, infinite, negative,
garbage, stale or missing must never read as zero, so every such case becomes a precise
problem and an unfresh :class:`MetricsHealth` instead (ARCHITECTURE §3).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.policy.types import GPUUsage, MetricsHealth
from autoscaler.signals.promql import any_of, duration

MIB = 1048576  # HAMi exports bytes = MiB x 1048576
_MAX_PROBLEMS_IN_DETAIL = 3


class MetricFamily(enum.StrEnum):
    CURRENT = "hami"  # hami_* names: HAMi >= 2.9
    LEGACY = "legacy"  # HAMi <= 2.8 (and v2.9+ with --legacy-metrics=true)
    DRA = "hami_dra"  # HAMi-DRA's monitor (:8080), read for pools in capacity.hami.mode DRA


class Unit(enum.StrEnum):
    BYTES = "bytes"  # MiB x 1048576
    PERCENT = "percent"  # 0-100 (core "ratio" metrics; limit is 100 per GPU at scaling 1)
    FRACTION = "fraction"  # 0-1
    COUNT = "count"
    SECONDS = "seconds"
    INFO = "info"  # always 1; the labels carry the information


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    """One HAMi metric under both of its names (None where a family lacks it)."""

    current: str | None
    legacy: str | None
    unit: Unit
    exporter: str  # "scheduler" (:9395) or "monitor" (vGPUmonitor, :9394)


def _s(current: str | None, legacy: str | None, unit: Unit) -> CatalogueEntry:
    return CatalogueEntry(current, legacy, unit, "scheduler")


def _m(current: str | None, legacy: str | None, unit: Unit) -> CatalogueEntry:
    return CatalogueEntry(current, legacy, unit, "monitor")


def _d(current: str, unit: Unit) -> CatalogueEntry:
    return CatalogueEntry(current, None, unit, "dra-monitor")


B, P, F, C, S = Unit.BYTES, Unit.PERCENT, Unit.FRACTION, Unit.COUNT, Unit.SECONDS
CATALOGUE: tuple[CatalogueEntry, ...] = (
    _s("hami_build_info", None, Unit.INFO),
    _s("hami_gpu_memory_limit_bytes", "GPUDeviceMemoryLimit", B),
    _s("hami_gpu_core_limit_ratio", "GPUDeviceCoreLimit", P),
    _s("hami_gpu_memory_allocated_bytes", "GPUDeviceMemoryAllocated", B),
    _s("hami_gpu_shared_count", "GPUDeviceSharedNum", C),
    _s("hami_gpu_core_allocated_ratio", "GPUDeviceCoreAllocated", P),
    _s("hami_node_gpu_overview", "nodeGPUOverview", B),
    _s("hami_node_gpu_memory_allocated_ratio", "nodeGPUMemoryPercentage", F),
    _s("hami_node_gpu_mig_instance_info", "nodeGPUMigInstance", Unit.INFO),
    _s("hami_vgpu_memory_allocated_bytes", "vGPUMemoryAllocated", B),
    _s("hami_vgpu_core_allocated_ratio", "vGPUCoreAllocated", P),
    _s("hami_resource_quota_used", "QuotaUsed", C),  # MiB or core % by quota_name
    _s("hami_resource_quota_limit", None, C),
    _m("hami_host_gpu_memory_used_bytes", "HostGPUMemoryUsage", B),
    _m("hami_host_gpu_utilization_ratio", "HostCoreUtilization", P),
    _m("hami_host_gpu_memory_controller_utilization_ratio", None, P),
    _m("hami_vgpu_memory_used_bytes", "vGPU_device_memory_usage_in_bytes", B),
    _m("hami_vgpu_memory_limit_bytes", "vGPU_device_memory_limit_in_bytes", B),
    _m("hami_container_device_memory_bytes", "Device_memory_desc_of_container", B),
    _m("hami_container_device_utilization_ratio", "Device_utilization_desc_of_container", P),
    _m("hami_container_last_kernel_elapsed_seconds", "Device_last_kernel_of_container", S),
    _m("hami_vgpu_memory_context_bytes", None, B),
    _m("hami_vgpu_memory_module_bytes", None, B),
    _m("hami_vgpu_memory_buffer_bytes", None, B),
    _m("hami_mig_device_info", "MigInfo", Unit.INFO),
    # HAMi-DRA's monitor (hami-facts §5): core "ratios" really are 0-1 there.
    _d("hami_dra_gpu_core_limit_ratio", F),
    _d("hami_dra_gpu_memory_limit_bytes", B),
    _d("hami_dra_gpu_core_allocated_ratio", F),
    _d("hami_dra_gpu_memory_allocated_bytes", B),
    _d("hami_dra_vgpu_core_allocated_ratio", F),
    _d("hami_dra_vgpu_memory_allocated_bytes", B),
)
# Removed in v2.8.0 (PR #1562); never queried, listed so nobody reintroduces them.
REMOVED_LEGACY_NAMES = ("vGPUPodsDeviceAllocated", "vGPUMemoryPercentage", "vGPUCorePercentage")


class Quantity(enum.StrEnum):
    """The per-GPU scheduler series the autoscaler reads."""

    MEMORY_LIMIT = "memory_limit"
    CORES_LIMIT = "cores_limit"
    MEMORY_ALLOCATED = "memory_allocated"
    CORES_ALLOCATED = "cores_allocated"
    SLOTS_USED = "slots_used"


REQUIRED = (Quantity.MEMORY_ALLOCATED, Quantity.CORES_ALLOCATED, Quantity.SLOTS_USED)


@dataclass(frozen=True, slots=True)
class Schema:
    """Names and labels of the per-GPU allocation series in one family."""

    family: MetricFamily
    node_label: str
    uuid_label: str
    index_label: str
    names: Mapping[Quantity, str]
    # Where a family has no per-GPU slot series (HAMi-DRA): the per-pod series whose pods
    # present in a GPU's newest scrape are its slots used (one share per pod and device).
    slot_series: str | None = None
    cores_percent_per_unit: float = 1.0  # 100 where core ratios are exported on 0-1

    @property
    def series_names(self) -> tuple[str, ...]:
        """Every series name the usage query selects."""
        extra = (self.slot_series,) if self.slot_series else ()
        return (*self.names.values(), *extra)

    def quantity_of(self, metric_name: str) -> Quantity | None:
        return next((q for q, name in self.names.items() if name == metric_name), None)


CURRENT = Schema(
    MetricFamily.CURRENT,
    node_label="node",
    uuid_label="device_uuid",
    index_label="device_index",
    names={
        Quantity.MEMORY_LIMIT: "hami_gpu_memory_limit_bytes",
        Quantity.CORES_LIMIT: "hami_gpu_core_limit_ratio",
        Quantity.MEMORY_ALLOCATED: "hami_gpu_memory_allocated_bytes",
        Quantity.CORES_ALLOCATED: "hami_gpu_core_allocated_ratio",
        Quantity.SLOTS_USED: "hami_gpu_shared_count",
    },
)
LEGACY = Schema(
    MetricFamily.LEGACY,
    node_label="nodeid",
    uuid_label="deviceuuid",
    index_label="deviceidx",
    names={
        Quantity.MEMORY_LIMIT: "GPUDeviceMemoryLimit",
        Quantity.CORES_LIMIT: "GPUDeviceCoreLimit",
        Quantity.MEMORY_ALLOCATED: "GPUDeviceMemoryAllocated",
        Quantity.CORES_ALLOCATED: "GPUDeviceCoreAllocated",
        Quantity.SLOTS_USED: "GPUDeviceSharedNum",
    },
)
DRA = Schema(
    MetricFamily.DRA,
    node_label="node",
    uuid_label="device_uuid",
    index_label="device_index",
    names={
        Quantity.MEMORY_LIMIT: "hami_dra_gpu_memory_limit_bytes",
        Quantity.CORES_LIMIT: "hami_dra_gpu_core_limit_ratio",
        Quantity.MEMORY_ALLOCATED: "hami_dra_gpu_memory_allocated_bytes",
        Quantity.CORES_ALLOCATED: "hami_dra_gpu_core_allocated_ratio",
    },
    slot_series="hami_dra_vgpu_memory_allocated_bytes",
    cores_percent_per_unit=100.0,
)
SCHEMAS: Mapping[MetricFamily, Schema] = {s.family: s for s in (CURRENT, LEGACY, DRA)}


# ---------------------------------------------------------------------------------------------
# Query builders
# ---------------------------------------------------------------------------------------------


def _node_matcher(schema: Schema, node_names: Sequence[str]) -> str:
    return f'{schema.node_label}=~"{_promql_regex(any_of(node_names))}"'


def _promql_regex(regex: str) -> str:
    """A regex inside a double-quoted PromQL string: backslashes and quotes escaped."""
    return regex.replace("\\", "\\\\").replace('"', '\\"')


def usage_query(schema: Schema, node_names: Sequence[str], lookback_seconds: float) -> str:
    """Raw samples of every per-GPU allocation series of ``node_names`` in the lookback window.

    A range selector, not an instant query: its samples carry their real scrape timestamps
    (an instant query stamps everything with the evaluation time), and a series whose target
    stopped answering still shows its last sample instead of vanishing behind a staleness
    marker, so "stale since N seconds" can be told apart from "never reported".
    """
    names = any_of(list(schema.series_names))
    matcher = _node_matcher(schema, node_names)
    return f'{{__name__=~"{names}",{matcher}}}[{duration(lookback_seconds)}]'


def pressure_queries(schema: Schema, node_names: Sequence[str]) -> dict[str, str]:
    """Per-node allocation pressure (hami-facts §4.4), for explanations and dashboards.

    memory and cores are 0-1 ratios of allocated to limit; slots is the number of slots used
    (the per-GPU slot total is not exported: compare with allocatable ``nvidia.com/gpu``).
    """
    sel = "{" + _node_matcher(schema, node_names) + "}"
    n, by = schema.names, f"sum by ({schema.node_label})"

    def ratio(allocated: Quantity, limit: Quantity) -> str:
        return f"{by}({n[allocated]}{sel}) / {by}({n[limit]}{sel})"

    return {
        "memory": ratio(Quantity.MEMORY_ALLOCATED, Quantity.MEMORY_LIMIT),
        "cores": ratio(Quantity.CORES_ALLOCATED, Quantity.CORES_LIMIT),
        "slots": (
            f"{by}({n[Quantity.SLOTS_USED]}{sel})"
            if Quantity.SLOTS_USED in n
            else f"count by ({schema.node_label})({schema.slot_series}{sel})"
        ),
    }


# ---------------------------------------------------------------------------------------------
# Readings
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GPUReading:
    """One GPU's allocation as HAMi's scheduler exports it; None = missing or unusable."""

    uuid: str
    index: int | None = None
    memory_allocated_mib: int | None = None
    memory_limit_mib: int | None = None
    cores_allocated_percent: float | None = None
    cores_limit_percent: float | None = None
    slots_used: int | None = None

    def usage(self) -> GPUUsage | None:
        """The policy's view of this GPU, or None when a required value is unknown."""
        mem, cores, slots = self.memory_allocated_mib, self.cores_allocated_percent, self.slots_used
        if mem is None or cores is None or slots is None:
            return None
        return GPUUsage(memory_mib=mem, cores_percent=math.ceil(cores), slots=slots)


@dataclass(frozen=True, slots=True)
class NodeReading:
    node: str
    gpus: tuple[GPUReading, ...]
    age_seconds: float  # age of the stalest series' newest sample on this node

    def usage(self) -> tuple[GPUUsage, ...] | None:
        """Per-GPU usage in device-index order, or None when any GPU is incomplete."""
        usages = [gpu.usage() for gpu in self.gpus]
        if not usages or any(u is None for u in usages):
            return None
        return tuple(u for u in usages if u is not None)


@dataclass(frozen=True, slots=True)
class MetricsReading:
    """What Prometheus said about the requested nodes, and whether to trust it.

    ``nodes`` holds whatever could be read, even when ``health.fresh`` is False (partial
    data); ``problems`` lists every reason for distrust, one line each.
    """

    health: MetricsHealth
    nodes: Mapping[str, NodeReading]
    family: MetricFamily | None = None
    problems: tuple[str, ...] = ()

    def usage_by_node(self) -> dict[str, tuple[GPUUsage, ...]]:
        """Complete per-GPU usage of the nodes that have it."""
        out = {name: node.usage() for name, node in self.nodes.items()}
        return {name: usage for name, usage in out.items() if usage is not None}

    @property
    def reporting_nodes(self) -> frozenset[str]:
        """Nodes that appear in the scheduler's limit series (a cell-readiness input, §10)."""
        return frozenset(
            name
            for name, node in self.nodes.items()
            if any(gpu.memory_limit_mib is not None for gpu in node.gpus)
        )


def unavailable(
    detail: str,
    age_seconds: float,
    family: MetricFamily | None = None,
    *,
    read_failed: bool = False,
) -> MetricsReading:
    """A reading with no data at all: ``read_failed`` for a transport error or bad response,
    not for an answer without series."""
    health = MetricsHealth(False, max(0.0, age_seconds), detail, read_failed=read_failed)
    return MetricsReading(health=health, nodes={}, family=family, problems=(detail,))


def summarise(problems: Sequence[str]) -> str:
    """One detail line: the first few problems and how many more there were."""
    shown = "; ".join(problems[:_MAX_PROBLEMS_IN_DETAIL])
    more = len(problems) - _MAX_PROBLEMS_IN_DETAIL
    return f"{shown}; (+{more} more)" if more > 0 else shown
