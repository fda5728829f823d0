"""``trace record``: Prometheus range results -> generic trace pods (no live Prometheus).

The live recording (the operator on the twin, a real Prometheus) is
tests/e2e/test_trace_record_twin.py.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import pytest

from autoscaler.policy.types import GPUAsk
from simulations.simulator import record
from simulations.simulator.traces import load_generic

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


def test_run_writes_a_loadable_trace(
    tmp_path: Path, monkeypatch: object, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = [series(current("a", "G"), [(100, MIB), (130, MIB)])]

    def fake_fetch(*_args: object) -> tuple[object, object, object]:
        return memory, [], []

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
    assert "warning: no gpucellpool_pending_pod_first_seen_timestamp_seconds" in (
        capsys.readouterr().err
    )


# -- pending demand (the operator's gpucellpool_pending_pod_first_seen_timestamp_seconds) -----


def waiting(pod: str, gpus: int = 1, memory: str = "", cores: str = "100") -> dict[str, str]:
    return {
        "namespace": "pools",  # the pool's namespace (the operator's label), not the pod's
        "pool": "p",
        "pod_namespace": "ml",
        "pod": pod,
        "gpus": str(gpus),
        "memory_mib": memory,
        "memory_percent": "",
        "cores_percent": cores,
    }


def test_a_pod_that_waited_arrives_when_it_went_pending_not_when_it_got_a_gpu() -> None:
    step = 10.0
    memory = [series(current("w", "G1"), [(1300 + 10 * i, 24576 * MIB) for i in range(6)])]
    cores = [series(current("w", "G1"), [(1300 + 10 * i, 100) for i in range(6)])]
    # Pending from 1040 (seen first at 1042) until its cell came at 1300.
    pending = [series(waiting("w"), [(1050 + 10 * i, 1042.0) for i in range(25)])]
    result = record.recording(memory, cores, pending, start=1000.0, end=2000.0, step=step)
    (pod,) = result.pods
    assert (pod.key, pod.arrival_seconds, pod.duration_seconds) == ("ml/w", 42.0, 60.0)
    assert pod.ask == GPUAsk(gpu_count=1, memory_mib=24576, cores_percent=100)
    assert (result.pending_series, result.waited, result.never_ran) == (1, 1, 0)
    # The allocation-only recording (no pending series) has it arrive at its start: 258 s late.
    (old,) = record.to_trace(memory, cores, start=1000.0, step=step)
    assert old.arrival_seconds == 300.0 and old.duration_seconds == 60.0


def test_pods_that_never_ran_are_kept_with_an_estimated_duration() -> None:
    step = 10.0
    ran = [
        series(current(name, "G1"), [(100 + 10 * i, 1024 * MIB) for i in range(n)])
        for name, n in (("r1", 3), ("r2", 5), ("r3", 9))
    ]
    same_ask = waiting("late", memory="1024", cores="0")
    other_ask = waiting("big", gpus=4)
    pending = [
        series(same_ask, [(500, 495.0), (510, 495.0)]),  # still pending at the range's end
        series(other_ask, [(600, 600.0)]),  # deleted while pending
    ]
    result = record.recording(ran, [], pending, start=0.0, end=520.0, step=step)
    by_key = {p.key: p for p in result.pods}
    # Same ask as the served pods: their median run (50 s); another ask: median of all (50 s).
    assert by_key["ml/late"].arrival_seconds == 495.0
    assert by_key["ml/late"].duration_seconds == 50.0
    assert by_key["ml/late"].ask == GPUAsk(memory_mib=1024, cores_percent=0)
    assert by_key["ml/big"].ask == GPUAsk(gpu_count=4, cores_percent=100)
    assert result.never_ran == 2 and result.waited == 0
    # Nothing served in the range: the rest of the range from its arrival.
    alone = record.recording([], [], pending[:1], start=0.0, end=700.0, step=step)
    assert [(p.key, p.duration_seconds) for p in alone.pods] == [("ml/late", 205.0)]


def test_a_restart_splits_one_wait_and_the_earliest_first_seen_wins() -> None:
    step = 10.0
    memory = [series(current("w", "G"), [(400, MIB), (410, MIB)])]
    pending = [
        series(waiting("w"), [(100, 95.0), (110, 95.0)]),  # the old leader
        series(waiting("w"), [(300, 290.0), (310, 290.0)]),  # the new one saw it at 290
    ]
    result = record.recording(memory, [], pending, start=0.0, end=500.0, step=step)
    assert [(p.key, p.arrival_seconds, p.duration_seconds) for p in result.pods] == [
        ("ml/w", 95.0, 20.0)
    ]


def test_each_instance_of_a_name_gets_the_wait_before_it() -> None:
    step = 10.0
    memory = [series(current("w", "G"), [(100, MIB), (110, MIB), (500, MIB)])]
    pending = [
        series(waiting("w"), [(60, 55.0), (70, 55.0)]),
        series(waiting("w"), [(300, 298.0), (400, 298.0)]),  # the same name, recreated
    ]
    pods = record.to_trace(memory, [], start=0.0, step=step, pending=pending)
    assert [(p.key, p.arrival_seconds, p.duration_seconds) for p in pods] == [
        ("ml/w", 55.0, 20.0),
        ("ml/w#2", 298.0, 10.0),
    ]


def test_malformed_pending_series_are_skipped_and_named() -> None:
    bad: list[dict[str, object]] = [
        series({"pod_namespace": "ml", "pod": "", "gpus": "1"}, [(0, 5.0)]),
        series({**waiting("x"), "gpus": "0"}, [(0, 5.0)]),
        series({**waiting("y"), "memory_percent": "150"}, [(0, 5.0)]),
        series({**waiting("z"), "cores_percent": "²"}, [(0, 5.0)]),
        {"metric": waiting("nan"), "values": [[0, "NaN"], ["bad", "3"]]},  # no usable sample
    ]
    good = series(waiting("ok"), [(0, 5.0)])
    result = record.recording([], [], [*bad, good], start=0.0, end=100.0, step=10.0)
    assert [p.key for p in result.pods] == ["ml/ok"]
    assert len(result.skipped) == 4
    assert "pod_namespace and pod labels are required" in result.skipped[0]
    assert "gpus='0'" in result.skipped[1]
    assert "memory_percent='150' is not a whole number 1..100" in result.skipped[2]
    assert "cores_percent" in result.skipped[3]
    lines = record.summary(result)
    assert lines[-1].startswith("0 pods waited") and "skipped" in lines[0]


def test_without_pending_series_the_recording_is_allocation_only() -> None:
    memory = [series(current("a", "G"), [(100, MIB), (130, MIB)])]
    result = record.recording(memory, [], [], start=0.0, end=200.0, step=30.0)
    assert result.pods == record.to_trace(memory, [], start=0.0, step=30.0)
    assert result.pending_series == 0
    assert "under-states the demand" in record.summary(result)[-1]


def test_long_ranges_are_cut_into_windows_prometheus_accepts_and_joined() -> None:
    step = 30.0
    parts = record.windows(0.0, 7 * 86400.0, step)  # a week at 30 s: 20,161 points
    assert len(parts) == 3 and parts[0] == (0.0, (record.MAX_POINTS - 1) * step)
    assert all(b - a <= (record.MAX_POINTS - 1) * step for a, b in parts)
    assert all(nxt[0] == prev[1] + step for prev, nxt in itertools.pairwise(parts))
    assert parts[-1][1] == 7 * 86400.0
    assert record.windows(0.0, 60.0, step) == [(0.0, 60.0)]
    joined = record.merge(
        [
            [series(current("a", "G"), [(0, 1.0)])],
            [series(current("a", "G"), [(30, 2.0)]), series(current("b", "G"), [(30, 1.0)])],
        ]
    )
    assert [(s["metric"]["pod"], len(s["values"])) for s in joined] == [("a", 2), ("b", 1)]
    assert record.pending_query() == (
        "min by (pod_namespace, pod, gpus, memory_mib, memory_percent, cores_percent) "
        "(gpucellpool_pending_pod_first_seen_timestamp_seconds)"
    )
