"""Simulated DRA allocation for KubeSwift guests: the ResourceSlices' devices, taken by claims.

Why this module exists: a DRA pool's physical-GPU pre-flight counts the devices the KubeSwift
DRA driver publishes in ``ResourceSlices`` (driver ``gpu.kubeswift.io``) minus those named by
allocated ``ResourceClaims``. In a real cluster the claim is minted from the guest's
``resourceClaimTemplateName`` for its launcher pod and allocated by kube-scheduler; it is
garbage-collected with the pod. The simulated KubeSwift does not do that (it stamps the guest's
status only), so a live run would never see a GPU taken. This controller plays scheduler and
garbage collector for the guests of one namespace:

* for every DRA SwiftGuest (``spec.gpuResourceClaim``) not being deleted: a ResourceClaim
  ``<guest>-gpu`` (label ``swift.kubeswift.io/guest=<guest>``; request ``gpu``, exactly one
  device of the template's DeviceClass) allocated on the status subresource to a usable device
  no other claim holds (``status.allocation.devices.results[]``: request, driver, pool,
  device); no free device leaves it unallocated until one frees;
* a claim whose guest is gone is deleted (its device returns to the pool).

Only what the pre-flight reads is simulated: no CEL selectors, no ``reservedFor``, no node
selector on the allocation, and a template's own request name is not read (always ``gpu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.inventory import RESOURCE_CLAIM, RESOURCE_SLICE
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.twin.common import PollingController

DRIVER = "gpu.kubeswift.io"
DEVICE_CLASS = "kubeswift-vfio-gpu"
GUEST_LABEL = "swift.kubeswift.io/guest"
REQUEST = "gpu"


def resource_slice(
    name: str, node: str, devices: int, vfio_ready: bool = True, generation: int = 1
) -> JSON:
    """One node's slice as the KubeSwift DRA driver publishes it (device names encode the BDF)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-0000-{i + 1:02x}-00-0",
                    "attributes": {
                        "pciAddress": {"string": f"0000:{i + 1:02x}:00.0"},
                        "vfioReady": {"bool": vfio_ready},
                    },
                }
                for i in range(devices)
            ],
        },
    }


def claim(namespace: str, name: str, labels: dict[str, str] | None = None) -> JSON:
    """An unallocated claim for one device of the KubeSwift VFIO DeviceClass."""
    request = {"name": REQUEST, "exactly": {"deviceClassName": DEVICE_CLASS, "count": 1}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"devices": {"requests": [request]}},
    }


def allocation(pool: str, device: str) -> dict[str, Any]:
    result = {"request": REQUEST, "driver": DRIVER, "pool": pool, "device": device}
    return {"allocation": {"devices": {"results": [result]}}}


async def allocate(api: KubeApi, namespace: str, name: str, pool: str, device: str) -> JSON:
    return await api.patch(
        RESOURCE_CLAIM, namespace, name, {"status": allocation(pool, device)}, status=True
    )


def _taken(claims: list[JSON]) -> set[tuple[str, str]]:
    taken: set[tuple[str, str]] = set()
    for item in claims:
        results = ((item.get("status") or {}).get("allocation") or {}).get("devices") or {}
        for res in results.get("results") or []:
            if res.get("driver") == DRIVER:
                taken.add((str(res.get("pool")), str(res.get("device"))))
    return taken


def _usable(slices: list[JSON]) -> list[tuple[str, str]]:
    found = []
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != DRIVER:
            continue
        pool = str((spec.get("pool") or {}).get("name", ""))
        for dev in spec.get("devices") or []:
            if ((dev.get("attributes") or {}).get("vfioReady") or {}).get("bool") is not False:
                found.append((pool, str(dev.get("name"))))
    return found


@dataclass
class SimulatedDRAAllocator(PollingController):
    api: KubeApi
    namespace: str
    poll_s: float = 0.1

    async def step(self) -> None:
        guests = await self.api.list(KINDS["SwiftGuest"], self.namespace)
        wanted = {
            g["metadata"]["name"]
            for g in guests
            if (g.get("spec") or {}).get("gpuResourceClaim")
            and g["metadata"].get("deletionTimestamp") is None
        }
        mine = await self.api.list(RESOURCE_CLAIM, self.namespace, label_selector=GUEST_LABEL)
        for item in mine:
            if item["metadata"]["labels"][GUEST_LABEL] not in wanted:
                await self.api.delete(RESOURCE_CLAIM, self.namespace, item["metadata"]["name"])
        have = {c["metadata"]["labels"][GUEST_LABEL]: c for c in mine}
        for guest in sorted(wanted):
            found = have.get(guest)
            if found is None:
                labels = {GUEST_LABEL: guest}
                found = await self.api.create(claim(self.namespace, f"{guest}-gpu", labels))
            if not (found.get("status") or {}).get("allocation"):
                await self._allocate(found)

    async def _allocate(self, item: JSON) -> None:
        taken = _taken(await self.api.list(RESOURCE_CLAIM))
        free = [d for d in _usable(await self.api.list(RESOURCE_SLICE)) if d not in taken]
        if free:
            pool, device = free[0]
            await allocate(self.api, self.namespace, item["metadata"]["name"], pool, device)
