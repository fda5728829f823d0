"""The live operator on the twin, in the two situations where a wrong scale-down costs most.

What these prove, each through the real ``gpucellpool run`` subprocess, the twin (simulated
KubeSwift, kubelet, HAMi and pod lifecycle on the real apiservers) and a real Prometheus:

* a flapping demand (a whole-GPU pod every 10 s, each running 3 s) keeps its cell: no
  scale-down below the demand seen within the stabilisation window before it, each cell created
  once (as many as the peak demand, none re-created after a gap), and the scale-down to zero
  comes once the window has passed after the last pod (the control that the window, not
  chance, held it);
* with Prometheus stopped: the ScalingActive condition says metrics are stale and why, each
  failed read is counted (``gpucell_capacity_scrape_errors_total{reason="demand"}``), a
  pending pod still gets a new cell (its allocation comes from the pods' HAMi annotations),
  and an idle cell is not scaled down however long the outage lasts; when Prometheus is back,
  that idle cell (and only it) is scaled down, and the busy cell's pod is never disturbed.

Times are wall seconds (compression 1): the twin's cells boot in about 3 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.policy.types import GPUAsk
from provisioner.kube import KINDS
from simulations.demo import DemoSpec
from simulations.demo.recorder import Recorder
from simulations.demo.twin_run import POOL, TwinWorld, replay, twin_world
from simulations.harness import Harness
from simulations.simulator.traces import TracePod
from simulations.twin.player import trace_pod_manifest
from simulations.twin.scenario import poll_until
from tests.integration.binary_support import required_binary
from tests.integration.test_loop_helpers import until

pytestmark = pytest.mark.e2e

WINDOW_S = 12.0
WHOLE_GPU = GPUAsk(memory_mib=24576, cores_percent=100)
# Wall time throughout; a 1 s tick and a 3 s boot keep each scenario around a minute.
SPEC = replace(
    DemoSpec(),
    compression=1.0,
    boot_seconds=3.0,
    scale_down_window_seconds=WINDOW_S,
    scale_down_delay_seconds=1.0,
    tick_seconds=1.0,
    max_cells=4,
    stale_after_wall_seconds=3.0,
)
FLAP_PERIOD_S, FLAP_RUN_S, FLAPS = 10.0, 3.0, 4
# Observation slack: both sides of a comparison are seen by the same recorder's watches.
SLACK_S = 2.0


def _scale_downs(rec: Recorder) -> list[tuple[float, int, int]]:
    """(time, from, to) for every decision that lowered the desired count."""
    out, last = [], 0
    for at, _reason, desired in _outcomes(rec):
        if desired < last:
            out.append((at, last, desired))
        last = desired
    return out


def _outcomes(rec: Recorder) -> list[tuple[float, str, int]]:
    """(time, reason, target) of each published decision (and policy memory) change."""
    return [(d.time_seconds, d.reason, d.desired_replicas) for d in rec.decisions]


async def test_flapping_demand_keeps_its_cell_for_the_stabilisation_window(
    harness: Harness, tmp_path: Path
) -> None:
    required_binary("prometheus")
    pods = tuple(
        TracePod(f"flap-{i}", i * FLAP_PERIOD_S, FLAP_RUN_S, WHOLE_GPU) for i in range(FLAPS)
    )
    hours = (FLAPS * FLAP_PERIOD_S) / 3600
    async with twin_world(replace(SPEC, hours=hours), harness=harness, workdir=tmp_path) as w:
        await replay(w, replace(SPEC, hours=hours), pods, to_zero=True)
        rec = w.recorder
        assert rec is not None
    assert len(rec.pods) == FLAPS
    assert all(p.bound is not None and p.ended is not None for p in rec.pods.values())
    downs = _scale_downs(rec)
    print(f"\ndecisions: {_outcomes(rec)}")
    # Every scale-down went to at least the highest demand seen within the window before it:
    # none happened in a gap of the flapping.
    for at, _, to in downs:
        peak = max(
            s.demand_cells for s in rec.samples if at - WINDOW_S + SLACK_S <= s.time_seconds <= at
        )
        assert peak <= to, (at, to, peak, _outcomes(rec))
    # Each cell was made once: the most demand at any time, never re-created after a gap.
    peak_demand = max(s.demand_cells for s in rec.samples)
    assert len(rec.created_guests) == peak_demand, (peak_demand, _outcomes(rec))
    # The control: the window did pass after the last pod, and the pool went back to zero.
    last_end = max(p.ended for p in rec.pods.values() if p.ended is not None)
    final = rec.decisions[-1].desired_replicas
    assert final == 0 and downs and downs[-1][2] == 0, _outcomes(rec)
    assert downs[-1][0] >= last_end + WINDOW_S - SLACK_S, (downs, last_end)


async def test_prometheus_outage_freezes_scale_down_but_not_scale_up(
    harness: Harness, tmp_path: Path
) -> None:
    required_binary("prometheus")
    async with twin_world(SPEC, harness=harness, workdir=tmp_path) as w:
        rec, prometheus = w.recorder, w.prometheus
        assert rec is not None and prometheus is not None
        await _create(w, "a")
        await until(lambda: _running(w, "a") and rec.status().get("readyCells") == 1, 60, "a")
        # Once cell 0 has been Ready for staleAfter the operator asks Prometheus about it; the
        # reading is fresh and no read has failed.
        await _until_async(_asked_and_fresh(w, time.monotonic()), 60, "a fresh reading")
        assert await _failed_reads(w) == 0

        await asyncio.to_thread(prometheus.stop)
        await until(lambda: _condition(rec)[0] == "MetricsStale", 30, "MetricsStale")
        message = _condition(rec)[1]
        assert "prometheus" in message.lower() and "scale-down frozen" in message, message
        assert await _failed_reads(w) >= 1

        # Scale-up still works: b needs a cell of its own; the full cell 0 is known full from
        # the HAMi annotation of a.
        await _create(w, "b")
        await until(lambda: _running(w, "b") and rec.status().get("readyCells") == 2, 60, "b")
        assert rec.status()["desiredReplicas"] == 2
        node_of_b = rec.pods[_name(w, "b")].node

        # Cell 0 goes idle. Nothing is scaled down while Prometheus stays down, for longer than
        # the stabilisation window (and the delay after a scale-up): several decisions, each
        # with a failed read, after the window has passed.
        assert w.twin_workload is not None
        await w.twin_workload.delete(KINDS["Pod"], w.namespace, _name(w, "a"))
        await until(lambda: rec.pods[_name(w, "a")].ended is not None, 30, "a gone")
        window_end = time.monotonic() + WINDOW_S + SPEC.scale_down_delay_seconds
        # The scenario's own time (the outage outlasts the window), not a synchronisation.
        await asyncio.sleep(max(0.0, window_end - time.monotonic()))
        failed_at_window_end = await _failed_reads(w)
        await _until_async(_more_failed_reads(w, failed_at_window_end, 4), 60, "4 failed reads")
        assert rec.status()["desiredReplicas"] == 2
        assert _scale_downs(rec) == [], _outcomes(rec)
        assert _condition(rec)[0] == "MetricsStale"

        # Prometheus back: the idle cell, and only it, is scaled down.
        await prometheus.restart()
        await until(lambda: rec.status().get("desiredReplicas") == 1, 60, "scale-down")
        await until(lambda: len(rec.status().get("cells") or []) == 1, 60, "one cell left")
        cells = rec.status().get("cells") or []
        assert [c.get("nodeName") or c.get("name") for c in cells] == [node_of_b], cells
        assert rec.pods[_name(w, "b")].ended is None, "the busy cell's pod was never disturbed"


# -- helpers ---------------------------------------------------------------------------------


def _name(w: TwinWorld, key: str) -> str:
    return f"{w.label}-{key}"


async def _create(w: TwinWorld, key: str) -> None:
    """A whole-GPU pod of the pool's demand that runs until deleted."""
    pod = TracePod(key, 0.0, 3600.0, WHOLE_GPU)
    manifest = trace_pod_manifest(pod, _name(w, key), w.namespace, labels={"demo": w.label})
    assert w.twin_workload is not None
    await w.twin_workload.create(manifest)


