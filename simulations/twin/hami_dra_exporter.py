"""The twin's HAMi-DRA monitor: ``hami_dra_*`` allocation series from ResourceSlices and claims.

Why this module exists: in DRA mode HAMi's scheduler extender is not installed, so the
``hami_gpu_*`` series the device-plugin pools are read from do not exist; HAMi-DRA's monitor
(``:8080``, hami-facts §5) exports the allocations instead. A pool in DRA mode with
``autoscaling.prometheus`` reads those (``autoscaler.signals.hami_metrics.DRA``), so a real
Prometheus scraping the twin must find them, computed from what the twin's kube-scheduler
stand-in (``hami_dra.SimulatedDRAScheduler``) allocated:

* per device of a HAMi ResourceSlice (labels ``node``, ``device_uuid``, ``device_index`` (the
  minor), ``device_name``, ``device_type``): ``hami_dra_gpu_memory_limit_bytes`` (the memory
  capacity), ``hami_dra_gpu_core_limit_ratio`` (cores / 100: 1.0 for a whole card),
  ``hami_dra_gpu_memory_allocated_bytes`` and ``hami_dra_gpu_core_allocated_ratio`` summed over
  the allocated claims' shares of the device;
* per share, with the claim's ``namespace`` and the reserving ``pod``:
  ``hami_dra_vgpu_memory_allocated_bytes`` and ``hami_dra_vgpu_core_allocated_ratio``.

Core ratios are on the 0-1 scale of HAMi-DRA's documented example (not HAMi's 0-100).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from aiohttp import web
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from autoscaler.policy.hami_dra import (
    DEVICE_CLASS,
    FULL_CORES,
    DraDevice,
    claim_allocations,
    slice_devices,
)
from provisioner.inventory import RESOURCE_CLAIM, RESOURCE_SLICE
from provisioner.kube import KubeApi
from simulations.twin.hami_exporter import MIB, serve_metrics

_DEVICE = ["node", "device_uuid", "device_index", "device_name", "device_type"]
_VGPU = ["namespace", "pod", *_DEVICE]


def _device_labels(device: DraDevice) -> list[str]:
    minor = device.name.rsplit("-", 1)[-1]
    return [device.node, device.uuid, minor, device.name, device.model]


def _reserving_pod(claim: Mapping[str, Any]) -> str:
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return next((str(r.get("name")) for r in reserved if r.get("resource") == "pods"), "")


class _Snapshot:
    """A one-shot collector over the slices and claims of one scrape."""

    def __init__(self, slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]]):
        self._slices, self._claims = list(slices), list(claims)

    def collect(self) -> Iterator[Metric]:
        def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        mem_limit = gauge("hami_dra_gpu_memory_limit_bytes", "GPU memory capacity", _DEVICE)
        core_limit = gauge("hami_dra_gpu_core_limit_ratio", "GPU core capacity (0-1)", _DEVICE)
        mem_alloc = gauge("hami_dra_gpu_memory_allocated_bytes", "GPU memory allocated", _DEVICE)
        core_alloc = gauge("hami_dra_gpu_core_allocated_ratio", "GPU cores allocated", _DEVICE)
        vgpu_mem = gauge("hami_dra_vgpu_memory_allocated_bytes", "Share memory", _VGPU)
        vgpu_core = gauge("hami_dra_vgpu_core_allocated_ratio", "Share cores (0-1)", _VGPU)
        devices, _ = slice_devices(self._slices)
        by_name = {(d.node, d.name): d for ds in devices.values() for d in ds}
        used: dict[tuple[str, str], list[int]] = {key: [0, 0] for key in by_name}
        for claim in self._claims:
            meta = claim.get("metadata") or {}
            held = claim_allocations([claim], devices, DEVICE_CLASS)
            for share in (a for shares in held.values() for a in shares):
                device = by_name.get((share.node, share.device))
                if device is None:
                    continue
                total = used[(share.node, share.device)]
                total[0], total[1] = total[0] + share.memory_mib, total[1] + share.cores
                labels = [str(meta.get("namespace")), _reserving_pod(claim)]
                vgpu_mem.add_metric([*labels, *_device_labels(device)], share.memory_mib * MIB)
                vgpu_core.add_metric([*labels, *_device_labels(device)], share.cores / FULL_CORES)
        for key, device in sorted(by_name.items()):
            labels = _device_labels(device)
            mem_limit.add_metric(labels, device.memory_mib * MIB)
            core_limit.add_metric(labels, device.cores / FULL_CORES)
            mem_alloc.add_metric(labels, used[key][0] * MIB)
            core_alloc.add_metric(labels, used[key][1] / FULL_CORES)
        yield from (mem_limit, core_limit, mem_alloc, core_alloc, vgpu_mem, vgpu_core)


def render_dra_metrics(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]]
) -> str:
    """The Prometheus text exposition of HAMi-DRA's monitor for these slices and claims."""
    return generate_latest(_Snapshot(slices, claims)).decode()


async def start_hami_dra_exporter(
    workload: KubeApi, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int]:
    """Serve ``/metrics`` from the workload cluster's slices and claims, read on each scrape;
    returns the runner (``await runner.cleanup()``) and the bound port."""

    async def text() -> str:
        slices = await workload.list(RESOURCE_SLICE)
        claims = await workload.list(RESOURCE_CLAIM)
        return render_dra_metrics(slices, claims)

    return await serve_metrics(text, host, port)
