"""Measured use end to end: the twin's monitor series through a real Prometheus into the pool.

What this proves, on the real apiservers with the whole operator graph (autoscaler and
provisioner) and the twin (KubeSwift, node agent, HAMi and its exporter): two autoscaled pools
each get a cell for one pod whose GPU work stops a few seconds after it starts
(``sim.cells.kubeswift.io/idle-since``). Both publish ``MetricsAvailable=True`` and a
``status.utilization`` block, and the operator's /metrics shows the measured-use gauges.
Once the pod has launched no kernel for ``usageIdleWindow`` (1m) the ``scaleDownOn: Usage``
pool names its fully allocated cell as the victim and drains it with ``drain.mode: Evict``: a
PodDisruptionBudget holds the pod (the cell stays Draining) until the budget is deleted, then
the pod is evicted and the cell removed. The ``Allocation`` pool reports the same idle cell and
keeps it. Stopping the exporter turns MetricsAvailable False with reason Stale; stopping
Prometheus turns it False with reason Unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpucellpool.operator.app import App
from gpucellpool.runtime.clock import SystemClock
from provisioner.kube import Kind, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.harness.procs import ManagedProcess
from simulations.twin import PodLifecycle, SimulatedHAMi, start_hami_exporter
from simulations.twin.hami_codec import IDLE_SINCE_ANNOTATION
from simulations.twin.pod_lifecycle import DURATION_ANNOTATION
from simulations.twin.scenario import Twin, api_for, join_secret
from tests.integration import prometheus_support
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    condition,
    create_pool,
    decision,
    hami_pod,
    start_app,
    watch_pool,
)
from tests.integration.twin_support import running, until
from webhook.rules.settings import RuleSettings

JSON = dict[str, Any]
PDB = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
IDLE_WINDOW_S = 60.0  # usageIdleWindow's minimum


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Path, ManagedProcess]]:
    """A Prometheus scraping file-configured targets every 0.5 s; (url, targets, process)."""
    with prometheus_support.file_sd_prometheus(tmp_path) as running:
        yield running


def usage_pool(name: str, namespace: str, url: str, scale_down_on: str) -> JSON:
    pool = autoscaled_pool(name, namespace, name)
    pool["spec"]["workloadCluster"]["node"]["labels"]["usage-test"] = namespace
    pool["spec"]["autoscaling"].update(
        {
            "cellShape": {"gpuMemoryMiB": 8192, "gpuCores": 100, "slots": 10},
            "prometheus": {"url": url, "staleAfter": "15s"},
            "scaleDownOn": scale_down_on,
            "usageIdleWindow": "1m",
            "scaleDownDelayAfterScaleUp": "0s",
            "drain": {"mode": "Evict"},
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0},
                "scaleDown": {"stabilizationWindowSeconds": 0},
            },
        }
    )
    return pool


def idle_pod(namespace: str, name: str, idle_since: float) -> JSON:
    pod = hami_pod(namespace, name, name.split("-", maxsplit=1)[0], 8192)  # the twin's 8 GiB GPU
    pod["metadata"]["annotations"] = {
        IDLE_SINCE_ANNOTATION: f"{idle_since:.3f}",
        DURATION_ANNOTATION: "3600",  # PodLifecycle runs it (Running, Ready) for an hour
    }
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


def metrics_available(status: JSON) -> tuple[str, str]:
    cond = condition(status, "MetricsAvailable")
    return cond.get("status", ""), cond.get("reason", "")


def history(watch: Any) -> list[tuple[Any, ...]]:
    """The pool's successive (cells and phases, decision reason, victims), repeats dropped."""
    out: list[tuple[Any, ...]] = []
    for _, s in watch.seen:
        row = (cell_phases(s), decision(s).get("reason"), decision(s).get("victims"))
        if not out or out[-1] != row:
            out.append(row)
    return out


def cell_phases(status: JSON) -> dict[str, str]:
    return {c["name"]: c["phase"] for c in status.get("cells") or []}