def _running(w: TwinWorld, key: str) -> bool:
    assert w.recorder is not None
    times = w.recorder.pods.get(_name(w, key))
    return times is not None and times.bound is not None and times.ended is None


def _condition(rec: Recorder) -> tuple[str, str]:
    conditions = rec.status().get("conditions") or []
    cond: dict[str, Any] = next((c for c in conditions if c.get("type") == "ScalingActive"), {})
    return str(cond.get("reason", "")), str(cond.get("message", ""))


async def _until_async(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    try:
        await poll_until(check, timeout_s, interval_s=0.25)
    except TimeoutError:
        raise AssertionError(f"{what}: not reached in {timeout_s:g}s") from None


async def _metric(w: TwinWorld, name: str, **labels: str) -> float:
    """The operator's own sample for the demo pool (0 when absent)."""
    async with httpx.AsyncClient(timeout=5.0) as http:
        text = (await http.get(f"{w.operator_url}/metrics")).text
    wanted = {"namespace": w.namespace, "pool": POOL, **labels}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in wanted.items()):
                return float(sample.value)
    return 0.0


async def _failed_reads(w: TwinWorld) -> float:
    return await _metric(w, "gpucell_capacity_scrape_errors_total", reason="demand")


def _asked_and_fresh(w: TwinWorld, ready_at: float) -> Callable[[], Awaitable[bool]]:
    """Cell 0 has been Ready for staleAfter plus a tick, and the reading is fresh."""

    async def check() -> bool:
        settled = time.monotonic() - ready_at >= SPEC.stale_after_wall_seconds + 2.0
        return settled and await _metric(w, "gpucellpool_metrics_fresh") == 1.0

    return check


def _more_failed_reads(w: TwinWorld, base: float, reads: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await _failed_reads(w) >= base + reads

    return check
