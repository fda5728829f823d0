"""``run_twin``: the real operator against the twin, replaying a compressed trace.

Why this module exists: the demo, the fidelity test and benchmark, and the scenario tests
(``twin_world`` + ``replay``, driven step by step) all need the same live world, started and
torn down the same way: the harness's two real apiservers, the simulated KubeSwift, kubelet
and HAMi (with its ``hami_*`` exporter) and pod lifecycle, a real Prometheus scraping the
exporter and the operator, the real operator as a ``gpucellpool run`` subprocess, a trace
player, and a recorder. Everything started here is stopped here, in reverse order, whatever
happens (no process, task, port or cell Node is left behind, so a shared harness stays clean).

The operator runs as a subprocess, not in-process: that is the shipped command with its own
event loop (and GIL), so the twin's controllers, the player and the recorder cannot delay its
decisions; its latencies are the ones a user would see.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpucellpool.kube.rest import RestClient
from gpucellpool.runtime.clock import SystemClock
from provisioner.fsm.identity import POOL_ID_LABEL, PoolIdentity
from provisioner.kube import KINDS, KubeApi
from simulations.demo.config import DemoSpec, compressed_pods, pool_manifest
from simulations.demo.fidelity_dump import dump_if_asked
from simulations.demo.panels import PanelQuery, series_counts
from simulations.demo.prometheus import Prometheus
from simulations.demo.recorder import Recorder
from simulations.demo.twin_records import Snapshot
from simulations.harness import ClusterEndpoint, Harness
from simulations.harness.procs import ManagedProcess, free_port
from simulations.simulator.traces import TracePod

POOL = "demo"
TRACE_PREFIX = "trace"  # the player names the trace's pods trace-00000, trace-00001, ...
SAMPLE_S = 0.25
TWIN_POLL_S = 0.1
# Seconds of a twin boot not spent in KubeSwift's address delay: allocate + run, the kubelet's
# join and HAMi's advertise delays, their polls and the provisioner seeing the Ready Node.
BOOT_OVERHEAD_S = 1.2

Progress = Callable[[Snapshot, int], None]


@dataclass
class TwinResult:
    """What one twin run measured (times in compressed seconds from the replay's start)."""

    spec: DemoSpec
    pods: tuple[TracePod, ...]
    recorder: Recorder
    end_seconds: float
    wall_seconds: float
    cpu_seconds: dict[str, float]
    namespace: str
    panels: dict[PanelQuery, int]  # dashboard query -> series with data during the run


@dataclass
class TwinWorld:
    """The live pieces of one run, so teardown can find them all (``twin_world`` yields it)."""

    workdir: Path
    namespace: str
    label: str = ""  # the demand label's value: pods with ``demo=<label>`` are the pool's demand
    operator_url: str = ""  # the operator's probes and plain /metrics
    infra: RestClient | None = None
    workload: RestClient | None = None
    twin_infra: KubeApi | None = None
    twin_workload: KubeApi | None = None
    operator: ManagedProcess | None = None
    prometheus: Prometheus | None = None
    exporter: Any = None
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    recorder: Recorder | None = None


async def _clients(world: TwinWorld, harness: Harness) -> None:
    from gpucellpool.kube.rest import client_from_kubeconfig  # noqa: PLC0415
    from simulations.twin.scenario import api_for  # noqa: PLC0415

    async def rest(endpoint: ClusterEndpoint) -> RestClient:
        import yaml  # noqa: PLC0415

        text = await asyncio.to_thread(endpoint.kubeconfig_path.read_text)
        return await client_from_kubeconfig(yaml.safe_load(text))

    world.infra, world.workload = await rest(harness.infra), await rest(harness.workload)
    world.twin_infra = await api_for(harness.infra.kubeconfig_path)
    world.twin_workload = await api_for(harness.workload.kubeconfig_path)


async def _secrets(world: TwinWorld, harness: Harness) -> None:
    from simulations.twin.scenario import join_secret, kubeconfig_secret  # noqa: PLC0415

    assert world.twin_infra is not None
    text = await asyncio.to_thread(harness.workload.kubeconfig_path.read_text)
    await world.twin_infra.apply(kubeconfig_secret(world.namespace, text))
    await world.twin_infra.apply(join_secret(world.namespace))


def _controllers(world: TwinWorld, spec: DemoSpec) -> list[Any]:
    """The simulated KubeSwift, kubelet, HAMi and pod lifecycle for the demo namespace."""
    from simulations.twin.hami import SimulatedHAMi  # noqa: PLC0415
    from simulations.twin.kubeswift import GuestTimings, SimulatedKubeSwift  # noqa: PLC0415
    from simulations.twin.node_agent import SimulatedNodeAgent  # noqa: PLC0415
    from simulations.twin.pod_lifecycle import PodLifecycle  # noqa: PLC0415

    assert world.twin_infra is not None and world.twin_workload is not None
    clock, ns = SystemClock(), world.namespace
    # HAMi's --node-label-selector: this world's cells only, whatever else the (possibly shared)
    # workload cluster holds.
    cells_only = _cell_selector(world)
    address = max(0.0, spec.wall(spec.boot_seconds) - BOOT_OVERHEAD_S)
    timings = GuestTimings(allocate_s=0.2, run_s=0.3, address_s=address)
    hami = SimulatedHAMi(
        world.twin_workload, clock, ns, poll_s=TWIN_POLL_S, node_label_selector=cells_only
    )
    return [
        SimulatedKubeSwift(world.twin_infra, clock, ns, timings=timings, poll_s=TWIN_POLL_S),
        SimulatedNodeAgent(
            world.twin_infra,
            world.twin_workload,
            clock,
            ns,
            join_s=0.2,
            advertise_s=0.2,
            lease_renew_s=5.0,
            device_memory_mib=24576,
            split_count=10,
            poll_s=TWIN_POLL_S,
            run_pods=True,
        ),
        hami,
        PodLifecycle(
            world.twin_workload,
            clock,
            ns,
            poll_s=TWIN_POLL_S,
            start_pods=False,
            on_finished=hami.release,
        ),
    ]


def _cell_selector(world: TwinWorld) -> str:
    """The label selector of the demo pool's cell Nodes in the workload cluster."""
    return f"{POOL_ID_LABEL}={PoolIdentity(world.namespace, POOL).pool_id}"


def _operator(world: TwinWorld, kubeconfig: Path, spec: DemoSpec) -> tuple[ManagedProcess, int]:
    """``gpucellpool run`` for the demo namespace, probes and /metrics on a loopback port."""
    port = free_port()
    argv = [
        sys.executable, "-m", "gpucellpool.cli", "run",
        f"--kubeconfig={kubeconfig}", f"--namespace={world.namespace}",
        f"--lease-namespace={world.namespace}", "--identity=demo",
        "--health-host=127.0.0.1", f"--health-port={port}",
        f"--tick={spec.wall(spec.tick_seconds):g}", "--log-level=WARNING",
        "--allowed-prometheus-host=127.0.0.1",  # the twin's Prometheus is on loopback
    ]  # fmt: skip
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return ManagedProcess("operator", argv, world.workdir / "operator.log", env), port


async def _until_ready(url: str, process: ManagedProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if not process.running():
                raise RuntimeError(f"operator exited:\n{process.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.2)  # polling a readiness probe, with a deadline
    raise TimeoutError(f"{url} not ready in {timeout_s:g}s:\n{process.log_tail()}")


async def _start(world: TwinWorld, harness: Harness, spec: DemoSpec) -> None:
    """Everything up to (not including) the replay; sets the demand label value."""
    from simulations.twin.hami_exporter import start_hami_exporter  # noqa: PLC0415

    for endpoint in harness.endpoints:
        await asyncio.to_thread(endpoint.create_namespace, world.namespace)
    await _clients(world, harness)
    await _secrets(world, harness)
    controllers = _controllers(world, spec)
    world.tasks += [asyncio.create_task(c.run(), name=type(c).__name__) for c in controllers]
    # With --legacy-metrics (HAMi v2.9+), as a fleet mid-upgrade runs it: the dashboards'
    # HAMi <= 2.8 panel and the operator's legacy reader then have series too.
    world.exporter, exporter_port = await start_hami_exporter(controllers[2], legacy_metrics=True)
    world.operator, port = _operator(world, harness.infra.kubeconfig_path, spec)
    world.operator_url = f"http://127.0.0.1:{port}"
    targets = {"hami": [f"127.0.0.1:{exporter_port}"], "gpucellpool": [f"127.0.0.1:{port}"]}
    world.prometheus = await Prometheus.start(world.workdir / "prometheus", targets)
    await _until_ready(f"http://127.0.0.1:{port}/readyz", world.operator)
    world.label = label = secrets.token_hex(4)
    assert world.infra is not None and world.workload is not None
    manifest = pool_manifest(spec, POOL, world.namespace, ("demo", label), world.prometheus.url)
    await world.infra.create(
        f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{world.namespace}/gpucellpools", manifest
    )
    world.recorder = Recorder(
        world.infra,
        world.workload,
        world.namespace,
        POOL,
        node_selector=_cell_selector(world),
        # a decision change more than two ticks after a cell turned Ready answered a window
        # or a tick, not the boot (a 1 h demo measured 530 trace s from a scale-down)
        boot_reaction_max_s=2 * spec.wall(spec.tick_seconds),
    )
    await world.recorder.start()
    await _first_decision(world.recorder)


async def _first_decision(rec: Recorder, timeout_s: float = 60.0) -> None:
    """The operator has synced the workload cluster and decided there is nothing to do yet."""
    deadline = time.monotonic() + timeout_s
    while (rec.status().get("lastDecision") or {}).get("reason") != "Idle":
        if time.monotonic() > deadline:
            raise TimeoutError(f"no decision for the demo pool in {timeout_s:g}s")
        await asyncio.sleep(0.1)  # the recorder's watch fills the status; polled with a deadline


async def _teardown(world: TwinWorld) -> None:
    """Reverse order; every step runs even if an earlier one failed."""
    for task in world.tasks:
        task.cancel()
    for task in world.tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if world.recorder is not None:
        await world.recorder.stop()
    for proc in (world.operator, world.prometheus):
        if proc is not None:
            await asyncio.to_thread(proc.stop)
    if world.exporter is not None:
        await world.exporter.cleanup()
    with contextlib.suppress(Exception):
        await _delete_cell_nodes(world)
    for client in (world.infra, world.workload, world.twin_infra, world.twin_workload):
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()


async def _delete_cell_nodes(world: TwinWorld) -> None:
    """Nodes are cluster-scoped: a cell Node left behind would be another run's free capacity
    (or take its cell's name) on a shared workload cluster."""
    if world.twin_workload is None:
        return
    for node in await world.twin_workload.list(KINDS["Node"], label_selector=_cell_selector(world)):
        await world.twin_workload.delete(KINDS["Node"], None, str(node["metadata"]["name"]))


def _settled(rec: Recorder, player: asyncio.Task[Any], to_zero: bool) -> bool:
    """The replay is over: every pod created and ended (and the pool back at zero cells)."""
    snap = rec.samples[-1] if rec.samples else None
    return (
        player.done()
        and snap is not None
        and snap.pods_pending + snap.pods_running == 0
        and (snap.cells == 0 or not to_zero)
    )


async def replay(
    world: TwinWorld,
    spec: DemoSpec,
    pods: tuple[TracePod, ...],
    *,
    progress: Progress | None = None,
    to_zero: bool = True,
) -> float:
    """Play ``pods`` (labelled as the pool's demand) and wait until the pool settled (or the
    horizon passed); returns the end, in seconds since the replay started."""
    from simulations.twin.player import TracePlayer  # noqa: PLC0415

    rec = world.recorder
    assert rec is not None and world.twin_workload is not None
    player = TracePlayer(
        world.twin_workload, pods, SystemClock(), world.namespace,
        speed=1.0, labels={"demo": world.label}, name_prefix=TRACE_PREFIX,
    )  # fmt: skip
    rec.restart_clock()
    play = asyncio.create_task(player.run(), name="demo:player")
    world.tasks += [play, asyncio.create_task(rec.sample_every(SAMPLE_S), name="demo:sampler")]
    deadline = spec.horizon_seconds * 1.5 + 30.0
    while not _settled(rec, play, to_zero) and rec.now() < deadline:
        if play.done() and play.exception() is not None:
            raise RuntimeError("trace player failed") from play.exception()
        if progress is not None:
            progress(rec.samples[-1], len(pods))
        await asyncio.sleep(SAMPLE_S)  # the progress line's refresh, not a synchronisation
    return rec.now()


def _cpu(pid: int | None) -> float:
    """User + system CPU seconds of a live process (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


@contextlib.asynccontextmanager
async def _harness(given: Harness | None, workdir: Path) -> AsyncIterator[Harness]:
    if given is not None:
        yield given
        return
    started = await asyncio.to_thread(Harness.start, workdir / "harness")
    try:
        yield started
    finally:
        await asyncio.to_thread(started.stop)


@contextlib.asynccontextmanager
async def twin_world(
    spec: DemoSpec, *, harness: Harness | None = None, workdir: Path | None = None
) -> AsyncIterator[TwinWorld]:
    """The live world of ``spec`` with its pool created and first decided (Idle), the replay
    not started; everything in it is stopped on exit (scenario tests drive it themselves)."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="gpucellpool-demo-"))
    world = TwinWorld(workdir, f"demo-{secrets.token_hex(3)}")
    async with _harness(harness, workdir) as live:
        try:
            await _start(world, live, spec)
            yield world
        finally:
            await _teardown(world)


async def run_twin(
    spec: DemoSpec,
    *,
    harness: Harness | None = None,
    workdir: Path | None = None,
    progress: Progress | None = None,
    to_zero: bool = True,
) -> TwinResult:
    """Replay ``spec``'s compressed trace through the real operator on the twin.

    ``harness``: reuse running apiservers (tests); else one is started and stopped here.
    ``to_zero``: after the last pod, wait for the scale-down to zero (else stop there). After
    the replay, before teardown, every dashboard query is run against the twin's Prometheus.
    With ``GPUCELLPOOL_FIDELITY_DUMP=<dir>`` the run's fidelity dump is written there
    (``simulations.demo.fidelity_dump``; ``gpucellpool fidelity-diff`` reads it).
    """
    pods = compressed_pods(spec)
    started, cpu0 = time.monotonic(), time.process_time()
    async with twin_world(spec, harness=harness, workdir=workdir) as world:
        end = await replay(world, spec, pods, progress=progress, to_zero=to_zero)
        assert world.prometheus is not None
        panels = await series_counts(world.prometheus, world.namespace, POOL)
        cpu = {
            "operator": _cpu(world.operator.pid if world.operator else None),
            "prometheus": _cpu(world.prometheus.process.pid if world.prometheus else None),
        }
    assert world.recorder is not None
    cpu["demo process (twin, player, recorder)"] = time.process_time() - cpu0
    wall = time.monotonic() - started
    result = TwinResult(spec, pods, world.recorder, end, wall, cpu, world.namespace, panels)
    dump_if_asked(result)  # with GPUCELLPOOL_FIDELITY_DUMP set (docs/simulation.md)
    return result
