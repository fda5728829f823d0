"""``trace record``: Prometheus range results -> generic trace pods (no live Prometheus)."""

from __future__ import annotations

import argparse
from pathlib import Path

from autoscaler.policy.types import GPUAsk
from simulations import record
from simulations.traces import load_generic

MIB = 1024 * 1024


def series(labels: dict[str, str], points: list[tuple[float, float]]) -> dict[str, object]:
    return {"metric": labels, "values": [[t, str(v)] for t, v in points]}


def current(pod: str, device: str, container: str = "0") -> dict[str, str]:
    return {"namespace": "ml", "pod": pod, "container_index": container, "device_uuid": device}


def test_pods_appear_and_disappear_with_their_asks() -> None:
    step = 30.0
    memory = [
        series(current("a", "GPU-1"), [(1000, 4096 * MIB), (1030, 4096 * MIB), (1060, 4096 * MIB)]),
        series(current("b", "GPU-1"), [(1060, 2048 * MIB), (1090, 2048 * MIB)]),
        series(current("b", "GPU-2"), [(1060, 2048 * MIB), (1090, 2048 * MIB)]),
        series(current("c", "GPU-3"), [(1000, float("nan")), (1030, 0)]),  # never allocated
    ]
    cores = [
        series(current("a", "GPU-1"), [(1000, 30), (1030, 30), (1060, 30)]),
        series(current("b", "GPU-1"), [(1060, 50)]),
    ]
    pods = record.to_trace(memory, cores, start=1000.0, step=step)
    assert [(p.key, p.arrival_seconds, p.duration_seconds) for p in pods] == [
        ("ml/a", 0.0, 90.0),
        ("ml/b", 60.0, 60.0),
    ]
    assert pods[0].ask == GPUAsk(gpu_count=1, memory_mib=4096, cores_percent=30)
    assert pods[1].ask == GPUAsk(gpu_count=2, memory_mib=2048, cores_percent=50)


def test_gap_starts_a_new_instance_and_legacy_labels_work() -> None:
    labels = {"podnamespace": "x", "podname": "p", "containeridx": "0", "deviceuuid": "G"}
    memory = [series(labels, [(0, MIB), (15, MIB), (300, MIB)])]
    pods = record.to_trace(memory, [], start=0.0, step=15.0)
    assert [(p.key, p.arrival_seconds, p.duration_seconds) for p in pods] == [
        ("x/p", 0.0, 30.0),
        ("x/p#2", 300.0, 15.0),
    ]


def test_containers_sharing_a_device_add_up() -> None:
    memory = [
        series(current("s", "G", "0"), [(0, 1000 * MIB)]),
        series(current("s", "G", "1"), [(0, 3000 * MIB)]),
    ]
    (pod,) = record.to_trace(memory, [], start=0.0, step=10.0)
    assert pod.ask.memory_mib == 4000 and pod.ask.gpu_count == 1


def test_queries_and_time_parsing() -> None:
    assert record.query("hami_vgpu_memory_allocated_bytes", legacy=False) == (
        "max by (namespace, pod, container_index, device_uuid) (hami_vgpu_memory_allocated_bytes)"
    )
    assert "podname" in record.query("vGPUMemoryAllocated", legacy=True)
    assert record.parse_time("0").timestamp() == 0.0
    assert record.parse_time("2026-01-01T00:00:00").timestamp() == 1767225600.0
    assert record.step_seconds("1m") == 60.0 and record.step_seconds("15") == 15.0


def test_run_writes_a_loadable_trace(tmp_path: Path, monkeypatch: object) -> None:
    memory = [series(current("a", "G"), [(100, MIB), (130, MIB)])]

    def fake_fetch(*_args: object) -> tuple[object, object]:
        return memory, []

    monkeypatch.setattr(record, "fetch", fake_fetch)  # type: ignore[attr-defined]
    out = tmp_path / "t.csv"
    args = argparse.Namespace(
        prometheus="http://unused",
        start=record.parse_time("100"),
        end=record.parse_time("200"),
        step="30s",
        legacy=False,
        output=out,
    )
    assert record.run(args) == 0
    loaded = load_generic(out)
    assert loaded.malformed == () and loaded.pods[0].duration_seconds == 60.0
