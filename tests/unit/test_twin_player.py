"""The trace player's pure parts: HAMi limits, the pod manifest, names, timeline, progress."""

from __future__ import annotations

import pytest

from autoscaler.policy.demand import container_ask
from autoscaler.policy.types import GPUAsk
from simulations.simulator.engine.clock import VirtualClock
from simulations.simulator.traces.model import TracePod
from simulations.twin.player import (
    PlayerProgress,
    TracePlayer,
    hami_limits,
    pod_name,
    trace_pod_manifest,
)
from simulations.twin.pod_lifecycle import DURATION_ANNOTATION, duration_of


@pytest.mark.parametrize(
    "ask",
    [
        GPUAsk(1, 8192, None, 30),
        GPUAsk(2, None, 50, 0),
        GPUAsk(1, None, None, 100),
        GPUAsk(4, None, None, 0),
        GPUAsk(1, 100, None, 0),
    ],
)
def test_limits_read_back_as_the_same_ask(ask: GPUAsk) -> None:
    assert container_ask({"limits": hami_limits(ask)}) == ask


def test_manifest_is_a_hami_pod_with_scaled_duration_and_selector() -> None:
    pod = TracePod("k/1", 12.0, 300.0, GPUAsk(1, 4096, None, 20), (("zone", "a"),), (("app", "x"),))
    manifest = trace_pod_manifest(pod, "trace-00001", "ns", speed=60.0, labels={"trial": "t"})
    assert manifest["spec"]["schedulerName"] == "hami-scheduler"
    assert manifest["spec"]["nodeSelector"] == {"zone": "a"}
    assert manifest["metadata"]["labels"] == {
        "app": "x",
        "trial": "t",
        "twin.gpucellpool.io/player": "trace",
    }
    assert manifest["metadata"]["annotations"][DURATION_ANNOTATION] == "5.000"
    assert duration_of(manifest) == 5.0
    assert (
        "nodeSelector"
        not in trace_pod_manifest(TracePod("k", 0.0, 1.0, GPUAsk()), "n", "ns")["spec"]
    )


def test_names_sort_in_arrival_order() -> None:
    assert pod_name("trace", 7, 12) == "trace-00007"
    assert pod_name("t", 7, 1_000_000) == "t-0000007"


def test_timeline_is_relative_to_the_first_arrival_and_scaled() -> None:
    pods = [TracePod(f"k{i}", at, 1.0, GPUAsk()) for i, at in enumerate([130.0, 100.0, 110.0])]
    clock = VirtualClock(1000.0)
    player = TracePlayer(None, pods, clock, "ns", speed=10.0)  # type: ignore[arg-type]
    assert [p.arrival_seconds for p in player.pods] == [100.0, 110.0, 130.0]  # sorted
    assert [player.due_at(i, 1000.0) for i in range(3)] == [1000.0, 1001.0, 1003.0]
    progress = player.progress()
    assert (progress.created, progress.total, progress.trace_seconds) == (0, 3, 100.0)
    with pytest.raises(ValueError, match="speed"):
        TracePlayer(None, pods, clock, "ns", speed=0)  # type: ignore[arg-type]


def test_progress_line() -> None:
    line = PlayerProgress(3, 12, 3725.0, 7200.0).line()
    assert line == "trace 1:02:05 / 2:00:00: 3/12 pods created (25%)"
    assert PlayerProgress(0, 0, 0.0, 0.0).done
