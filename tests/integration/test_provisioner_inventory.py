"""Physical-GPU pre-flight against the SwiftGPUNode ledger (Native backend).

What this proves: a pool asking for 3 cells while KubeSwift's ledger has 2 free GPUs (one more
GPU sits on a node whose VFIO is not ready, one is already allocated) creates exactly 2 cells,
reports ``PhysicalGPUsAvailable=False/InsufficientPhysicalGPU`` and ``Progressing`` stalled on
the same reason, and never creates a third guest while the ledger stays full; freeing a GPU in
the ledger lets the third cell come. ``status.physicalCapacity`` says the same in numbers (PCI
devices held, the ledger's free count, the model HAMi reports). And HAMi's view of the Ready
cells lands in ``status.workloadCapacity`` (bytes / percent quantities), following allocations,
with no reconcile error or failed capacity read counted on the way.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from gpucellpool.operator.metrics import OperatorMetrics
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.gpu_ledger import SWIFT_GPU_NODE, ledger_node
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    assert_stalled_then_freed,
    cond,
    gpu_pod,
    ready_with,
    running_pool,
    short_of_gpus,
    status,
)

GTX = "NVIDIA GeForce GTX 1080"  # the twin's HAMi device type


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
    infra_api = apis[0]
    suffix = namespace[-6:]
    ledger = [
        ledger_node(f"host-a-{suffix}", gpus=2),
        ledger_node(f"host-b-{suffix}", gpus=1, vfio_ready=False),
        ledger_node(f"host-c-{suffix}", gpus=1, allocated=1),
    ]
    for node in ledger:
        await _ledger(infra_api, node)
    guest_counts: list[int] = []
    try:
        async with running_pool(apis, workload, _native_pool("inv", namespace, 3)) as run:
            short = short_of_gpus(infra_api, namespace, guest_counts)
            pool = await run.converge(short, timeout_s=40)
            await run.passes(10)  # more passes: still no third guest while the ledger is full
            guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
            # A GPU comes free (another tenant's guest went away): the third cell follows.
            c = ledger[2]["metadata"]["name"]
            freed: dict[str, Any] = {"status": {"gpus": [{"allocated": False}]}}
            await infra_api.patch(SWIFT_GPU_NODE, None, c, freed, status=True)
            after = await run.converge(ready_with(3), timeout_s=40)
    finally:
        for node in ledger:
            await infra_api.delete(SWIFT_GPU_NODE, None, node["metadata"]["name"])
    assert max(guest_counts) == 2 and len(guests) == 2
    assert_stalled_then_freed(pool, after)
    # one PCI device per cell; the ledger is full both times (the freed GPU went to cell 3)
    assert status(pool)["physicalCapacity"] == {"gpus": 2, "freeGPUsInCluster": 0, "model": GTX}
    assert status(after)["physicalCapacity"] == {"gpus": 3, "freeGPUsInCluster": 0, "model": GTX}


async def test_capacity_available_follows_hami_allocations(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    reg = CollectorRegistry()
    pool_json = swiftguest_pool("cap", namespace, 1)
    async with running_pool(apis, workload, pool_json, metrics=OperatorMetrics(reg)) as run:
        pool = await run.converge(ready_with(1), timeout_s=30)
        free = cond(pool, "CapacityAvailable")
        # HAMi allocated the whole GPU (8192 MiB, 100 %) to one pod on the cell.
        pod = gpu_pod(namespace, "hog", "cap-0")
        plan = "GPU-x,NVIDIA,8192,100:;"
        pod["metadata"]["annotations"] = {"hami.io/vgpu-devices-allocated": plan}
        await run.workload.create(pod)

        def saturated(p: JSON | None) -> bool:
            return cond(p, "CapacityAvailable").get("reason") == "Saturated"

        full = await run.converge(saturated, timeout_s=20)
    assert (free["status"], free["reason"]) == ("True", "CapacityFree")
    assert free["message"] == "0/8192 MiB, 0/100% cores allocated"
    assert cond(full, "CapacityAvailable")["status"] == "False"
    assert cond(full, "CapacityAvailable")["message"] == "8192/8192 MiB, 100/100% cores allocated"
    before, after = status(pool)["workloadCapacity"], status(full)["workloadCapacity"]
    assert before.pop("lastObserved") <= after.pop("lastObserved")
    idle = {"total": "8Gi", "allocated": "0", "available": "8Gi"}
    cores = {"total": "100", "allocated": "0", "available": "100"}
    assert before == {
        "provider": "HAMi",
        "mode": "DevicePlugin",
        "gpuDevices": 1,
        "homogeneous": True,
        "gpuMemory": idle,
        "gpuCompute": cores,
        "byModel": [{"model": GTX, "devices": 1, "memory": idle, "compute": cores}],
    }
    assert after["gpuMemory"] == {"total": "8Gi", "allocated": "8Gi", "available": "0"}
    assert after["gpuCompute"] == {"total": "100", "allocated": "100", "available": "0"}
    assert status(full)["physicalCapacity"]["gpus"] == 1
    labels = {"namespace": namespace, "pool": "cap"}
    assert reg.get_sample_value("gpucell_reconcile_errors_total", labels) == 0
    for reason in ("capacity", "inventory"):
        errors = reg.get_sample_value(
            "gpucell_capacity_scrape_errors_total", {**labels, "reason": reason}
        )
        assert errors == 0, reason