@contextlib.asynccontextmanager
async def operator(infra: ClusterEndpoint, namespace: str) -> AsyncIterator[App]:
    app = await start_app(
        infra,
        namespace,
        "usage",
        provision=True,
        rules=RuleSettings(allowed_prometheus_hosts=frozenset({"127.0.0.1"})),
    )
    try:
        yield app
    finally:
        await app.stop()


def gauge(text: str, name: str, namespace: str, pool: str) -> float | None:
    """One pool's sample of a gauge in an exposition, or None."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == name and (labels.get("namespace"), labels.get("pool")) == (
                namespace,
                pool,
            ):
                return float(sample.value)
    return None


async def scrape_operator(app: App) -> str:
    port = app.health.port  # /metrics is served next to the probes
    async with httpx.AsyncClient(timeout=5.0) as client:
        return (await client.get(f"http://127.0.0.1:{port}/metrics")).text


async def test_usage_mode_drains_an_idle_allocated_cell_under_a_pdb(
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    prometheus: tuple[str, Path, ManagedProcess],
) -> None:
    url, targets, process = prometheus
    await prometheus_support.ready(url, 60)
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    twin_infra = await api_for(infra.kubeconfig_path)
    twin_workload: KubeApi = await api_for(workload.kubeconfig_path)
    await twin_infra.apply(join_secret(namespace))
    clock = SystemClock()
    hami = SimulatedHAMi(
        twin_workload, clock, namespace, node_label_selector=f"usage-test={namespace}"
    )
    lifecycle = PodLifecycle(twin_workload, clock, namespace, delete_finished=False)
    runner, port = await start_hami_exporter(hami)
    targets.write_text(f'[{{"targets": ["127.0.0.1:{port}"]}}]')
    use_watch, use_task = await watch_pool(infra_api, namespace, "use")
    alloc_watch, alloc_task = await watch_pool(infra_api, namespace, "alloc")
    exporter_stopped = False
    try:
        async with (
            operator(infra, namespace) as app,
            Twin(twin_infra, twin_workload, clock, namespace),
            running(hami, lifecycle),
        ):
            pdb = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "use-job", "namespace": namespace},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"trial": "use"}}},
            }
            await twin_workload.create(pdb)
            # One pool after the other: each pod lands on its own pool's cell (one HAMi sees
            # both pools' Nodes; the first cell is full once its pod is on it).
            for name, mode in (("use", "Usage"), ("alloc", "Allocation")):
                await create_pool(infra_api, workload, usage_pool(name, namespace, url, mode))
                pod = idle_pod(namespace, f"{name}-job", time.time() + 3)
                await workload_api.create(f"/api/v1/namespaces/{namespace}/pods", pod)

                async def bound(job: str = f"{name}-job", cell: str = f"{name}-0") -> bool:
                    got = await workload_api.get(f"/api/v1/namespaces/{namespace}/pods/{job}")
                    return ((got or {}).get("spec") or {}).get("nodeName") == cell

                await until(bound, timeout_s=120)
            for watch in (use_watch, alloc_watch):
                await watch.until(lambda s: s.get("readyCells") == 1, 120)
                _, fresh = await watch.until(
                    lambda s: (
                        metrics_available(s) == ("True", "Fresh")
                        and (s.get("utilization") or {}).get("pods") == 1
                    ),
                    90,
                )
                util = fresh["utilization"]
                assert util["gpus"] == 1 and util["gpuUtilizationPercent"] == 0, util

            async def pdb_holds() -> bool:
                pdb = await twin_workload.get(PDB, namespace, "use-job")
                st = (pdb or {}).get("status") or {}
                return st.get("currentHealthy") == 1 and st.get("disruptionsAllowed") == 0

            await until(pdb_holds, timeout_s=30)
            started = time.monotonic()
            # Usage: the idle pod's cell becomes the victim; Evict is held by the PDB.
            _, down = await use_watch.until(
                lambda s: decision(s).get("victims") == ["use-0"], IDLE_WINDOW_S + 90
            )
            waited = time.monotonic() - started
            assert down["utilization"]["idlePods"] == 1
            # the original's window anchor: written with the scale-down that removes a served cell
            assert down.get("lastScaleDownTime", "~") <= decision(down)["time"], down
            assert down["utilization"]["idleCells"] == ["use-0"]
            try:
                await use_watch.until(lambda s: cell_phases(s).get("use-0") == "Draining", 60)
            except AssertionError as exc:
                stuck = await workload_api.get(f"/api/v1/namespaces/{namespace}/pods/use-job")
                events = await workload_api.get(f"/api/v1/namespaces/{namespace}/events")
                infra_events = await infra_api.get(f"/api/v1/namespaces/{namespace}/events")
                notes = [
                    (e.get("reason"), e.get("message") or e.get("note"))
                    for e in ((events or {}).get("items") or [])
                    + ((infra_events or {}).get("items") or [])
                ]
                raise AssertionError(
                    f"use pool history: {history(use_watch)}; pod: {stuck}; events: {notes}"
                ) from exc
            held = await workload_api.get(f"/api/v1/namespaces/{namespace}/pods/use-job")
            assert held is not None and held["metadata"].get("deletionTimestamp") is None
            await _assert_pdb_holds(workload_api, namespace, use_watch)
            await twin_workload.delete(PDB, namespace, "use-job")
            await use_watch.until(lambda s: not s.get("cells"), 90, after=len(use_watch.seen))
            assert await workload_api.get(f"/api/v1/namespaces/{namespace}/pods/use-job") is None
            # Allocation: the same idle cell is reported, and kept.
            _, kept = await alloc_watch.until(
                lambda s: (s.get("utilization") or {}).get("idleCells") == ["alloc-0"], 30
            )
            assert kept["desiredReplicas"] == 1 and cell_phases(kept) == {"alloc-0": "Ready"}
            assert decision(kept).get("reason") != "ScaledDown" and "lastScaleDownTime" not in kept
            text = await scrape_operator(app)
            assert gauge(text, "gpucellpool_metrics_available", namespace, "alloc") == 1
            assert gauge(text, "gpucellpool_idle_cells", namespace, "alloc") == 1
            assert gauge(text, "gpucellpool_idle_pods", namespace, "alloc") == 1
            assert gauge(text, "gpucellpool_measured_utilization_ratio", namespace, "alloc") == 0
            # The monitor goes quiet: Stale. Prometheus goes away: Unreachable.
            await runner.cleanup()
            exporter_stopped = True
            stale = lambda s: metrics_available(s) == ("False", "Stale")  # noqa: E731
            await alloc_watch.until(stale, 90, after=len(alloc_watch.seen))
            process.stop()
            gone = lambda s: metrics_available(s) == ("False", "Unreachable")  # noqa: E731
            await alloc_watch.until(gone, 90, after=len(alloc_watch.seen))
            assert alloc_watch.seen[-1][1]["desiredReplicas"] == 1  # nothing scaled down
            print(f"\nUsage victim named {waited:.1f}s after both pools read fresh")
    finally:
        for task in (use_task, alloc_task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if not exporter_stopped:
            await runner.cleanup()
        for client in (infra_api, workload_api, twin_infra, twin_workload):
            await client.close()


async def _assert_pdb_holds(workload_api: Any, namespace: str, watch: Any) -> None:
    """For a few seconds of drain attempts the pod stays and the cell stays Draining."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        pod = await workload_api.get(f"/api/v1/namespaces/{namespace}/pods/use-job")
        assert pod is not None and pod["metadata"].get("deletionTimestamp") is None
        last = watch.seen[-1][1]
        assert cell_phases(last).get("use-0") == "Draining", last
        await asyncio.sleep(0.5)  # polling interval of an observation window, not a sync
