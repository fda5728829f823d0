"""``gpucellpool trace record`` against the twin's real Prometheus keeps the demand, not the load.

What this proves, through the real ``gpucellpool run`` subprocess on the twin (simulated
KubeSwift, kubelet, HAMi and its exporter on the real apiservers) and a real Prometheus
scraping the exporter and the operator (``twin_world``): a short trace whose burst is bigger
than the pool may grow (``maxReplicas`` 3 for 7 pods) makes most pods wait, for a cold boot or
for another pod to end. Recording that range with the shipped command (``gpucellpool trace
record``, a subprocess) gives back the same pods with the same asks, the same demand
(GPU x seconds) within 5 %, and arrivals at the times the pods went pending (from the
operator's ``gpucellpool_pending_pod_first_seen_timestamp_seconds``), within a few seconds of
the original. The control: the allocation-only recording of the very same range (what
``trace record`` wrote before the pending series existed) has every waiting pod arrive when it
got its GPU, its wait later.

Times are wall seconds (compression 1); the replay lasts about two and a half minutes.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.policy.types import GPUAsk
from simulations.demo import DemoSpec
from simulations.demo.twin_run import TwinWorld, replay, twin_world
from simulations.harness import Harness
from simulations.simulator import record
from simulations.simulator.traces import TracePod, load_generic
from simulations.simulator.traces.model import sort_pods
from simulations.twin.player import CONFIG_MAP, pod_name
from simulations.twin.scenario import poll_until
from tests.integration.binary_support import required_binary

pytestmark = pytest.mark.e2e

WHOLE = GPUAsk(memory_mib=24576, cores_percent=100)
HALF = GPUAsk(memory_mib=12288, cores_percent=50)
# One pod warms the first cell; a burst of six (four whole GPUs, two halves sharing one) then
# needs five more cells where the pool may add two: most pods wait.
TRACE = sort_pods(
    [
        TracePod("warm", 0.0, 45.0, WHOLE),
        *(TracePod(f"burst-{i}", 10.0 + i, 36.0 + 3 * i, WHOLE) for i in range(4)),
        *(TracePod(f"half-{i}", 12.0, 40.0, HALF) for i in range(2)),
    ]
)
SPEC = replace(
    DemoSpec(),
    compression=1.0,
    hours=60.0 / 3600,
    boot_seconds=6.0,
    scale_down_window_seconds=30.0,
    scale_down_delay_seconds=5.0,
    tick_seconds=1.0,
    max_cells=3,
    stale_after_wall_seconds=5.0,
)
STEP = "1s"  # the twin's Prometheus scrapes every second
DEMAND_TOLERANCE = 0.05
# A pod's pending series starts when the operator's watch shows it (debounce 0.15 s) and is
# scraped within a second; a loaded machine adds to that.
ARRIVAL_SLACK_S = 3.0
WAITED_S = 6.0  # pods that waited at least this long are the ones whose arrival is checked


def demand_gpu_seconds(pods: tuple[TracePod, ...] | list[TracePod]) -> float:
    return sum(p.ask.gpu_count * p.duration_seconds for p in pods)


async def test_recorded_trace_replays_the_demand_with_pending_arrivals(
    harness: Harness, tmp_path: Path
) -> None:
    required_binary("prometheus")
    async with twin_world(SPEC, harness=harness, workdir=tmp_path) as w:
        begin = time.time() - 1.0  # the recorded range: from just before the replay
        await replay(w, SPEC, TRACE, to_zero=False)
        await _until_scraped_gone(w)
        end = time.time() + 1.0
        origin = await _player_origin(w)
        out = tmp_path / "recorded.csv"
        log = await _record_with_the_cli(w, begin, end, out)
        assert w.prometheus is not None
        since, until = record.parse_time(f"{begin}"), record.parse_time(f"{end}")
        memory, cores, _ = await asyncio.to_thread(
            record.fetch, w.prometheus.url, since, until, STEP, False
        )
        rec = w.recorder
        assert rec is not None
    loaded = load_generic(out)
    assert loaded.malformed == (), loaded.malformed
    prefix = f"{w.namespace}/"
    recorded = {p.key.removeprefix(prefix): p for p in loaded.pods}
    names = [pod_name("trace", i, len(TRACE)) for i in range(len(TRACE))]
    # The same pods (one instance each, no pod that never ran), with the same asks.
    assert sorted(recorded) == sorted(names), (sorted(recorded), log)
    assert {n: recorded[n].ask for n in names} == {
        n: p.ask for n, p in zip(names, TRACE, strict=True)
    }
    # The demand: GPU x seconds within 5 %.
    original, replayed = demand_gpu_seconds(TRACE), demand_gpu_seconds(list(recorded.values()))
    print(f"\ndemand: original {original:.1f} GPU-s, recorded {replayed:.1f} GPU-s")
    assert abs(replayed - original) <= DEMAND_TOLERANCE * original, (original, replayed)

    # Arrivals: when each pod went pending, not when it got a GPU.
    allocation_only = {
        p.key.removeprefix(prefix): p for p in record.to_trace(memory, cores, start=begin, step=1.0)
    }
    waits = {n: _waited(rec, n) for n in names}
    waited = [n for n in names if waits[n] >= WAITED_S]
    assert len(waited) >= 4, waits  # the burst made pods wait (the scenario did its job)
    errors, late = [], []
    for i, name in enumerate(names):
        truth = origin - begin + TRACE[i].arrival_seconds
        errors.append(abs(recorded[name].arrival_seconds - truth))
        if name in waited:
            late.append(allocation_only[name].arrival_seconds - truth)
            assert allocation_only[name].arrival_seconds > recorded[name].arrival_seconds
            assert late[-1] >= waits[name] - ARRIVAL_SLACK_S, (name, late[-1], waits[name])
    median_late = statistics.median(late)
    print(f"arrival error (pending-based): max {max(errors):.2f} s; allocation-only: the")
    print(f"{len(waited)} waiting pods arrive {median_late:.1f} s late (median)")
    assert max(errors) <= ARRIVAL_SLACK_S, errors
    assert "pods waited (arrival = first seen pending)" in log, log


def _waited(rec: object, name: str) -> float:
    """Seconds from the pod's creation to its binding, as the demo recorder's watch saw them."""
    times = rec.pods[name]  # type: ignore[attr-defined]
    assert times.bound is not None, f"{name} never ran"
    return float(times.bound - times.created)


async def _until_scraped_gone(w: TwinWorld) -> None:
    """Prometheus has scraped the end of every allocation (the range must include it)."""
    assert w.prometheus is not None
    prometheus = w.prometheus
    selector = f'{{namespace="{w.namespace}"}}'

    async def gone() -> bool:
        return not await prometheus.query(f"hami_vgpu_memory_allocated_bytes{selector}")

    await poll_until(gone, timeout_s=60.0, interval_s=0.5)


async def _player_origin(w: TwinWorld) -> float:
    """The wall time the trace player put the trace's time 0 at (its restart record)."""
    assert w.twin_workload is not None
    config = await w.twin_workload.get(CONFIG_MAP, w.namespace, "trace-player")
    assert config is not None
    return float(config["data"]["origin"])


async def _record_with_the_cli(w: TwinWorld, begin: float, end: float, out: Path) -> str:
    """``gpucellpool trace record`` over the range, as a user runs it; its stderr."""
    assert w.prometheus is not None
    argv = [
        sys.executable, "-m", "gpucellpool.cli", "trace", "record",
        f"--prometheus={w.prometheus.url}", f"--start={begin}", f"--end={end}",
        f"--step={STEP}", f"--output={out}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout=120.0)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    return text
