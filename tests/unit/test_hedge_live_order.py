"""The live operator cancels the same hedged boots as the simulator: the newest created first.

What this proves: the hedge (``autoscaler.policy.hedge``) keeps the Booting cells that have
booted longest and cancels the newest surplus boots. The simulator's cells carry their creation
time; the live observation used to give a cell the time of its last phase change
(``lastTransitionTime``), which moves with every boot phase (Pending, AllocatingGPU,
GuestProvisioning, Booting, Joining), so the live hedge cancelled the cell that had just
reached Joining - the boot closest to Ready - first. Measured on tests/e2e/test_fidelity.py
with 0.75: the twin cancelled demo-9 (Joining) and kept demo-11 (Booting), where the simulator
cancels the newest cells. The row's ``creationTime`` (the outer object's) now orders them.
"""

from __future__ import annotations

from typing import Any

from autoscaler.observe import CellInputs, cells_for_pool
from autoscaler.policy.hedge import hedge
from autoscaler.policy.types import CellShape
from gpucellpool.api.pool import GPUCellPool
from tests.unit.test_loop_fakes import pool_manifest, with_cells


def _row(index: int, phase: str, created: str, moved: str) -> dict[str, Any]:
    return {
        "name": f"demo-{index}",
        "index": index,
        "phase": phase,
        "creationTime": f"2026-12-02T06:00:{created}Z",
        "lastTransitionTime": f"2026-12-02T06:00:{moved}Z",
    }


def test_surplus_boots_are_the_newest_created_not_the_latest_to_change_phase() -> None:
    rows = [
        _row(8, "Joining", "10", "40"),  # created first, just reached Joining: keep
        _row(9, "Joining", "10", "41"),
        _row(10, "Booting", "20", "30"),  # created last, still Booting: cancel first
        _row(11, "Booting", "20", "31"),
        _row(12, "Booting", "20", "32"),
    ]
    pool = GPUCellPool.model_validate(with_cells(pool_manifest("demo"), rows))
    cells, _ = cells_for_pool(pool, CellInputs(CellShape(), {}, {}), now=1e10)
    hedged = hedge(cells, {}, new_cells=1, fraction=0.75)  # 1 cell waited for: 1 spare kept
    assert hedged.wanted == 1
    assert hedged.surplus == ("demo-12", "demo-11", "demo-10", "demo-9")


def test_rows_without_a_creation_time_fall_back_to_their_last_transition() -> None:
    rows = [
        {
            "name": "p-0",
            "index": 0,
            "phase": "Booting",
            "lastTransitionTime": "2026-12-02T06:00:09Z",
        },
        {
            "name": "p-1",
            "index": 1,
            "phase": "Booting",
            "lastTransitionTime": "2026-12-02T06:00:05Z",
        },
    ]
    pool = GPUCellPool.model_validate(with_cells(pool_manifest("p"), rows))
    cells, _ = cells_for_pool(pool, CellInputs(CellShape(), {}, {}), now=1e10)
    assert hedge(cells, {}, new_cells=0, fraction=0.75).surplus == ("p-0", "p-1")


def _gpu_pod(node: str) -> dict[str, Any]:
    """A running pod HAMi placed on ``node`` (its allocation annotation names a GPU)."""
    return {
        "metadata": {"annotations": {"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,4096,0:;"}},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def test_a_joining_cell_running_gpu_pods_is_ready_not_a_spare() -> None:
    """HAMi binds pods to a joined Node a moment before the provisioner writes its row Ready.
    Measured on tests/e2e/test_fidelity.py with 0.75: three Joining cells already running
    pods looked empty, the twin cancelled 4 boots where the simulator (whose cells run pods
    only once Ready) cancelled none yet. Such a cell is Ready with its usage; a DaemonSet pod
    (no GPU allocation) leaves a Joining cell Booting."""
    rows = [
        _row(1, "Joining", "10", "40"),  # runs a GPU pod: Ready
        _row(2, "Joining", "10", "41"),  # runs only a DaemonSet pod: still Booting
        _row(3, "Booting", "20", "30"),
        _row(4, "Booting", "20", "31"),
    ]
    daemon = {"metadata": {}, "spec": {"nodeName": "demo-2"}, "status": {"phase": "Running"}}
    pods = {"demo-1": [_gpu_pod("demo-1")], "demo-2": [daemon]}
    inputs = CellInputs(CellShape(), {"demo-1": {}, "demo-2": {}}, pods)
    pool = GPUCellPool.model_validate(with_cells(pool_manifest("demo"), rows))
    cells, unknown = cells_for_pool(pool, inputs, now=1e10)
    assert [c.state.value for c in cells] == ["Ready", "Booting", "Booting", "Booting"]
    assert cells[0].gpus[0].slots == 1 and cells[0].pods == 1 and not unknown
    hedged = hedge(cells, {}, new_cells=2, fraction=0.75)  # 2 cells waited for: 2 spares kept
    assert hedged.surplus == ("demo-4",)  # demo-1 is no spare: without the rule it was one
