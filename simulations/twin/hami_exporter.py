"""The simulated HAMi's Prometheus endpoint: current ``hami_*`` metrics from its allocation table.

Why this module exists: the operator cross-checks utilisation against HAMi's scheduler metrics
(``autoscaler.signals``: ``hami_gpu_memory_limit_bytes``, ``hami_gpu_core_limit_ratio``,
``hami_gpu_memory_allocated_bytes``, ``hami_gpu_core_allocated_ratio``,
``hami_gpu_shared_count`` by ``node``/``device_uuid``/``device_index``), counts a cell as
capacity only once it appears in them, and the bundled dashboards also read the vGPU and
host series. A real Prometheus scraping this endpoint must therefore get the v2.10 names,
labels and units of hami-facts §4 (``zone="vGPU"`` on every series but ``hami_build_info``;
bytes = MiB x 1048576; core "ratios" on the 0-100 scale; the node memory ratio 0-1).

Both HAMi endpoints are served on one ``/metrics``: the scheduler's (:9395) allocation series
and the vGPU monitor's (:9394) usage series. The twin has no real GPUs, so the monitor series
say a busy container uses exactly what it was allocated (memory used = limit, utilisation =
allocated cores, last kernel 0 s ago) and a GPU's host utilisation is the sum over its busy
containers (at most 100). A pod annotated ``sim.cells.kubeswift.io/idle-since`` (unix seconds;
the trace player sets it from the trace's ``usage`` column) stops at that time: its containers
then read 0 % with a last kernel ``now - idle-since`` seconds ago, as an idle pod's do.

``legacy_metrics=True`` is HAMi v2.9+/v2.10 started with ``--legacy-metrics=true``: the
scheduler's camel-case names of v2.8 and earlier (``GPUDeviceMemoryLimit`` ... by ``nodeid`` /
``deviceuuid`` / ``deviceidx``) are served next to the current ones, as a fleet mid-upgrade
exports them and as the operator's legacy reader and the dashboard's legacy panel expect.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from simulations.twin.hami_codec import NodeAllocation, monitor_device_type

if TYPE_CHECKING:
    from simulations.twin.hami import SimulatedHAMi

MIB = 1048576
ZONE = "vGPU"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUILD = {
    "version": "v2.10.0",
    "revision": "gpucellpool-twin",
    "build_date": "",
    "go_version": "",
    "compiler": "",
    "platform": "",
}
_DEVICE = ["node", "device_uuid", "device_index", "device_type", "zone"]
_DEVICE_CORES = ["node", "device_uuid", "device_index", "device_cores", "device_type", "zone"]
_OVERVIEW = [
    "node",
    "device_uuid",
    "device_index",
    "device_cores",
    "device_memory_limit",
    "device_type",
    "zone",
]
_VGPU = ["namespace", "node", "pod", "container_index", "device_uuid", "zone"]
_LEGACY = ["nodeid", "deviceuuid", "deviceidx", "devicetype"]
_LEGACY_CORES = ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype"]
_HOST = ["node", "device_index", "device_uuid", "device_type", "zone"]
_CONTAINER = ["namespace", "pod", "container", "vdevice_index", "device_uuid", "zone"]


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _scheduler_device_metrics(nodes: Iterable[NodeAllocation]) -> list[Metric]:
    mem_limit = _gauge("hami_gpu_memory_limit_bytes", "GPU device memory limit", _DEVICE)
    core_limit = _gauge("hami_gpu_core_limit_ratio", "GPU device core limit", _DEVICE)
    mem_alloc = _gauge(
        "hami_gpu_memory_allocated_bytes", "GPU device memory allocated", _DEVICE_CORES
    )
    shared = _gauge("hami_gpu_shared_count", "Containers sharing the GPU device", _DEVICE)
    core_alloc = _gauge("hami_gpu_core_allocated_ratio", "GPU device cores allocated", _DEVICE)
    overview = _gauge("hami_node_gpu_overview", "GPU device allocation overview", _OVERVIEW)
    mem_ratio = _gauge(
        "hami_node_gpu_memory_allocated_ratio", "GPU device memory allocated ratio", _DEVICE
    )
    for node in nodes:
        for alloc in node.devices:
            d = alloc.device
            base = [node.node, d.uuid, str(d.index)]
            labels = [*base, d.type, ZONE]
            cores = [*base, str(d.devcore), d.type, ZONE]
            mem_limit.add_metric(labels, d.devmem * MIB)
            core_limit.add_metric(labels, d.devcore)
            mem_alloc.add_metric(cores, alloc.used_memory_mib * MIB)
            shared.add_metric(labels, alloc.used_slots)
            core_alloc.add_metric(labels, alloc.used_cores)
            overview.add_metric(
                [*base, str(d.devcore), str(d.devmem), d.type, ZONE], alloc.used_memory_mib * MIB
            )
            if d.devmem > 0:
                mem_ratio.add_metric(labels, alloc.used_memory_mib / d.devmem)
    return [mem_limit, core_limit, mem_alloc, shared, core_alloc, overview, mem_ratio]


def _scheduler_vgpu_metrics(nodes: Iterable[NodeAllocation]) -> list[Metric]:
    mem = _gauge("hami_vgpu_memory_allocated_bytes", "vGPU memory allocated", _VGPU)
    cores = _gauge("hami_vgpu_core_allocated_ratio", "vGPU cores allocated", _VGPU)
    for node in nodes:
        for c in node.containers:
            labels = [c.namespace, node.node, c.pod, str(c.container_index), c.uuid, ZONE]
            mem.add_metric(labels, c.memory_mib * MIB)
            cores.add_metric(labels, c.cores)
    return [mem, cores]


def _monitor_metrics(nodes: Iterable[NodeAllocation], now: float) -> list[Metric]:
    host_mem = _gauge("hami_host_gpu_memory_used_bytes", "Host GPU memory used", _HOST)
    host_util = _gauge("hami_host_gpu_utilization_ratio", "Host GPU utilization", _HOST)
    used = _gauge("hami_vgpu_memory_used_bytes", "vGPU memory used", _CONTAINER)
    limit = _gauge("hami_vgpu_memory_limit_bytes", "vGPU memory limit", _CONTAINER)
    device_mem = _gauge("hami_container_device_memory_bytes", "Container device memory", _CONTAINER)
    util = _gauge(
        "hami_container_device_utilization_ratio", "Container device utilization", _CONTAINER
    )
    kernel = _gauge(
        "hami_container_last_kernel_elapsed_seconds", "Seconds since last kernel", _CONTAINER
    )
    for node in nodes:
        busy_cores: dict[str, int] = {}
        for c in node.containers:
            labels = [c.namespace, c.pod, c.container, str(c.vdevice_index), c.uuid, ZONE]
            for family in (used, limit, device_mem):
                family.add_metric(labels, c.memory_mib * MIB)
            busy = c.busy(now)
            util.add_metric(labels, c.cores if busy else 0)
            kernel.add_metric(labels, 0 if busy else now - (c.idle_since or now))
            busy_cores[c.uuid] = busy_cores.get(c.uuid, 0) + (c.cores if busy else 0)
        for alloc in node.devices:
            d = alloc.device
            labels = [node.node, str(d.index), d.uuid, monitor_device_type(d.type), ZONE]
            host_mem.add_metric(labels, alloc.used_memory_mib * MIB)
            host_util.add_metric(labels, min(busy_cores.get(d.uuid, 0), 100))
    return [host_mem, host_util, used, limit, device_mem, util, kernel]


def _legacy_scheduler_metrics(nodes: Iterable[NodeAllocation]) -> list[Metric]:
    """The v2.8 names and labels (hami-facts §4.1 "Legacy names"), same values and units."""
    mem_limit = _gauge("GPUDeviceMemoryLimit", "Device memory limit", _LEGACY)
    core_limit = _gauge("GPUDeviceCoreLimit", "Device core limit", _LEGACY)
    mem_alloc = _gauge("GPUDeviceMemoryAllocated", "Device memory allocated", _LEGACY_CORES)
    shared = _gauge("GPUDeviceSharedNum", "Containers sharing the device", _LEGACY)
    core_alloc = _gauge("GPUDeviceCoreAllocated", "Device cores allocated", _LEGACY)
    for node in nodes:
        for alloc in node.devices:
            d = alloc.device
            labels = [node.node, d.uuid, str(d.index), d.type]
            mem_limit.add_metric(labels, d.devmem * MIB)
            core_limit.add_metric(labels, d.devcore)
            mem_alloc.add_metric(
                [node.node, d.uuid, str(d.index), str(d.devcore), d.type],
                alloc.used_memory_mib * MIB,
            )
            shared.add_metric(labels, alloc.used_slots)
            core_alloc.add_metric(labels, alloc.used_cores)
    return [mem_limit, core_limit, mem_alloc, shared, core_alloc]


class _Snapshot:
    """A one-shot collector over an allocation table (what ``generate_latest`` iterates)."""

    def __init__(
        self, nodes: Iterable[NodeAllocation], legacy_metrics: bool = False, now: float = 0.0
    ) -> None:
        self._nodes = list(nodes)
        self._legacy = legacy_metrics
        self._now = now

    def collect(self) -> Iterator[Metric]:
        info = _gauge("hami_build_info", "HAMi build information", list(BUILD))
        info.add_metric(list(BUILD.values()), 1)
        yield info
        yield from _scheduler_device_metrics(self._nodes)
        yield from _scheduler_vgpu_metrics(self._nodes)
        yield from _monitor_metrics(self._nodes, self._now)
        if self._legacy:
            yield from _legacy_scheduler_metrics(self._nodes)


def render_metrics(
    nodes: Iterable[NodeAllocation], legacy_metrics: bool = False, now: float = 0.0
) -> str:
    """The Prometheus text exposition of an allocation table at ``now`` (unix seconds)."""
    return generate_latest(_Snapshot(nodes, legacy_metrics, now)).decode()


async def start_hami_exporter(
    hami: SimulatedHAMi, host: str = "127.0.0.1", port: int = 0, legacy_metrics: bool = False
) -> tuple[web.AppRunner, int]:
    """Serve ``/metrics`` for ``hami``; returns the runner (``await runner.cleanup()``) and port.
    ``legacy_metrics``: also the v2.8 names, as ``--legacy-metrics=true`` does."""

    async def text() -> str:
        return hami.metrics_text(legacy_metrics=legacy_metrics)

    return await serve_metrics(text, host, port)


async def serve_metrics(
    text: Callable[[], Awaitable[str]], host: str, port: int
) -> tuple[web.AppRunner, int]:
    """Serve ``/metrics`` (the exposition ``text()`` returns on each scrape) on ``host:port``
    (0: a free port); returns the runner (``await runner.cleanup()``) and the bound port."""

    async def metrics(_: web.Request) -> web.Response:
        body = (await text()).encode()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, int(bound)
