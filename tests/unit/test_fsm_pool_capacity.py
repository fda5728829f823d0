"""status.physicalCapacity / status.workloadCapacity from one pass's readings (pure).

Meaning as in the earlier implementation (reference §1.2): ``gpus`` = PCI devices on the pool's
cells, ``freeGPUsInCluster`` = the physical ledger's free count (absent: unknown), ``model``
from the inner HAMi reading; workload capacity in bytes / percent quantities, compute only when
homogeneous, kept unchanged on a failed read.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpucellpool.api.status import (
    CellPhase,
    CellStatus,
    PhysicalCapacity,
    ResourceTotals,
    WorkloadCapacity,
)
from provisioner.fsm.capacity import CellCapacity, Device
from provisioner.fsm.pool_capacity import (
    bytes_quantity,
    physical_capacity,
    replacing,
    workload_capacity,
)

NOW = 1_790_000_000.0
T4 = "NVIDIA-Tesla T4"
A100 = "NVIDIA A100-SXM4-80GB"


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [
        (0, "0"),
        (8192 * 2**20, "8Gi"),
        (23028 * 2**20, "23028Mi"),
        (2**40, "1Ti"),
        (3 * 1024, "3Ki"),
        (1000, "1000"),
    ],
)
def test_bytes_as_canonical_binary_quantities(n_bytes: int, text: str) -> None:
    assert bytes_quantity(n_bytes) == text


def _cell(*devices: Device, allocs: tuple[tuple[str, int, int], ...] = ()) -> CellCapacity:
    return CellCapacity(devices, sum(a[1] for a in allocs), sum(a[2] for a in allocs), allocs)


def test_homogeneous_pool_totals_in_bytes_and_percent() -> None:
    cells = [
        _cell(Device(8192, 100, T4, "GPU-a"), allocs=(("GPU-a", 2048, 30),)),
        _cell(Device(8192, 100, T4, "GPU-b")),
    ]
    cap = workload_capacity(cells, "DevicePlugin", NOW)
    assert cap is not None
    assert (cap.provider, cap.mode, cap.gpu_devices, cap.homogeneous) == (
        "HAMi",
        "DevicePlugin",
        2,
        True,
    )
    assert cap.gpu_memory == ResourceTotals(total="16Gi", allocated="2Gi", available="14Gi")
    assert cap.gpu_compute == ResourceTotals(total="200", allocated="30", available="170")
    assert cap.last_observed == datetime.fromtimestamp(int(NOW), tz=UTC)
    assert [(m.model, m.devices) for m in cap.by_model or []] == [(T4, 2)]


def test_heterogeneous_pool_has_no_pool_compute_but_per_model_breakdown() -> None:
    cells = [
        _cell(Device(8192, 100, T4, "GPU-a"), allocs=(("GPU-a", 1024, 10),)),
        _cell(Device(81920, 100, A100, "GPU-b"), allocs=(("GPU-b", 40960, 50),)),
    ]
    cap = workload_capacity(cells, "DevicePlugin", NOW)
    assert cap is not None and cap.homogeneous is False and cap.gpu_compute is None
    models = {m.model: m for m in cap.by_model or []}
    assert list(models) == sorted([T4, A100])
    assert models[A100].memory == ResourceTotals(total="80Gi", allocated="40Gi", available="40Gi")
    assert models[A100].compute == ResourceTotals(total="100", allocated="50", available="50")
    assert models[T4].memory == ResourceTotals(total="8Gi", allocated="1Gi", available="7Gi")


def test_over_allocation_never_reads_negative_available() -> None:
    cap = workload_capacity(
        [_cell(Device(1024, 100, T4, "GPU-a"), allocs=(("GPU-x", 4096, 150),))], "DRA", NOW
    )
    assert cap is not None and cap.gpu_memory is not None and cap.gpu_compute is not None
    assert cap.gpu_memory.available == "0" and cap.gpu_compute.available == "0"
    # an allocation on a GPU HAMi does not list (unhealthy) counts for the pool, not a model
    assert (cap.by_model or [])[0].memory == ResourceTotals(
        total="1Gi", allocated="0", available="1Gi"
    )


def test_a_failed_read_keeps_the_stored_object() -> None:
    assert workload_capacity([_cell(Device(8192, 100)), CellCapacity(None)], "DP", NOW) is None


def test_no_ready_cell_reads_as_zero_not_unknown() -> None:
    cap = workload_capacity([], "DevicePlugin", NOW)
    assert cap is not None and cap.gpu_devices == 0 and cap.by_model == []
    assert cap.gpu_memory == ResourceTotals(total="0", allocated="0", available="0")


def _row(index: int, devices: list[str] | None, phase: CellPhase = CellPhase.READY) -> CellStatus:
    return CellStatus(name=f"p-{index}", index=index, phase=phase, devices=devices)


def test_physical_counts_pci_devices_on_rows_and_takes_the_inner_model() -> None:
    rows = [_row(0, ["0000:01:00.0"]), _row(1, ["0000:02:00.0", "0000:03:00.0"]), _row(2, None)]
    inner = workload_capacity([_cell(Device(8192, 100, T4, "GPU-a"))], "DevicePlugin", NOW)
    assert physical_capacity(rows, 5, inner) == PhysicalCapacity(
        gpus=3, free_gpus_in_cluster=5, model=T4
    )
    assert physical_capacity(rows, None, None) == PhysicalCapacity(gpus=3)


def test_replacing_sends_null_for_every_unset_field_so_a_merge_patch_clears_it() -> None:
    value = replacing(PhysicalCapacity(gpus=2))
    assert value == {"gpus": 2, "freeGPUsInCluster": None, "model": None}
    cap = WorkloadCapacity(gpu_devices=1, gpu_memory=ResourceTotals(total="8Gi"))
    out = replacing(cap)
    assert out["gpuCompute"] is None and out["byModel"] is None
    assert out["gpuMemory"] == {"total": "8Gi", "allocated": None, "available": None}
