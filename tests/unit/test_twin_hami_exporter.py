"""The twin's ``hami_*`` exposition: parseable, HAMi's names, labels and units, complete."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from autoscaler.signals.hami_metrics import CATALOGUE, CURRENT, LEGACY
from gpucellpool.operator.dashboards import render
from simulations.twin.hami_codec import (
    ContainerAllocation,
    Device,
    DeviceAllocation,
    NodeAllocation,
)
from simulations.twin.hami_exporter import render_metrics

MIB = 1048576
GPU0 = Device("GPU-0", 0, 10, 24576, 100, "NVIDIA GeForce GTX 1080", True)
GPU1 = Device("GPU-1", 1, 10, 24576, 100, "NVIDIA GeForce GTX 1080", True)
TABLE = [
    NodeAllocation(
        "cell-0",
        (DeviceAllocation(GPU0, 12288, 60, 2), DeviceAllocation(GPU1)),
        (
            ContainerAllocation("ns", "a", 0, "main", 0, "GPU-0", 8192, 40),
            ContainerAllocation("ns", "b", 1, "side", 0, "GPU-0", 4096, 20),
        ),
    )
]


def samples() -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(render_metrics(TABLE)):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def one(name: str, **labels: str) -> float:
    hits = [v for got, v in samples()[name] if all(got.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_device_series_carry_hami_labels_units_and_values() -> None:
    labels = {"node": "cell-0", "device_uuid": "GPU-0", "device_index": "0", "zone": "vGPU"}
    assert one("hami_gpu_memory_limit_bytes", **labels) == 24576 * MIB
    assert one("hami_gpu_core_limit_ratio", **labels) == 100
    assert one("hami_gpu_memory_allocated_bytes", device_cores="100", **labels) == 12288 * MIB
    assert one("hami_gpu_core_allocated_ratio", **labels) == 60
    assert one("hami_gpu_shared_count", **labels) == 2
    assert one("hami_node_gpu_memory_allocated_ratio", **labels) == 0.5
    overview = one("hami_node_gpu_overview", device_memory_limit="24576", **labels)
    assert overview == 12288 * MIB
    assert one("hami_gpu_shared_count", device_uuid="GPU-1") == 0
    assert one("hami_host_gpu_memory_used_bytes", device_uuid="GPU-0") == 12288 * MIB
    assert one("hami_host_gpu_utilization_ratio", device_uuid="GPU-0") == 60
    host = samples()["hami_host_gpu_memory_used_bytes"][0][0]
    assert host["device_type"] == "NVIDIA-NVIDIA GeForce GTX 1080"  # the monitor's quirk


def test_container_series() -> None:
    b = {"namespace": "ns", "pod": "b", "device_uuid": "GPU-0"}
    assert one("hami_vgpu_memory_allocated_bytes", node="cell-0", container_index="1", **b) == (
        4096 * MIB
    )
    assert one("hami_vgpu_core_allocated_ratio", **b) == 20
    assert one("hami_vgpu_memory_used_bytes", container="side", vdevice_index="0", **b) == (
        4096 * MIB
    )
    assert one("hami_vgpu_memory_limit_bytes", **b) == 4096 * MIB
    assert one("hami_container_device_utilization_ratio", **b) == 20
    assert one("hami_container_last_kernel_elapsed_seconds", **b) == 0


def test_every_series_but_build_info_is_in_zone_vgpu() -> None:
    for name, series in samples().items():
        for labels, _ in series:
            assert (labels.get("zone") == "vGPU") != (name == "hami_build_info"), name


def test_everything_the_operator_and_dashboards_query_is_exported() -> None:
    exported = set(samples())
    assert set(CURRENT.names.values()) <= exported
    dashboards = "".join(render().values())
    used = set(re.findall(r"\bhami_[a-z_]+", dashboards))
    assert used and used <= exported, used - exported
    # Everything in the catalogue except MIG and quota series (not simulated) is served.
    skipped = {
        "hami_node_gpu_mig_instance_info",
        "hami_mig_device_info",
        "hami_resource_quota_used",
        "hami_resource_quota_limit",
        "hami_host_gpu_memory_controller_utilization_ratio",
        "hami_vgpu_memory_context_bytes",
        "hami_vgpu_memory_module_bytes",
        "hami_vgpu_memory_buffer_bytes",
    }
    # HAMi-DRA's monitor is another exporter (simulations/twin/hami_dra_exporter.py).
    current = {e.current for e in CATALOGUE if e.current and e.exporter != "dra-monitor"}
    assert current - skipped <= exported, current - skipped - exported
    assert not exported - current  # no invented names


def test_an_empty_table_still_parses() -> None:
    names = {f.name for f in text_string_to_metric_families(render_metrics([]))}
    assert "hami_build_info" in names


def test_legacy_metrics_serve_the_v2_8_names_with_the_same_values() -> None:
    text = render_metrics(TABLE, legacy_metrics=True)
    legacy: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            legacy.setdefault(s.name, []).append((dict(s.labels), s.value))
    # Every scheduler name the operator's legacy reader knows is there, keyed its old way.
    assert set(LEGACY.names.values()) <= set(legacy)
    gpu0 = {"nodeid": "cell-0", "deviceuuid": "GPU-0", "deviceidx": "0"}

    def old(name: str) -> float:
        hits = [v for got, v in legacy[name] if gpu0.items() <= got.items()]
        assert len(hits) == 1, (name, hits)
        return hits[0]

    assert old("GPUDeviceMemoryLimit") == one("hami_gpu_memory_limit_bytes", device_uuid="GPU-0")
    assert old("GPUDeviceMemoryAllocated") == 12288 * MIB
    assert old("GPUDeviceCoreAllocated") == 60 and old("GPUDeviceSharedNum") == 2
    # The current names are still served, and the default serves no legacy name.
    assert "hami_gpu_memory_limit_bytes" in legacy
    assert not set(LEGACY.names.values()) & set(samples())
    # The dashboard's legacy panel reads exactly these names.
    dashboards = "".join(render().values())
    assert {"GPUDeviceMemoryAllocated", "GPUDeviceMemoryLimit"} <= set(
        re.findall(r"\bGPUDevice[A-Za-z]+", dashboards)
    )
