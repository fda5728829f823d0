"""The simulated HAMi, pod lifecycle, exporter and trace player on a real workload apiserver.

What these prove: a pod is bound where HAMi's binpack (or spread) puts it, with HAMi's
annotations; a pod that fits nowhere gets PodScheduled=False/Unschedulable with HAMi's reasons,
written once; fractional asks pack onto one GPU until memory runs out; nodeSelector is
honoured; a restarted HAMi rebuilds its allocations from the annotations (and finishes a bind
an earlier pass started); a pod ends after its duration and frees its GPU; the exporter's
``hami_*`` numbers equal the allocation table; the player creates pods at their scaled arrival
times and resumes after a restart without creating anything twice.

Nodes are cluster-scoped and the apiserver is shared by the whole session, so every test
labels its Nodes with its namespace and gives HAMi that label as its node selector.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.policy.types import GPUAsk
from gpucellpool.runtime.clock import SystemClock
from provisioner.kube import JSON, KINDS, Kind, KubeApi, kind_of
from simulations.harness import ClusterEndpoint
from simulations.simulator.engine.clock import VirtualClock
from simulations.simulator.traces.model import TracePod
from simulations.twin import PodLifecycle, TracePlayer, start_hami_exporter
from simulations.twin.pod_lifecycle import DURATION_ANNOTATION
from tests.integration import twin_support
from tests.integration.provisioner_support import RecordingKubeApi
from tests.integration.twin_support import (
    GIB,
    MIB,
    get_pod,
    hami_pod,
    new_hami,
    register_node,
    running,
    scheduled,
    until,
)

api = twin_support.api  # the fixture: a workload client; deletes the test's Nodes afterwards


async def test_fitting_pod_binds_to_the_binpacked_node_with_hami_annotations(
    api: KubeApi, namespace: str
) -> None:
    first = await register_node(api, namespace, "0")
    second = await register_node(api, namespace, "1")
    hami = new_hami(api, namespace)
    await api.create(hami_pod(namespace, "a", 8 * GIB, cores=30))
    await hami.step()
    await api.create(hami_pod(namespace, "b", 4 * GIB, cores=20))
    await hami.step()
    a, b = await get_pod(api, namespace, "a"), await get_pod(api, namespace, "b")
    # Both empty: the tie goes to the first node; then binpack prefers the fuller one.
    assert a["spec"]["nodeName"] == first and b["spec"]["nodeName"] == first
    notes = b["metadata"]["annotations"]
    assert notes["hami.io/vgpu-node"] == first
    assert b["metadata"]["labels"]["hami.io/vgpu-node"] == first
    assert notes["hami.io/vgpu-devices-allocated"] == "GPU-0-0,NVIDIA,4096,20:;"
    assert notes["hami.io/vgpu-devices-to-allocate"] == ";"
    assert notes["hami.io/bind-phase"] == "success"
    assert abs(int(notes["hami.io/vgpu-time"]) - time.time()) < 60
    assert abs(int(notes["hami.io/bind-time"]) - time.time()) < 60
    assert scheduled(b)["status"] == "True"
    usage = hami.allocations()[first].usage()
    assert (usage[0].memory_mib, usage[0].cores_percent, usage[0].slots) == (12 * GIB, 50, 2)
    assert hami.allocations()[second].usage()[0].slots == 0


async def test_spread_policy_takes_the_emptier_node(api: KubeApi, namespace: str) -> None:
    first = await register_node(api, namespace, "0")
    second = await register_node(api, namespace, "1")
    hami = new_hami(api, namespace, policy="spread")
    await api.create(hami_pod(namespace, "a"))
    await hami.step()
    await api.create(hami_pod(namespace, "b"))
    await hami.step()
    a, b = await get_pod(api, namespace, "a"), await get_pod(api, namespace, "b")
    assert (a["spec"]["nodeName"], b["spec"]["nodeName"]) == (first, second)
    await api.create(hami_pod(namespace, "c", 2 * GIB))
    await hami.step()  # first: 8 GiB, second: 8 GiB; spread, tie -> first
    overridden = hami_pod(namespace, "d", 2 * GIB)
    overridden["metadata"]["annotations"] = {"hami.io/node-scheduler-policy": "binpack"}
    await api.create(overridden)
    await hami.step()  # first is fuller (10 GiB): the pod's own binpack takes it
    c, d = await get_pod(api, namespace, "c"), await get_pod(api, namespace, "d")
    assert (c["spec"]["nodeName"], d["spec"]["nodeName"]) == (first, first)


async def test_a_pass_places_its_pods_in_turn_then_binds_them_together(
    api: KubeApi, namespace: str
) -> None:
    # kube-scheduler's scheduling cycle is one pod at a time, its binding cycle asynchronous:
    # every pod of the pass is annotated (placed) before the first Binding is written
    node = await register_node(api, namespace, "0")
    recording = RecordingKubeApi(api)
    hami = new_hami(cast(KubeApi, recording), namespace)
    names = ["a", "b", "c", "d"]
    for name in names:
        await api.create(hami_pod(namespace, name, 2 * GIB, cores=10))
    await hami.step()
    pods = [await get_pod(api, namespace, n) for n in names]
    assert [p["spec"].get("nodeName") for p in pods] == [node] * 4
    assert all(p["metadata"]["annotations"]["hami.io/bind-phase"] == "success" for p in pods)
    order = [(c.verb, c.kind, c.name) for c in recording.calls if c.outcome == "ok"]
    placed = [order.index(("patch", "Pod", n)) for n in names]  # the first patch: /filter's
    bindings = [i for i, (verb, kind, _) in enumerate(order) if kind == "Binding"]
    assert len(bindings) == 4 and max(placed) < min(bindings), order


async def test_pod_that_fits_nowhere_is_unschedulable_with_hami_reasons_written_once(
    workload: ClusterEndpoint, api: KubeApi, namespace: str
) -> None:
    await register_node(api, namespace, "0", gpus=1)
    await register_node(api, namespace, "1", gpus=1)
    recording = RecordingKubeApi(api)
    hami = new_hami(recording, namespace)
    await api.create(hami_pod(namespace, "huge", 30 * GIB))
    await api.create(hami_pod(namespace, "pair", 4 * GIB, gpus=2))
    for _ in range(4):
        await hami.step()
    huge, pair = await get_pod(api, namespace, "huge"), await get_pod(api, namespace, "pair")
    assert not huge["spec"].get("nodeName") and not pair["spec"].get("nodeName")
    cond = scheduled(huge)
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == (
        "0/2 nodes are available: 2 1/1 CardInsufficientMemory. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod. "
        "The pod does not fit any of these nodes even when empty."
    )
    assert scheduled(pair)["message"].startswith(
        "0/2 nodes are available: 2 NodeInsufficientDevice."
    )
    writes = [c for c in recording.of("patch", "Pod") if c.name == "huge"]
    assert len(writes) == 1, writes  # four passes, one status write: only changes are written
    assert "hami.io/vgpu-node" not in (huge["metadata"].get("annotations") or {})


async def test_fractional_pods_pack_one_gpu_until_memory_runs_out(
    api: KubeApi, namespace: str
) -> None:
    node = await register_node(api, namespace, "0", memory_mib=24 * GIB)
    hami = new_hami(api, namespace)
    for i in range(4):
        await api.create(hami_pod(namespace, f"p{i}", 8 * GIB))
        await hami.step()
    pods = [await get_pod(api, namespace, f"p{i}") for i in range(4)]
    assert [p["spec"].get("nodeName") for p in pods[:3]] == [node] * 3
    assert not pods[3]["spec"].get("nodeName")
    assert scheduled(pods[3])["message"] == (
        "0/1 nodes are available: 1 1/1 CardInsufficientMemory. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    device = hami.allocations()[node].devices[0]
    assert (device.used_memory_mib, device.used_slots) == (24 * GIB, 3)


async def test_node_selector_is_honoured(api: KubeApi, namespace: str) -> None:
    await register_node(api, namespace, "0", labels={"zone": "a"})
    b = await register_node(api, namespace, "1", labels={"zone": "b"})
    hami = new_hami(api, namespace)
    await api.create(hami_pod(namespace, "to-b", selector={"zone": "b"}))
    await api.create(hami_pod(namespace, "to-c", selector={"zone": "c"}))
    await hami.step()
    assert (await get_pod(api, namespace, "to-b"))["spec"]["nodeName"] == b
    to_c = await get_pod(api, namespace, "to-c")
    assert not to_c["spec"].get("nodeName")
    assert scheduled(to_c)["message"] == (
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


async def test_restarted_hami_rebuilds_allocations_and_finishes_an_interrupted_bind(
    api: KubeApi, namespace: str
) -> None:
    node = await register_node(api, namespace, "0", memory_mib=24 * GIB)
    first = new_hami(api, namespace)
    for name in ("a", "b"):
        await api.create(hami_pod(namespace, name, 8 * GIB))
    await first.step()
    # A pass that died after /filter's annotations but before the Binding:
    plan = "GPU-0-0,NVIDIA,4096,0:;"
    interrupted = hami_pod(namespace, "c", 4 * GIB)
    interrupted["metadata"]["labels"] = {"hami.io/vgpu-node": node}
    interrupted["metadata"]["annotations"] = {
        "hami.io/vgpu-node": node,
        "hami.io/vgpu-devices-allocated": plan,
        "hami.io/vgpu-devices-to-allocate": plan,
        "hami.io/bind-phase": "allocating",
    }
    await api.create(interrupted)
    restarted = new_hami(api, namespace)
    await api.create(hami_pod(namespace, "d", 8 * GIB))  # 8 + 8 + 4 + 8 > 24: must not fit
    await restarted.step()
    c, d = await get_pod(api, namespace, "c"), await get_pod(api, namespace, "d")
    assert c["spec"]["nodeName"] == node
    assert c["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    assert not d["spec"].get("nodeName")
    assert "CardInsufficientMemory" in scheduled(d)["message"]
    device = restarted.allocations()[node].devices[0]
    assert (device.used_memory_mib, device.used_slots) == (20 * GIB, 3)


SHORT_S = 5.0


async def test_pod_ends_after_its_duration_and_frees_its_gpu(api: KubeApi, namespace: str) -> None:
    node = await register_node(api, namespace, "0")
    hami = new_hami(api, namespace)
    lifecycle = PodLifecycle(api, SystemClock(), namespace)
    # Timed from before "short" exists, so how late this test sees it Running cannot shorten it.
    started = time.monotonic()
    # Long enough that "next" is surely created and found waiting while "short" still runs.
    await api.create(hami_pod(namespace, "short", None, cores=100, duration_s=SHORT_S))
    async with running(hami, lifecycle):

        async def short_running() -> bool:
            pod = await api.get(KINDS["Pod"], namespace, "short")
            return bool((pod or {}).get("status", {}).get("phase") == "Running")

        await until(short_running)
        # Started as a kubelet would: the Binding's PodScheduled=True stays beside Ready.
        assert scheduled(await get_pod(api, namespace, "short"))["status"] == "True"
        await api.create(hami_pod(namespace, "next", None, cores=100, duration_s=60))

        async def next_bound() -> bool:
            pod = await api.get(KINDS["Pod"], namespace, "next")
            return bool((pod or {}).get("spec", {}).get("nodeName"))

        async def next_waiting() -> bool:
            return scheduled(await get_pod(api, namespace, "next")).get("reason") == "Unschedulable"

        await until(next_waiting)  # the whole GPU is taken while "short" runs
        await until(next_bound)
        bound_after = time.monotonic() - started
        assert await api.get(KINDS["Pod"], namespace, "short") is None  # finished and deleted
    assert bound_after >= SHORT_S  # not before "short" ran its duration
    assert (await get_pod(api, namespace, "next"))["spec"]["nodeName"] == node
    assert hami.allocations()[node].devices[0].used_slots == 1


async def test_exporter_serves_the_allocation_table(api: KubeApi, namespace: str) -> None:
    node = await register_node(api, namespace, "0", gpus=2, memory_mib=16 * GIB)
    hami = new_hami(api, namespace)
    await api.create(hami_pod(namespace, "a", 6 * GIB, cores=40))
    await api.create(hami_pod(namespace, "b", 2 * GIB, cores=10, gpus=2))
    await hami.step()
    runner, port = await start_hami_exporter(hami)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
    finally:
        await runner.cleanup()
    samples: dict[tuple[str, str], float] = {}
    vgpu: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != "hami_build_info":
                assert sample.labels["zone"] == "vGPU"
            if sample.labels.get("node") == node and "device_uuid" in sample.labels:
                if sample.name.startswith("hami_vgpu"):
                    vgpu[(sample.name, sample.labels["pod"])] = (
                        vgpu.get((sample.name, sample.labels["pod"]), 0.0) + sample.value
                    )
                else:
                    samples[(sample.name, sample.labels["device_uuid"])] = sample.value
    table = {d.device.uuid: d for d in hami.allocations()[node].devices}
    assert sum(d.used_slots for d in table.values()) == 3
    for uuid, d in table.items():
        assert samples[("hami_gpu_memory_limit_bytes", uuid)] == 16 * GIB * MIB
        assert samples[("hami_gpu_core_limit_ratio", uuid)] == 100
        assert samples[("hami_gpu_memory_allocated_bytes", uuid)] == d.used_memory_mib * MIB
        assert samples[("hami_gpu_core_allocated_ratio", uuid)] == d.used_cores
        assert samples[("hami_gpu_shared_count", uuid)] == d.used_slots
    assert vgpu[("hami_vgpu_memory_allocated_bytes", "a")] == 6 * GIB * MIB
    assert vgpu[("hami_vgpu_memory_allocated_bytes", "b")] == 2 * 2 * GIB * MIB
    assert vgpu[("hami_vgpu_core_allocated_ratio", "b")] == 20


LATE_S = 1.0
"""How late a create may be issued on a loaded machine (the arrivals are 0.5 s apart or more)."""


def trace(arrivals: list[float]) -> list[TracePod]:
    ask = GPUAsk(1, 2 * GIB, None, 10)
    return [TracePod(f"k{i}", at, 50.0, ask) for i, at in enumerate(arrivals)]


class CreateTimes:
    """Wraps a ``KubeApi``; remembers the wall time each Pod create was *issued*."""

    def __init__(self, inner: KubeApi) -> None:
        self.inner = inner
        self.pods: list[tuple[str, float]] = []

    async def create(self, obj: JSON) -> JSON:
        if obj["kind"] == "Pod":
            self.pods.append((obj["metadata"]["name"], time.time()))
        return await self.inner.create(obj)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_player_creates_pods_at_scaled_arrival_times(api: KubeApi, namespace: str) -> None:
    calls = CreateTimes(api)
    pods = trace([100.0, 110.0, 110.0, 130.0])  # speed 20: 0, 0.5, 0.5, 1.5 s
    origin = time.time() + 0.3
    player = TracePlayer(
        cast(KubeApi, calls),
        pods,
        SystemClock(),
        namespace,
        speed=20.0,
        labels={"trial": "t"},
        name_prefix="tp",
        origin=origin,
    )
    await asyncio.wait_for(player.run(), timeout=30)
    assert [name for name, _ in calls.pods] == ["tp-00000", "tp-00001", "tp-00002", "tp-00003"]
    offsets = [at - origin for _, at in calls.pods]
    for got, want in zip(offsets, [0.0, 0.5, 0.5, 1.5], strict=True):
        assert want - 0.01 <= got <= want + LATE_S, offsets  # never early, late only under load
    progress = player.progress()
    assert (progress.created, progress.total, progress.done) == (4, 4, True)
    assert progress.trace_seconds >= 130.0
    pod = await get_pod(api, namespace, "tp-00003")
    assert pod["metadata"]["annotations"][DURATION_ANNOTATION] == "2.500"
    assert pod["metadata"]["labels"]["trial"] == "t"
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": "2048",
        "nvidia.com/gpucores": "10",
    }


async def test_player_resumes_after_a_restart_without_creating_twice(
    api: KubeApi, namespace: str
) -> None:
    # speed 10: 0, 0, 6, 7 s; the third is due long after the first two are recorded, so the
    # first player is surely stopped before it, however late this test sees the record.
    pods = trace([0.0, 0.0, 60.0, 70.0])
    origin = time.time()
    first = CreateTimes(api)
    player = TracePlayer(cast(KubeApi, first), pods, SystemClock(), namespace, 10.0, origin=origin)
    task = asyncio.create_task(player.run())

    async def two_recorded() -> bool:  # the progress record landed (see the player's docstring)
        record = await api.get(kind_of("ConfigMap", "v1"), namespace, "trace-player")
        return ((record or {}).get("data") or {}).get("created") == "2"

    await until(two_recorded)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert player.progress().created == 2  # the third is due 6 s in
    await api.delete(KINDS["Pod"], namespace, "trace-00000", 0)  # finished meanwhile
    second = CreateTimes(api)
    again = TracePlayer(cast(KubeApi, second), pods, SystemClock(), namespace, speed=10.0)
    await asyncio.wait_for(again.run(), timeout=30)
    assert [name for name, _ in second.pods] == ["trace-00002", "trace-00003"]
    late = second.pods[-1][1] - origin
    assert 7.0 - 0.01 <= late <= 7.0 + LATE_S  # still on the first run's timeline
    names = {p["metadata"]["name"] for p in await api.list(KINDS["Pod"], namespace)}
    assert names == {"trace-00001", "trace-00002", "trace-00003"}


@dataclass
class ListCountingKubeApi(RecordingKubeApi):
    """Also counts the lists of bound HAMi pods (the expensive one: every pod HAMi placed), and
    runs ``during`` between the apiserver's answer to such a list and its return (an event
    that arrives while the list is in flight)."""

    bound_lists: int = 0
    during: Callable[[], None] | None = None

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        placed = kind.kind == "Pod" and label_selector == "hami.io/vgpu-node"
        self.bound_lists += placed
        listed = await super().list(kind, namespace, label_selector, field_selector)
        if placed and self.during is not None:
            self.during()
        return listed


async def test_bound_pods_are_listed_once_per_refresh_and_never_double_booked(
    api: KubeApi, namespace: str
) -> None:
    """Between refreshes HAMi places from its cache plus its own bookings (a pass costs no
    list of every placed pod); a freed GPU is seen at the next refresh, never earlier."""
    node = await register_node(api, namespace, "0", memory_mib=24 * GIB)
    counting, clock = ListCountingKubeApi(api), VirtualClock(1000.0)
    hami = new_hami(counting, namespace, clock=clock, refresh_s=1.0)
    await api.create(hami_pod(namespace, "a", 16 * GIB))
    await hami.step()
    await api.create(hami_pod(namespace, "b", 16 * GIB))
    clock.t += 0.5
    await hami.step()  # from the cache: a is booked, so b does not fit
    b = await get_pod(api, namespace, "b")
    assert not b["spec"].get("nodeName")
    assert "1/1 CardInsufficientMemory" in scheduled(b)["message"]
    await api.delete(KINDS["Pod"], namespace, "a", grace_period_s=0)
    clock.t += 0.4
    await hami.step()  # a's GPU is still booked until the refresh
    assert not (await get_pod(api, namespace, "b"))["spec"].get("nodeName")
    assert counting.bound_lists == 1
    clock.t += 0.2
    await hami.step()
    assert (await get_pod(api, namespace, "b"))["spec"]["nodeName"] == node
    assert counting.bound_lists == 2
    assert [c.pod for c in hami.allocations()[node].containers] == ["b"]


async def test_a_pod_the_twins_kubelet_ends_frees_its_gpu_before_the_next_refresh(
    api: KubeApi, namespace: str
) -> None:
    """HAMi's informer drops a pod on its update to a terminal phase: a pod the pod lifecycle
    ends leaves the cache at once (``release``), so the next pass places on its GPU without a
    new list of every placed pod, as the simulator frees a GPU at its pod's end."""
    node = await register_node(api, namespace, "0", memory_mib=24 * GIB)
    counting, clock = ListCountingKubeApi(api), VirtualClock(1000.0)
    hami = new_hami(counting, namespace, clock=clock, refresh_s=3600.0)
    lifecycle = PodLifecycle(api, clock, namespace, on_finished=hami.release)
    await api.create(hami_pod(namespace, "a", 16 * GIB, duration_s=10))
    await hami.step()
    await lifecycle.step()  # started: Running since its bind at t=1000
    await api.create(hami_pod(namespace, "b", 16 * GIB))
    clock.t += 0.5
    await hami.step()
    assert not (await get_pod(api, namespace, "b"))["spec"].get("nodeName")
    clock.t += 10.0
    await lifecycle.step()  # a ran its 10 s: Succeeded, released, deleted
    assert await api.get(KINDS["Pod"], namespace, "a") is None
    await hami.step()
    assert (await get_pod(api, namespace, "b"))["spec"]["nodeName"] == node
    assert counting.bound_lists == 1  # the cache alone: no refresh happened
    assert [c.pod for c in hami.allocations()[node].containers] == ["b"]


async def test_a_refresh_in_flight_during_a_release_does_not_bring_the_pod_back(
    api: KubeApi, namespace: str
) -> None:
    """A list of placed pods in flight when a pod was released may still show it running; the
    release stands until a list asked for after it."""
    node = await register_node(api, namespace, "0", memory_mib=24 * GIB)
    wrapped, clock = ListCountingKubeApi(api), VirtualClock(1000.0)
    hami = new_hami(wrapped, namespace, clock=clock, refresh_s=1.0)
    await api.create(hami_pod(namespace, "a", 16 * GIB))
    await hami.step()
    a = await get_pod(api, namespace, "a")
    await api.create(hami_pod(namespace, "b", 16 * GIB))
    wrapped.during = partial(hami.release, a)  # a ends while the next refresh is in flight
    clock.t += 1.0
    await hami.step()  # the list still shows a running; released, it books nothing
    assert (await get_pod(api, namespace, "b"))["spec"]["nodeName"] == node
    assert [c.pod for c in hami.allocations()[node].containers] == ["b"]
