"""Physical GPU pre-flight arithmetic: Native ledger, DRA slices and claims, the condition."""

from __future__ import annotations

from typing import Any

from provisioner.fsm.inventory import DRA_DRIVER, dra_free, native_free, physical_condition


def _node(ready: bool, *allocated: bool) -> dict[str, Any]:
    return {"status": {"vfioReady": ready, "gpus": [{"allocated": a} for a in allocated]}}


def test_native_counts_unallocated_gpus_on_vfio_ready_nodes() -> None:
    assert native_free([_node(True, False, False, True), _node(False, False), {}]) == 2
    assert native_free([]) == 0


def _slice(driver: str, pool: str, *devices: tuple[str, bool | None]) -> dict[str, Any]:
    devs = []
    for name, vfio in devices:
        attrs = {} if vfio is None else {"vfioReady": {"bool": vfio}}
        devs.append({"name": name, "attributes": attrs})
    return {"spec": {"driver": driver, "pool": {"name": pool}, "devices": devs}}


def _claim(pool: str, device: str, driver: str = DRA_DRIVER) -> dict[str, Any]:
    result = {"driver": driver, "pool": pool, "device": device, "request": "gpu"}
    return {"status": {"allocation": {"devices": {"results": [result]}}}}


def test_dra_usable_minus_allocated() -> None:
    slices = [
        _slice(DRA_DRIVER, "n1", ("gpu-1", True), ("gpu-2", None), ("gpu-3", False)),
        _slice("other.example.com", "n1", ("x", True)),
    ]
    assert dra_free(slices, []) == 2
    assert dra_free(slices, [_claim("n1", "gpu-1"), _claim("n1", "x", "other")]) == 1
    assert dra_free(slices, [_claim("n2", "gpu-2")]) == 2  # another pool's device
    assert dra_free([_slice("other.example.com", "n1", ("x", True))], []) is None
    assert dra_free([], []) is None


def test_condition() -> None:
    assert physical_condition(None, 1, True).status == "Unknown"
    assert physical_condition(0, 1, False).reason == "InsufficientPhysicalGPU"
    assert physical_condition(0, 0, True).status == "False"
    idle = physical_condition(0, 0, False)
    assert (idle.status, idle.reason) == ("True", "FreeDevices")
    assert physical_condition(3, 2, False).message == "3 free physical GPU(s)"
