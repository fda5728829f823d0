"""HAMi DRA mode end to end, and the ``CapacityProviderReady`` reasons, on the real apiservers.

What this proves:

* a pool with ``capacity.hami.mode: DRA`` becomes Ready from the ResourceSlice the twin's
  kubelet plugin publishes (no register annotation anywhere), and writes
  ``status.workloadCapacity`` with mode DRA and the slice's devices, then the allocated claim's
  share; ``CapacityProviderReady`` is ``HAMiDetected``;
* a pod waiting on a HAMi ResourceClaim that no Ready cell can take (the twin plays
  kube-scheduler's DRA plugin and marks it Unschedulable) is demand: ``gpucellpool run`` adds
  one cell, and the twin's scheduler then allocates the claim on that new cell and binds the pod;
* without HAMi's DeviceClass the condition is ``DRADeviceClassMissing`` (and Ready is False for
  it); a cell Node whose register annotation is garbage gives ``RegistrationUnparseable``;
* with ``autoscaling.prometheus`` the pool's allocations are read through a real Prometheus from
  HAMi-DRA's ``hami_dra_*`` series (the twin's HAMi-DRA monitor): ``MetricsAvailable`` is
  True/Fresh naming them, the adapter's reading equals the claim's share, the device-plugin
  names are absent, and with the monitor stopped the condition turns False/Stale;
* scaled down, the pool drains the cell whose pod holds a HAMi claim: under a
  PodDisruptionBudget the cell stays Draining with the pod kept (so it is evicted, never
  deleted), then the pod is evicted, its claim deallocated and the guest and Node removed; the
  other cell's pod and claim are untouched and no cell is added for the evicted pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.policy.types import GPUUsage
from autoscaler.signals.prometheus import PrometheusSource, WallClock
from gpucellpool.runtime.clock import SystemClock
from provisioner.inventory import RESOURCE_CLAIM
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.harness.procs import ManagedProcess
from simulations.twin.hami_dra import SimulatedDRAScheduler, install_device_class, webhook_pod
from simulations.twin.hami_dra_exporter import start_hami_dra_exporter
from simulations.twin.node_agent import NodeFault
from simulations.twin.scenario import Twin, api_for, join_secret, poll_until, swiftguest_pool
from tests.integration import prometheus_support
from tests.integration.provisioner_support import (
    PDB,
    RunningPool,
    apis,  # noqa: F401  (fixture)
    cond,
    pdb,
    running_pool,
    status,
)
from tests.integration.test_loop_helpers import (
    PoolWatch,
    autoscaled_pool,
    client_for,
    condition,
    create_pool,
    decision,
    watch_pool,
)
from tests.integration.test_usage_scale_down import operator, prometheus  # noqa: F401 (fixture)

GIB_24 = 24576


def dra_capacity(pool: JSON, device_class: str = "hami-core-gpu.project-hami.io") -> JSON:
    pool["spec"]["capacity"]["hami"] = {"mode": "DRA", "deviceClassName": device_class}
    return pool


async def _bound_to(api: KubeApi, namespace: str, name: str) -> str:
    pod = await api.get(KINDS["Pod"], namespace, name)
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


async def _submit(
    api: KubeApi,
    namespace: str,
    name: str,
    trial: str,
    memory_mib: int,
    labels: dict[str, str] | None = None,
) -> None:
    claim, pod = webhook_pod(namespace, name, memory_mib, labels={"trial": trial, **(labels or {})})
    await api.create(claim)
    await api.create(pod)


def _provider(s: JSON) -> JSON:
    return next((c for c in s.get("conditions") or [] if c["type"] == "CapacityProviderReady"), {})


async def test_dra_pool_is_ready_from_slices_and_scales_on_a_pending_claim(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    pool = dra_capacity(autoscaled_pool("drs", namespace, "drs"))
    pool["spec"]["autoscaling"]["minReplicas"] = 1
    started = time.monotonic()
    async with dra_scene(infra, workload, namespace, pool) as scene:
        watch, twin_workload = scene.watch, scene.workload
        _, ready = await watch.until(
            lambda s: (
                s.get("readyCells") == 1 and (s.get("workloadCapacity") or {}).get("mode") == "DRA"
            ),
            120,
        )
        print(f"\nDRA pool Ready from its ResourceSlice: {time.monotonic() - started:.1f}s")
        capacity = ready["workloadCapacity"]
        assert capacity["gpuDevices"] == 1
        assert capacity["gpuMemory"]["total"] == "24Gi"
        await watch.until(lambda s: _provider(s).get("reason") == "HAMiDetected", 60)
        node = await twin_workload.get(KINDS["Node"], None, "drs-0")
        annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
        assert "hami.io/node-nvidia-register" not in annotations

        await _submit(twin_workload, namespace, "first", "drs", 16000)
        await poll_until(lambda: _is(twin_workload, namespace, "first", "drs-0"), 60)
        await watch.until(
            lambda s: (
                (s.get("workloadCapacity") or {}).get("gpuMemory", {}).get("allocated") == "16000Mi"
            ),
            60,
        )
        print(f"first claim allocated on drs-0: {time.monotonic() - started:.1f}s")
        await _submit(twin_workload, namespace, "second", "drs", 16000)
        pending_at = time.monotonic()
        await watch.until(lambda s: s.get("desiredReplicas") == 2, 60)
        await watch.until(lambda s: s.get("readyCells") == 2, 120)
        await poll_until(lambda: _is(twin_workload, namespace, "second", "drs-1"), 60)
        print(f"pending claim -> hosted on a new cell: {time.monotonic() - pending_at:.1f}s")
        claim = await twin_workload.get(RESOURCE_CLAIM, namespace, f"{namespace}-second-main")
        assert claim is not None
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [(r["pool"], r["device"]) for r in results] == [("drs-1", "hami-gpu-0")]
        _, settled = await watch.until(
            lambda s: s.get("readyCells") == 2 and decision(s).get("reason") != "ScaledUp", 60
        )
        assert settled["desiredReplicas"] == 2  # both cells busy with their claims: no more


async def _is(api: KubeApi, namespace: str, pod: str, node: str) -> bool:
    return await _bound_to(api, namespace, pod) == node


async def _provider_until(scene: RunningPool, reason: str, timeout_s: float) -> tuple[JSON, JSON]:
    """Reconcile until ``CapacityProviderReady`` has ``reason``: the pool and the condition."""
    done = await scene.converge(
        lambda p: cond(p, "CapacityProviderReady").get("reason") == reason, timeout_s=timeout_s
    )
    assert done is not None
    return done, cond(done, "CapacityProviderReady")


async def test_dra_pool_without_the_device_class_says_so(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    pool = dra_capacity(swiftguest_pool("nodc", namespace, replicas=1), "absent.example.com")
    async with running_pool(apis, workload, pool) as scene:
        scene.twin.nodes.dra = True
        done, provider = await _provider_until(scene, "DRADeviceClassMissing", 60)
        assert provider["status"] == "False"
        assert "absent.example.com" in provider["message"]
        assert cond(done, "Ready")["reason"] == "DRADeviceClassMissing"


async def test_device_plugin_reasons_detected_then_unparseable(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    pool = swiftguest_pool("reg", namespace, replicas=2)
    async with running_pool(apis, workload, pool) as scene:
        scene.twin.nodes.faults["reg-1"] = NodeFault(never_advertise=True)
        done = await scene.converge(
            lambda p: (
                cond(p, "CapacityProviderReady").get("reason") == "HAMiDetected"
                and any(
                    r.get("nodeReady") for r in status(p).get("cells") or [] if r["name"] == "reg-1"
                )
            ),
            timeout_s=90,
        )
        assert cond(done, "CapacityProviderReady")["status"] == "True"
        garbage = {"metadata": {"annotations": {"hami.io/node-nvidia-register": "not,a:record"}}}
        await scene.workload.patch(KINDS["Node"], None, "reg-1", garbage)
        done, provider = await _provider_until(scene, "RegistrationUnparseable", 60)
        assert provider["status"] == "False"
        assert "reg-1" in provider["message"]
        assert cond(done, "Ready")["status"] == "False"


async def test_hami_not_detected_after_half_the_capacity_budget(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    pool = swiftguest_pool("nohami", namespace, replicas=1, capacity_timeout="20s")
    seen: list[str] = []

    def not_detected(p: JSON | None) -> bool:
        reason = cond(p, "CapacityProviderReady").get("reason")
        if reason and (not seen or seen[-1] != reason):
            seen.append(reason)
        return reason == "HAMiNotDetected"

    async with running_pool(apis, workload, pool) as scene:
        scene.twin.nodes.faults["nohami-0"] = NodeFault(never_advertise=True)
        done = await scene.converge(not_detected, timeout_s=90)
        provider = cond(done, "CapacityProviderReady")
        assert provider["status"] == "False"
        assert "nohami-0" in provider["message"]
        assert seen[0] == "AwaitingRegistration"  # inside the grace nothing is known wrong


@dataclass
class DraScene:
    """A DRA pool run by the operator graph with the twin and its DRA scheduler."""

    infra: KubeApi
    workload: KubeApi
    twin: Twin
    watch: PoolWatch


@contextlib.asynccontextmanager
async def dra_scene(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str, pool: JSON
) -> AsyncIterator[DraScene]:
    """``pool`` (a DRA pool) created and run by ``operator`` (loopback Prometheus allowed)."""
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    twin_infra = await api_for(infra.kubeconfig_path)
    twin_workload = await api_for(workload.kubeconfig_path)
    await install_device_class(twin_workload)
    await twin_infra.apply(join_secret(namespace))
    name = pool["metadata"]["name"]
    watch, task = await watch_pool(infra_api, namespace, name)
    twin = Twin(twin_infra, twin_workload, SystemClock(), namespace)
    twin.nodes.dra, twin.nodes.device_memory_mib, twin.nodes.run_pods = True, GIB_24, True
    scheduler = SimulatedDRAScheduler(
        twin_workload, SystemClock(), namespace, f"cells.kubeswift.io/pool={name}"
    )
    sched_task = asyncio.create_task(scheduler.run())
    try:
        async with operator(infra, namespace), twin:
            await create_pool(infra_api, workload, pool)
            yield DraScene(twin_infra, twin_workload, twin, watch)
    finally:
        for t in (task, sched_task):
            t.cancel()
        for t in (task, sched_task):
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for client in (infra_api, workload_api, twin_infra, twin_workload):
            await client.close()


def _available(s: JSON) -> tuple[str, str]:
    c = condition(s, "MetricsAvailable")
    return c.get("status", ""), c.get("reason", "")


async def test_dra_pool_reads_hami_dra_series_through_real_prometheus(
    infra: ClusterEndpoint,
    workload: ClusterEndpoint,
    namespace: str,
    prometheus: tuple[str, Path, ManagedProcess],  # noqa: F811
) -> None:
    url, targets, _ = prometheus
    await prometheus_support.ready(url, 60)
    pool = dra_capacity(autoscaled_pool("drp", namespace, "drp"))
    pool["spec"]["autoscaling"].update(
        {"minReplicas": 1, "prometheus": {"url": url, "staleAfter": "15s"}}
    )
    async with dra_scene(infra, workload, namespace, pool) as scene:
        exporters = [await start_hami_dra_exporter(scene.workload)]
        try:
            targets.write_text(f'[{{"targets": ["127.0.0.1:{exporters[0][1]}"]}}]')
            await scene.watch.until(lambda s: s.get("readyCells") == 1, 120)
            await _submit(scene.workload, namespace, "first", "drp", 16000)
            await poll_until(lambda: _is(scene.workload, namespace, "first", "drp-0"), 60)
            _, fresh = await scene.watch.until(lambda s: _available(s) == ("True", "Fresh"), 90)
            assert "utilization" not in fresh  # HAMi-DRA measures no use: none invented
            async with PrometheusSource(url, stale_after_seconds=15.0, clock=WallClock()) as src:
                share = {"drp-0": (GPUUsage(16000, 30, 1),)}  # webhook_pod's 30 cores

                async def dra_reading() -> Any:
                    return await src.node_gpu_usage(["drp-0"], dra=True)

                reading = await prometheus_support.poll(
                    "the claim's share", dra_reading, lambda r: r.usage_by_node() == share, 60
                )
                assert reading.health.fresh and "hami_dra metrics" in reading.health.detail
                plugin = await src.node_gpu_usage(["drp-0"])  # device-plugin names: none here
                assert not plugin.health.fresh and plugin.nodes == {}
            await exporters.pop()[0].cleanup()  # HAMi-DRA's monitor stops answering
            _, stale = await scene.watch.until(
                lambda s: _available(s) == ("False", "Stale"), 120, after=len(scene.watch.seen)
            )
            message = condition(stale, "MetricsAvailable")["message"]
            assert "HAMi-DRA allocation metrics not fresh" in message and "drp-0" in message
            exporters.append(await start_hami_dra_exporter(scene.workload))
            targets.write_text(f'[{{"targets": ["127.0.0.1:{exporters[0][1]}"]}}]')
            # Fresh again only from drp-0's hami_dra_* series (the pool reads that Node now)
            await scene.watch.until(
                lambda s: _available(s) == ("True", "Fresh"), 120, after=len(scene.watch.seen)
            )
        finally:
            for runner, _ in exporters:
                await runner.cleanup()


async def test_dra_pool_scaled_down_evicts_the_claim_holder_and_releases_its_claim(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    pool = dra_capacity(autoscaled_pool("drn", namespace, "drn"))
    pool["spec"]["autoscaling"].update(
        {
            "minReplicas": 1,
            "scaleDownDelayAfterScaleUp": "0s",
            "drain": {"mode": "Evict"},
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0},
                "scaleDown": {"stabilizationWindowSeconds": 0},
            },
        }
    )
    async with dra_scene(infra, workload, namespace, pool) as scene:
        api, watch = scene.workload, scene.watch
        await watch.until(lambda s: s.get("readyCells") == 1, 120)
        await _submit(api, namespace, "a", "drn", 16000)
        await poll_until(lambda: _is(api, namespace, "a", "drn-0"), 60)
        await _submit(api, namespace, "b", "drn", 16000)  # no room on drn-0: a second cell
        await watch.until(lambda s: s.get("readyCells") == 2, 120)
        await poll_until(lambda: _is(api, namespace, "b", "drn-1"), 60)
        await _submit(api, namespace, "c", "drn", 4000, labels={"app": "evictme"})
        await poll_until(lambda: _is(api, namespace, "c", "drn-0"), 60)
        await api.create(pdb(namespace, 1, {"app": "evictme"}, name="evictme"))

        async def held() -> bool:
            st = ((await api.get(PDB, namespace, "evictme")) or {}).get("status") or {}
            return st.get("currentHealthy") == 1 and st.get("disruptionsAllowed") == 0

        await poll_until(held, 60)
        await api.delete(KINDS["Pod"], namespace, "a", 0)  # c now fits beside b: drn-0 can go
        _, draining = await watch.until(
            lambda s: any(
                c["name"] == "drn-0" and c["phase"] == "Draining" for c in s.get("cells") or []
            ),
            120,
        )
        assert draining["desiredReplicas"] == 1
        assert await _bound_to(api, namespace, "c") == "drn-0"  # the PDB holds the eviction
        await api.delete(PDB, namespace, "evictme")
        await poll_until(
            lambda: _gone(api, KINDS["Pod"], namespace, "c"), 120
        )  # evicted (the node agent finishes the terminating pod)
        claim_c = f"{namespace}-c-main"
        await poll_until(lambda: _released(api, namespace, claim_c), 60)
        await watch.until(
            lambda s: (
                [c["name"] for c in s.get("cells") or []] == ["drn-1"] and s.get("readyCells") == 1
            ),
            120,
        )
        assert await scene.infra.get(KINDS["SwiftGuest"], namespace, "drn-0") is None
        assert await api.get(KINDS["Node"], None, "drn-0") is None
        # nothing lost: b and its claim stay where they were, and no cell came for c
        assert await _bound_to(api, namespace, "b") == "drn-1"
        claim_b = await api.get(RESOURCE_CLAIM, namespace, f"{namespace}-b-main")
        results = (claim_b or {})["status"]["allocation"]["devices"]["results"]
        assert [(r["pool"], r["device"]) for r in results] == [("drn-1", "hami-gpu-0")]
        final = watch.seen[-1][1]
        assert final["desiredReplicas"] == 1


async def _gone(api: KubeApi, kind: Any, namespace: str, name: str) -> bool:
    return await api.get(kind, namespace, name) is None


async def _released(api: KubeApi, namespace: str, name: str) -> bool:
    claim = await api.get(RESOURCE_CLAIM, namespace, name)
    status = (claim or {}).get("status") or {}
    return claim is not None and not status.get("allocation") and not status.get("reservedFor")
