"""The Native backend's physical GPU ledger (SwiftGPUNode status), as KubeSwift keeps it.

Why this module exists: the operator's pre-flight reads free GPUs from cluster-scoped
``SwiftGPUNode`` objects (``status.vfioReady``, ``status.gpus[].allocated``). For that to mean
anything in a live run, the simulated KubeSwift must take a GPU from the ledger before it
reports a Native guest allocated, leave the guest unscheduled (``GPUAllocated=False/NoCapacity``)
when none is free, and give the GPU back when the guest goes. ``allocatedTo`` (the guest UID)
is this twin's bookkeeping. No SwiftGPUNode at all means "no ledger": allocation is unlimited,
as before this module existed.
"""

from __future__ import annotations

from typing import Any

from provisioner.kube import JSON, Kind, KubeApi

SWIFT_GPU_NODE = Kind("gpu.kubeswift.io/v1alpha1", "SwiftGPUNode", "swiftgpunodes", False)


def ledger_node(name: str, gpus: int, allocated: int = 0, vfio_ready: bool = True) -> JSON:
    """A SwiftGPUNode (status written separately through the status subresource)."""
    return {
        "apiVersion": "gpu.kubeswift.io/v1alpha1",
        "kind": "SwiftGPUNode",
        "metadata": {"name": name},
        "status": {
            "vfioReady": vfio_ready,
            "gpus": [
                {"pciAddress": f"0000:{i + 1:02x}:00.0", "allocated": i < allocated}
                for i in range(gpus)
            ],
        },
    }


async def _write(api: KubeApi, node: JSON, gpus: list[dict[str, Any]]) -> None:
    meta = node["metadata"]
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": {"gpus": gpus}}
    await api.patch(SWIFT_GPU_NODE, None, meta["name"], patch, status=True)


async def hold(api: KubeApi, guest_uid: str) -> bool | None:
    """Take (or find already taken) one GPU for the guest. None: no ledger exists."""
    nodes = await api.list(SWIFT_GPU_NODE)
    if not nodes:
        return None
    for node in nodes:
        if any(g.get("allocatedTo") == guest_uid for g in node["status"].get("gpus") or []):
            return True
    for node in nodes:
        status = node.get("status") or {}
        gpus = [dict(g) for g in status.get("gpus") or []]
        free = next((g for g in gpus if not g.get("allocated")), None)
        if status.get("vfioReady") is True and free is not None:
            free.update(allocated=True, allocatedTo=guest_uid)
            await _write(api, node, gpus)  # a 409 fails this pass; the next one retries
            return True
    return False


async def release(api: KubeApi, guest_uid: str) -> None:
    for node in await api.list(SWIFT_GPU_NODE):
        gpus = [dict(g) for g in (node.get("status") or {}).get("gpus") or []]
        held = [g for g in gpus if g.get("allocatedTo") == guest_uid]
        for gpu in held:
            gpu.update(allocated=False, allocatedTo=None)
        if held:
            await _write(api, node, gpus)
