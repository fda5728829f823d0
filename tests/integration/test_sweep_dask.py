"""A sweep and a ``simulate`` run on a REAL Dask cluster (``dask scheduler`` and two
``dask worker`` processes on 127.0.0.1) give exactly the local results, field by field."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from autoscaler.policy.types import GPUAsk
from gpucellpool.cli import main
from simulations.simulator.distributed import ClusterUnavailable, DaskCluster, InProcess
from simulations.simulator.engine import ProductionPolicy, SimConfig
from simulations.simulator.engine.sim import BootModel
from simulations.simulator.report.compare import compare
from simulations.simulator.sweep import Point, Sweep, run_sweep
from simulations.simulator.traces import TracePod
from tests.integration.dask_support import dask_cluster, stop

HEADER = "arrival_seconds,duration_seconds,gpu_count,memory_mib,memory_percent,cores_percent"


def _trace(folder: Path) -> Path:
    """Two bursts of one-GPU pods: enough to make boots, waits and scale-down matter."""
    rows = [f"{i * 40},{900 + 60 * (i % 7)},1,,50,50" for i in range(12)]
    rows += [f"{4000 + i * 30},{600 + 90 * (i % 5)},1,,100,100" for i in range(10)]
    path = folder / "bursts.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, recursing through dataclasses, mappings and sequences."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return bool(a == b)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with dask_cluster(tmp_path_factory.mktemp("dask")) as running:
        yield running.address, running.client


def _plan(trace: Path) -> Sweep:
    from simulations.simulator.traces.detect import load_trace  # noqa: PLC0415

    pods: tuple[TracePod, ...] = tuple(load_trace(trace, "auto").pods)
    configs = {s: SimConfig(boot=BootModel(sigma=0.5), seed=s) for s in (3, 4)}
    points = (Point((("in_flight", 1),)), Point((("in_flight", 8),)))
    return Sweep({"bursts": {3: pods, 4: pods}}, configs, points, ("cluster-autoscaler",), "pack")


def test_a_sweep_on_the_dask_cluster_equals_the_local_one(
    cluster: tuple[str, Any], tmp_path: Path
) -> None:
    address, client = cluster
    plan = _plan(_trace(tmp_path))
    local = run_sweep(plan, InProcess())
    from distributed import get_task_stream  # noqa: PLC0415

    with get_task_stream(client) as stream:
        remote = run_sweep(plan, DaskCluster(client, address))
    ran_on = {record["worker"] for record in stream.data}
    assert ran_on and ran_on <= set(client.scheduler_info()["workers"])
    # one oracle (both seeds replay the same pods) + 2 seeds x (2 points + 1 peer), on workers
    assert sum(1 for r in stream.data if r["key"].startswith("work-")) == 7
    assert [s.policy for s in remote] == [s.policy for s in local]
    assert len(remote) == 3
    assert same(remote, local)
    # the seeds differ (random boots), so the intervals are real, not single values
    assert any(s["wait_p95_seconds"].high > s["wait_p95_seconds"].low for s in local)


def test_simulate_on_the_dask_cluster_equals_the_local_run(cluster: tuple[str, Any]) -> None:
    address, _client = cluster
    whole = GPUAsk(gpu_count=1, cores_percent=100)
    pods = tuple(TracePod(f"p{i}", 60.0 * i, 1800.0, whole) for i in range(15))
    config = SimConfig(boot=BootModel(sigma=0.5), seed=7)
    policies = {"gpucellpool": ProductionPolicy}
    local = compare(pods, policies, config, show_progress=False)
    remote = compare(pods, policies, config, show_progress=False, scheduler=address)
    assert remote.results[1].waits_seconds  # something was simulated
    assert same(remote, local)


def test_the_sweep_cli_prints_the_same_report_via_the_scheduler(
    cluster: tuple[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, _client = cluster
    trace = _trace(tmp_path)
    argv = ["sweep", "--trace", str(trace), "--in-flight", "1,8", "--seeds", "2"]
    argv += ["--boot-sigma", "0.5"]
    assert main([*argv, "--jobs", "2"]) == 0
    local = capsys.readouterr()
    assert main([*argv, "--scheduler", address, "--report-dir", str(tmp_path / "r")]) == 0
    remote = capsys.readouterr()
    assert f"on dask scheduler {address}" in remote.err
    assert "gpucellpool inflight=1" in remote.out and "gpucellpool inflight=8" in remote.out
    assert remote.out == local.out
    assert {p.name for p in (tmp_path / "r").iterdir()} == {"sweep.md", "sweep.json", "sweep.png"}


def test_the_cluster_is_torn_down_when_the_test_fails(tmp_path: Path) -> None:
    """No orphan: a failure inside the cluster's block still stops every process group."""
    with pytest.raises(RuntimeError, match="a failing test"), dask_cluster(tmp_path, 1) as dask:
        processes = dask.processes
        assert len(processes) == 2 and all(p.poll() is None for p in processes)
        raise RuntimeError("a failing test")
    assert all(p.returncode is not None for p in processes)
    for p in processes:
        with pytest.raises(ProcessLookupError):
            os.killpg(p.pid, 0)  # the whole group is gone, not just its leader


def test_a_scheduler_lost_during_a_run_is_one_clear_error(tmp_path: Path) -> None:
    """The scheduler dies while runs are in flight (a starved or restarted scheduler): the
    sweep fails with one line naming the scheduler and how many runs finished, not a
    traceback from Dask's internals."""
    from distributed import Client  # noqa: PLC0415 (optional extra, as in dask_support)

    with dask_cluster(tmp_path, 1) as dask, ThreadPoolExecutor(1) as caller:
        client = Client(dask.address, timeout=60, set_as_default=False)
        try:
            pool = DaskCluster(client, dask.address)
            running = caller.submit(pool.run, time.sleep, [(120.0,), (120.0,)])
            deadline = time.monotonic() + 60
            while not any(dask.client.processing().values()):  # a run started on the worker
                assert time.monotonic() < deadline, "no run started in 60 s"
                time.sleep(0.1)  # polling the scheduler's state, with a deadline
            stop(dask.processes[0])
            with pytest.raises(ClusterUnavailable) as lost:
                running.result(timeout=60)
        finally:
            client.close()
    message = str(lost.value)
    assert message == message.splitlines()[0]
    assert message.startswith(f"lost the Dask scheduler at {dask.address} with 0 of 2 runs")


def test_a_shared_trace_is_one_key_on_the_cluster(cluster: tuple[str, Any], tmp_path: Path) -> None:
    """A trace window goes to the workers as one object: scattering the tuple of pods itself
    made one key per pod (11,327 for a helios month), which starved a loaded scheduler."""
    from simulations.simulator.traces.detect import load_trace  # noqa: PLC0415

    address, client = cluster
    pods = tuple(load_trace(_trace(tmp_path), "auto").pods)
    before = set(client.who_has())
    shared: Any = DaskCluster(client, address).share(pods)
    assert set(client.who_has()) - before == {shared.key}
    assert DaskCluster(client, address).run(len, [(shared,), (shared,)]) == [len(pods)] * 2
