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

from provisioner.inventory import RESOURCE_CLAIM, RESOURCE_SLICE
from provisioner.kube import KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.dra import SimulatedDRAAllocator, allocate, claim, resource_slice
from simulations.twin.kubeswift import GuestTimings
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    assert_stalled_then_freed,
    ready_with,
    running_pool,
    short_of_gpus,
)


async def test_dra_three_cells_with_two_free_gpus_creates_two_and_says_why(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
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
    pool_obj = swiftguest_pool("dra", namespace, replicas=3)
    # GPU allocation takes a while in KubeSwift (about 5 s measured); the claim is allocated
    # well before the guest reports its GPU, as the scheduler does it first.
    timings = GuestTimings(allocate_s=1.0)
    allocator = asyncio.create_task(SimulatedDRAAllocator(infra_api, namespace).run())
    guest_counts: list[int] = []
    try:
        async with running_pool(apis, workload, pool_obj, guest_timings=timings) as run:
            short = short_of_gpus(infra_api, namespace, guest_counts)
            pool = await run.converge(short, timeout_s=40)
            await run.passes(10)  # more passes: still no third guest while the slices are full
            guests = await infra_api.list(KINDS["SwiftGuest"], namespace)
            claims = await infra_api.list(RESOURCE_CLAIM, namespace)
            # The other tenant's guest goes away (its claim with it): the third cell follows.
            await infra_api.delete(RESOURCE_CLAIM, namespace, "other-tenant-gpu")
            after = await run.converge(ready_with(3), timeout_s=40)
    finally:
        allocator.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await allocator
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
    assert_stalled_then_freed(pool, after)
