"""The cell shape the live loop packs with, and the provisioner's ``status.cellDeviceShape``.

What these prove: the shape is taken in the original's order (a Ready cell's reading, the
remembered one with no cell Ready, then the declared one) and says where it came from; with
none of them the policy is told the shape is unknown; the provisioner learns the shape from
the workload-capacity reading, keeps it (with its ``lastObserved``) while it is unchanged and
when there is no reading, moves it when the GPU model changes, and writes it in its patch.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.policy.config import (
    choose_shape,
    policy_config_from_spec,
    pool_shape,
)
from autoscaler.policy.types import CellShape
from gpucellpool.api.conditions import CellShapeReason
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import (
    CellDeviceShape,
    ModelCapacity,
    ResourceTotals,
    WorkloadCapacity,
)
from provisioner.fsm.device_shape import device_shape, observed_shape
from provisioner.fsm.pool_capacity import bytes_quantity, quantity_bytes
from provisioner.status import PassSummary, capacity_status
from provisioner.workload import Reachability
from tests.unit.test_loop_fakes import pool_manifest

JSON = dict[str, Any]
T4 = CellDeviceShape(model="Tesla-T4", memory_mib=15360, core_percent=100)


def pool(status: JSON | None = None, **auto: Any) -> GPUCellPool:
    manifest = pool_manifest("p", **auto)
    manifest["status"] = status or {}
    return GPUCellPool.model_validate(manifest)


def test_a_ready_cell_reading_is_learned() -> None:
    spec = pool().spec  # declares 24576 MiB, 10 slots
    choice = choose_shape(spec, T4, ready_cells=1)
    assert choice.source is CellShapeReason.LEARNED and choice.known
    assert choice.shape == CellShape(gpus=1, memory_mib=15360, cores_percent=100, slots=10)
    assert "Tesla-T4" in choice.message and "Ready cell" in choice.message


def test_with_no_ready_cell_the_remembered_shape_beats_the_declared_one() -> None:
    choice = choose_shape(pool().spec, T4, ready_cells=0)
    assert (choice.source, choice.shape.memory_mib) == (CellShapeReason.REMEMBERED, 15360)
    assert "status.cellDeviceShape" in choice.message


def test_declared_until_a_cell_reports() -> None:
    spec = pool(cellShape={"gpuMemoryMiB": 40960, "gpuCores": 200, "slots": 4}).spec
    for remembered in (None, CellDeviceShape(model="x")):  # an incomplete one is no shape
        choice = choose_shape(spec, remembered, ready_cells=2)
        assert choice.source is CellShapeReason.DECLARED
        assert choice.shape == CellShape(1, 40960, 200, 4)
    # slots come from the declaration even when the memory is learned (HAMi's split count)
    assert choose_shape(spec, T4, ready_cells=1).shape.slots == 4


def test_no_shape_anywhere_is_unknown_and_the_policy_is_told() -> None:
    spec = pool(cellShape=None).spec
    choice = choose_shape(spec, None, ready_cells=0)
    assert (choice.source, choice.known) == (CellShapeReason.UNKNOWN, False)
    assert choice.source.value == "CellShapeUnknown"
    assert "spec.autoscaling.cellShape" in choice.message and "minReplicas" in choice.message
    config = policy_config_from_spec(spec, choice)
    assert config.shape == CellShape(gpus=1) and not config.shape_known
    assert policy_config_from_spec(spec, choose_shape(spec, T4, 0)).shape_known
    # the simulator's plain shape (and no shape at all) keep the old meaning
    assert policy_config_from_spec(spec, CellShape(2, 8192)).shape_known
    assert policy_config_from_spec(spec).shape_known


def test_pool_shape_reads_the_stored_status() -> None:
    shape = {"model": "Tesla-T4", "memoryMiB": 15360, "corePercent": 100}
    assert pool_shape(pool({"cellDeviceShape": shape})).source is CellShapeReason.REMEMBERED
    ready = {"cellDeviceShape": shape, "readyCells": 1}
    assert pool_shape(pool(ready)).source is CellShapeReason.LEARNED
    assert pool_shape(pool({"readyCells": 1}, cellShape=None)).source is CellShapeReason.UNKNOWN


@pytest.mark.parametrize("n_bytes", [0, 1, 1023, 1024, 15360 * 2**20, 80 * 2**30, 3 * 2**40 + 1])
def test_quantity_bytes_inverts_bytes_quantity(n_bytes: int) -> None:
    assert quantity_bytes(bytes_quantity(n_bytes)) == n_bytes


@pytest.mark.parametrize("text", [None, "", "1.5Gi", "100m", "-1", "Gi", "abc"])
def test_quantity_bytes_refuses_what_bytes_quantity_never_writes(text: str | None) -> None:
    assert quantity_bytes(text) is None


def reading(*models: tuple[str, int, int, int], at: str = "2026-12-01T10:00:00Z") -> JSON:
    by_model = [
        ModelCapacity(
            model=m,
            devices=n,
            memory=ResourceTotals(total=bytes_quantity(n * mib * 2**20)),
            compute=ResourceTotals(total=str(n * cores)),
        )
        for m, n, mib, cores in models
    ]
    return WorkloadCapacity.model_validate(
        {"byModel": [b.to_api() for b in by_model], "lastObserved": at}
    ).to_api()


def capacity(raw: JSON) -> WorkloadCapacity:
    return WorkloadCapacity.model_validate(raw)


def test_observed_shape_is_the_first_model_with_devices_per_device() -> None:
    raw = reading(("A100", 0, 81920, 100), ("Tesla-T4", 2, 15360, 100), ("Z", 1, 8192, 50))
    assert observed_shape(capacity(raw)) == ("Tesla-T4", 15360, 100)
    assert observed_shape(capacity(reading())) is None  # no Ready cell: all zero
    assert observed_shape(None) is None  # not read this pass


def test_device_shape_is_learned_kept_and_moved_never_cleared() -> None:
    first = device_shape(capacity(reading(("Tesla-T4", 1, 15360, 100))), None)
    assert first is not None
    assert (first.model, first.memory_mib, first.core_percent) == ("Tesla-T4", 15360, 100)
    assert first.last_observed is not None
    later = capacity(reading(("Tesla-T4", 3, 15360, 100), at="2026-12-01T11:00:00Z"))
    assert device_shape(later, first) is first  # same shape: lastObserved does not move
    assert device_shape(capacity(reading()), first) is first  # scaled to zero: kept
    assert device_shape(None, first) is first  # failed read: kept
    moved = device_shape(
        capacity(reading(("A100", 1, 81920, 100), at="2026-12-01T12:00:00Z")), first
    )
    assert moved is not None and (moved.model, moved.memory_mib) == ("A100", 81920)
    assert moved.last_observed is not None and moved.last_observed > first.last_observed


def test_provisioner_patch_writes_the_shape_and_never_clears_it() -> None:
    reach = Reachability(True, "Connected", "")
    learned = PassSummary(reach, 1, workload=capacity(reading(("Tesla-T4", 1, 15360, 100))))
    out = capacity_status(pool(), [], learned)
    assert out["cellDeviceShape"]["memoryMiB"] == 15360
    assert out["cellDeviceShape"]["model"] == "Tesla-T4"
    stored = pool({"cellDeviceShape": out["cellDeviceShape"]})
    for summary in (PassSummary(reach, 0), PassSummary(reach, 0, workload=capacity(reading()))):
        kept = capacity_status(stored, [], summary)
        assert kept["cellDeviceShape"] == out["cellDeviceShape"]
    assert "cellDeviceShape" not in capacity_status(pool(), [], PassSummary(reach, 0))
