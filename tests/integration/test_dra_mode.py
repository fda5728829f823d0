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
  it); a cell Node whose register annotation is garbage gives ``RegistrationUnparseable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from provisioner.clock import SystemClock
from provisioner.inventory import RESOURCE_CLAIM
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.hami_dra import SimulatedDRAScheduler, install_device_class, webhook_pod
from simulations.twin.node_agent import NodeFault
from simulations.twin.scenario import Twin, api_for, join_secret, poll_until, swiftguest_pool
from tests.integration.provisioner_support import (
    RunningPool,
    apis,  # noqa: F401  (fixture)
    cond,
    running_pool,
    status,
)
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pool,
    decision,
    start_app,
    watch_pool,
)

GIB_24 = 24576


def dra_capacity(pool: JSON, device_class: str = "hami-core-gpu.project-hami.io") -> JSON:
    pool["spec"]["capacity"]["hami"] = {"mode": "DRA", "deviceClassName": device_class}
    return pool


async def _bound_to(api: KubeApi, namespace: str, name: str) -> str:
    pod = await api.get(KINDS["Pod"], namespace, name)
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


async def _submit(api: KubeApi, namespace: str, name: str, trial: str, memory_mib: int) -> None:
    claim, pod = webhook_pod(namespace, name, memory_mib, labels={"trial": trial})
    await api.create(claim)
    await api.create(pod)


def _provider(s: JSON) -> JSON:
    return next((c for c in s.get("conditions") or [] if c["type"] == "CapacityProviderReady"), {})


async def test_dra_pool_is_ready_from_slices_and_scales_on_a_pending_claim(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    twin_infra = await api_for(infra.kubeconfig_path)
    twin_workload = await api_for(workload.kubeconfig_path)
    await install_device_class(twin_workload)
    await twin_infra.apply(join_secret(namespace))
    pool = dra_capacity(autoscaled_pool("dra", namespace, "dra"))
    pool["spec"]["autoscaling"]["minReplicas"] = 1
    app = await start_app(infra, namespace, "solo", provision=True)
    watch, task = await watch_pool(infra_api, namespace, "dra")
    twin = Twin(twin_infra, twin_workload, SystemClock(), namespace)
    twin.nodes.dra, twin.nodes.device_memory_mib = True, GIB_24
    scheduler = SimulatedDRAScheduler(
        twin_workload, SystemClock(), namespace, "cells.kubeswift.io/pool=dra"
    )
    sched_task = asyncio.create_task(scheduler.run())
    try:
        async with twin:
            started = time.monotonic()
            await create_pool(infra_api, workload, pool)
            _, ready = await watch.until(
                lambda s: (
                    s.get("readyCells") == 1
                    and (s.get("workloadCapacity") or {}).get("mode") == "DRA"
                ),
                120,
            )
            print(f"\nDRA pool Ready from its ResourceSlice: {time.monotonic() - started:.1f}s")
            capacity = ready["workloadCapacity"]
            assert capacity["gpuDevices"] == 1
            assert capacity["gpuMemory"]["total"] == "24Gi"
            await watch.until(lambda s: _provider(s).get("reason") == "HAMiDetected", 60)
            node = await twin_workload.get(KINDS["Node"], None, "dra-0")
            annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
            assert "hami.io/node-nvidia-register" not in annotations

            await _submit(twin_workload, namespace, "first", "dra", 16000)
            await poll_until(lambda: _is(twin_workload, namespace, "first", "dra-0"), 60)
            await watch.until(
                lambda s: (
                    (s.get("workloadCapacity") or {}).get("gpuMemory", {}).get("allocated")
                    == "16000Mi"
                ),
                60,
            )
            print(f"first claim allocated on dra-0: {time.monotonic() - started:.1f}s")
            await _submit(twin_workload, namespace, "second", "dra", 16000)
            pending_at = time.monotonic()
            await watch.until(lambda s: s.get("desiredReplicas") == 2, 60)
            await watch.until(lambda s: s.get("readyCells") == 2, 120)
            await poll_until(lambda: _is(twin_workload, namespace, "second", "dra-1"), 60)
            print(f"pending claim -> hosted on a new cell: {time.monotonic() - pending_at:.1f}s")
            claim = await twin_workload.get(RESOURCE_CLAIM, namespace, f"{namespace}-second-main")
            assert claim is not None
            results = claim["status"]["allocation"]["devices"]["results"]
            assert [(r["pool"], r["device"]) for r in results] == [("dra-1", "hami-gpu-0")]
            _, settled = await watch.until(
                lambda s: s.get("readyCells") == 2 and decision(s).get("reason") != "ScaledUp", 60
            )
            assert settled["desiredReplicas"] == 2  # both cells busy with their claims: no more
    finally:
        for t in (task, sched_task):
            t.cancel()
        for t in (task, sched_task):
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await app.stop()
        for client in (infra_api, workload_api, twin_infra, twin_workload):
            await client.close()


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
