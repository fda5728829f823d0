"""Physical-GPU pre-flight against real ResourceSlices and ResourceClaims (DRA backend).

What this proves: kube-apiserver serves ``resource.k8s.io/v1`` natively (no runtime-config
needed), and a DRA pool asking for 3 cells while the KubeSwift DRA driver's ResourceSlices show
2 free GPUs (one more device has ``vfioReady: false``, one is held by another tenant's allocated
ResourceClaim) creates exactly 2 cells, reports ``PhysicalGPUsAvailable=False/
InsufficientPhysicalGPU`` and ``Progressing`` stalled on the same reason, and never creates a
third guest while the slices stay full (each cell's claim takes its device, played by the
simulated DRA allocator); when the other tenant's claim goes, the third cell follows.
Mirrors ``test_provisioner_inventory.py`` (the Native backend's SwiftGPUNode ledger).
"""

from __future__ import annotations

import asyncio
import contextlib

from provisioner.clock import SystemClock
from provisioner.inventory import RESOURCE_CLAIM, RESOURCE_SLICE
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.reconciler import Reconciler
from simulations.harness import ClusterEndpoint
from simulations.twin.dra import SimulatedDRAAllocator, allocate, claim, resource_slice
from simulations.twin.kubeswift import GuestTimings
from simulations.twin.scenario import Twin, converge, swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    cond,
    ready_with,
    setup_pool,
    status,
)


async def test_dra_three_cells_with_two_free_gpus_creates_two_and_says_why(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api, workload_api = apis
    clock = SystemClock()
    suffix = namespace[-6:]
    slices = [
        resource_slice(f"host-a-{suffix}", f"host-a-{suffix}", devices=2),
        resource_slice(f"host-b-{suffix}", f"host-b-{suffix}", devices=1, vfio_ready=False),
        resource_slice(f"host-c-{suffix}", f"host-c-{suffix}", devices=1),
    ]
    for item in slices:
        await infra_api.create(item)
    # Another tenant's guest holds host-c's only GPU.
    await infra_api.create(claim(namespace, "other-tenant-gpu"))
    await allocate(infra_api, namespace, "other-tenant-gpu", f"host-c-{suffix}", "gpu-0000-01-00-0")
    key = await setup_pool(infra_api, workload, swiftguest_pool("dra", namespace, replicas=3))
    reconciler = Reconciler(infra_api, clock)
    allocator = asyncio.create_task(SimulatedDRAAllocator(infra_api, namespace).run())
    guest_counts: list[int] = []
    try:
        twin = Twin(infra_api, workload_api, clock, namespace)
        # GPU allocation takes a while in KubeSwift (about 5 s measured); the claim is
        # allocated well before the guest reports its GPU, as the scheduler does it first.
        twin.kubeswift.timings = GuestTimings(allocate_s=1.0)
        async with twin:

            async def short_of_gpus(p: JSON | None) -> bool:
                guest_counts.append(len(await infra_api.list(KINDS["SwiftGuest"], namespace)))
                s = status(p)
                return (
                    s.get("readyCells") == 2
                    and cond(p, "PhysicalGPUsAvailable").get("reason") == "InsufficientPhysicalGPU"
                )

            pool = await converge(reconciler, key, short_of_gpus, timeout_s=40)
            for _ in range(10):  # more passes: still no third guest while the slices are full
                await reconciler.reconcile_once(key)
            guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
            claims = await infra_api.list(RESOURCE_CLAIM, namespace)
            # The other tenant's guest goes away (its claim with it): the third cell follows.
            await infra_api.delete(RESOURCE_CLAIM, namespace, "other-tenant-gpu")
            after = await converge(reconciler, key, ready_with(3), timeout_s=40)
    finally:
        allocator.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await allocator
        await reconciler.close()
        for item in slices:
            await infra_api.delete(RESOURCE_SLICE, None, item["metadata"]["name"])
    assert max(guest_counts) == 2 and len(guests) == 2
    allocated = {
        c["metadata"]["name"]: c["status"]["allocation"]["devices"]["results"][0]
        for c in claims
        if (c.get("status") or {}).get("allocation")
    }
    assert set(allocated) == {"other-tenant-gpu", "dra-0-gpu", "dra-1-gpu"}
    assert {r["pool"] for n, r in allocated.items() if n != "other-tenant-gpu"} == {
        f"host-a-{suffix}"
    }
    phys = cond(pool, "PhysicalGPUsAvailable")
    assert phys["status"] == "False" and "no free physical GPU" in phys["message"]
    progressing = cond(pool, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "InsufficientPhysicalGPU")
    assert cond(after, "PhysicalGPUsAvailable")["status"] == "True"
    assert cond(after, "PhysicalGPUsAvailable")["reason"] == "FreeDevices"
