"""CapacityAvailable from HAMi's registration and allocation annotations (pure)."""

from __future__ import annotations

import json
from typing import Any

from provisioner.fsm.capacity import (
    CellCapacity,
    Device,
    allocated,
    allocations,
    capacity_condition,
    cell_capacity,
    register_devices,
)

ANN = "hami.io/vgpu-devices-allocated"


def test_register_json_and_legacy() -> None:
    js = json.dumps(
        [
            {"id": "GPU-a", "devmem": 8192, "devcore": 100, "type": "NVIDIA T4", "health": True},
            {"devmem": 1, "health": False},
        ]
    )
    assert register_devices(js) == (Device(8192, 100, "NVIDIA T4", "GPU-a"),)
    legacy = "GPU-a,10,16384,100,NVIDIA-T4,0,true:GPU-b,10,16384,100,NVIDIA-T4,0,false:"
    assert register_devices(legacy) == (Device(16384, 100, "NVIDIA-T4", "GPU-a"),)
    assert register_devices(None) is None and register_devices("[{") is None
    assert register_devices("garbage") is None


def test_register_without_type_or_id_still_counts() -> None:
    js = json.dumps([{"devmem": 8192, "devcore": 100, "health": True}])
    assert register_devices(js) == (Device(8192, 100),)


def test_allocated_sums_container_devices_of_live_pods() -> None:
    pods: list[dict[str, Any]] = [
        {"metadata": {"annotations": {ANN: "GPU-a,NVIDIA,1000,30:;GPU-a,NVIDIA,500,20:;"}}},
        {
            "metadata": {"annotations": {ANN: "GPU-a,NVIDIA,9999,99:;"}},
            "status": {"phase": "Succeeded"},
        },
        {"metadata": {}},
    ]
    assert allocated(pods, ANN) == (1500, 50)
    assert allocations(pods, ANN) == (("GPU-a", 1000, 30), ("GPU-a", 500, 20))


def test_cell_capacity_joins_registration_and_pods() -> None:
    register = "GPU-a,10,8192,100,NVIDIA-T4,0,true:"
    pods = [{"metadata": {"annotations": {ANN: "GPU-a,NVIDIA,1000,30:;"}}}]
    cell = cell_capacity(register, pods, ANN)
    assert cell == CellCapacity(
        (Device(8192, 100, "NVIDIA-T4", "GPU-a"),), 1000, 30, cell.allocations
    )
    assert cell.allocations == (("GPU-a", 1000, 30),)
    assert cell_capacity(None, pods, ANN).devices is None


def test_condition_reasons() -> None:
    one = (Device(8192, 100),)
    assert capacity_condition([], 0)[1] == "ScaledToZero"
    assert capacity_condition([], 2)[0] == "Unknown"
    assert capacity_condition([CellCapacity(None)], 1)[1] == "Unknown"
    assert capacity_condition([CellCapacity(())], 1)[1] == "Unknown"
    assert capacity_condition([CellCapacity(one, 100, 10)], 1)[:2] == ("True", "CapacityFree")
    assert capacity_condition([CellCapacity(one, 100, 100)], 1)[:2] == ("False", "Saturated")
    assert capacity_condition([CellCapacity(one, 8192, 0)], 1)[1] == "Saturated"
    mixed = [CellCapacity(one, 0, 100), CellCapacity((Device(16384, 100),), 0, 100)]
    assert capacity_condition(mixed, 2)[:2] == ("True", "Heterogeneous")  # memory only


def test_two_models_of_one_shape_are_heterogeneous() -> None:
    cells = [
        CellCapacity((Device(8192, 100, "NVIDIA-T4"),), 0, 100),
        CellCapacity((Device(8192, 100, "NVIDIA-A2"),), 0, 0),
    ]
    assert capacity_condition(cells, 2)[:2] == ("True", "Heterogeneous")
