"""Physical-GPU pre-flight against the SwiftGPUNode ledger (Native backend).

What this proves: a pool asking for 3 cells while KubeSwift's ledger has 2 free GPUs (one more
GPU sits on a node whose VFIO is not ready, one is already allocated) creates exactly 2 cells,
reports ``PhysicalGPUsAvailable=False/InsufficientPhysicalGPU`` and ``Progressing`` stalled on
the same reason, and never creates a third guest while the ledger stays full; freeing a GPU in
the ledger lets the third cell come.
"""

from __future__ import annotations

from typing import Any

from provisioner.clock import SystemClock
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.gpu_ledger import SWIFT_GPU_NODE, ledger_node
from simulations.twin.scenario import Twin, converge, swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    cond,
    gpu_pod,
    ready_with,
    setup_pool,
    status,
)


async def _ledger(api: KubeApi, node: JSON) -> None:
    await api.create({k: v for k, v in node.items() if k != "status"})
    await api.patch(SWIFT_GPU_NODE, None, node["metadata"]["name"], node, status=True)


def _native_pool(name: str, namespace: str, replicas: int) -> JSON:
    pool = swiftguest_pool(name, namespace, replicas=replicas)
    pool["spec"]["cell"]["gpu"] = {
        "count": 1,
        "backend": "Native",
        "native": {"gpuProfileRef": {"name": "gtx1080"}},
    }
    return pool


async def test_three_cells_with_two_free_gpus_creates_two_and_says_why(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    clock = SystemClock()
    suffix = namespace[-6:]
    ledger = [
        ledger_node(f"host-a-{suffix}", gpus=2),
        ledger_node(f"host-b-{suffix}", gpus=1, vfio_ready=False),
        ledger_node(f"host-c-{suffix}", gpus=1, allocated=1),
    ]
    for node in ledger:
        await _ledger(infra_api, node)
    key = await setup_pool(infra_api, workload, _native_pool("inv", namespace, 3))
    reconciler = Reconciler(infra_api, clock)
    guest_counts: list[int] = []
    try:
        async with Twin(infra_api, workload_api, clock, namespace):

            async def short_of_gpus(p: JSON | None) -> bool:
                guest_counts.append(len(await infra_api.list(KINDS["SwiftGuest"], namespace)))
                s = status(p)
                return (
                    s.get("readyCells") == 2
                    and cond(p, "PhysicalGPUsAvailable").get("reason") == "InsufficientPhysicalGPU"
                )

            pool = await converge(reconciler, key, short_of_gpus, timeout_s=40)
            for _ in range(10):  # more passes: still no third guest while the ledger is full
                await reconciler.reconcile_once(key)
            guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
            # A GPU comes free (another tenant's guest went away): the third cell follows.
            c = ledger[2]["metadata"]["name"]
            freed: dict[str, Any] = {"status": {"gpus": [{"allocated": False}]}}
            await infra_api.patch(SWIFT_GPU_NODE, None, c, freed, status=True)
            after = await converge(reconciler, key, ready_with(3), timeout_s=40)
    finally:
        await reconciler.close()
        for node in ledger:
            await infra_api.delete(SWIFT_GPU_NODE, None, node["metadata"]["name"])
    assert max(guest_counts) == 2 and len(guests) == 2
    phys = cond(pool, "PhysicalGPUsAvailable")
    assert phys["status"] == "False" and "no free physical GPU" in phys["message"]
    progressing = cond(pool, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "InsufficientPhysicalGPU")
    assert cond(after, "PhysicalGPUsAvailable")["status"] == "True"
    assert cond(after, "PhysicalGPUsAvailable")["reason"] == "FreeDevices"


async def test_capacity_available_follows_hami_allocations(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    clock = SystemClock()
    key = await setup_pool(infra_api, workload, swiftguest_pool("cap", namespace, replicas=1))
    reconciler = Reconciler(infra_api, clock)
    try:
        async with Twin(infra_api, workload_api, clock, namespace):
            pool = await converge(reconciler, key, ready_with(1), timeout_s=30)
            free = cond(pool, "CapacityAvailable")
            # HAMi allocated the whole GPU (8192 MiB, 100 %) to one pod on the cell.
            pod = gpu_pod(namespace, "hog", "cap-0")
            plan = "GPU-x,NVIDIA,8192,100:;"
            pod["metadata"]["annotations"] = {"hami.io/vgpu-devices-allocated": plan}
            await workload_api.create(pod)

            def saturated(p: JSON | None) -> bool:
                return cond(p, "CapacityAvailable").get("reason") == "Saturated"

            full = await converge(reconciler, key, saturated, timeout_s=20)
    finally:
        await reconciler.close()
    assert (free["status"], free["reason"]) == ("True", "CapacityFree")
    assert free["message"] == "0/8192 MiB, 0/100% cores allocated"
    assert cond(full, "CapacityAvailable")["status"] == "False"
    assert cond(full, "CapacityAvailable")["message"] == "8192/8192 MiB, 100/100% cores allocated"
