"""The pure Event diff: transitions only, drain progress, failures as Warnings, conditions."""

from __future__ import annotations

from gpucellpool.api.status import CellPhase, CellStatus
from provisioner.fsm.events import NOTE_LIMIT, cell_events, condition_events


def _row(phase: CellPhase, reason: str = "", message: str = "", failures: int = 0) -> CellStatus:
    return CellStatus(
        name="p-0",
        index=0,
        phase=phase,
        reason=reason or None,
        message=message or None,
        failure_count=failures or None,
    )


def test_new_cell_and_unchanged_cell() -> None:
    assert [e.reason for e in cell_events({}, [_row(CellPhase.PENDING)])] == ["CellCreating"]
    same = _row(CellPhase.BOOTING, "WaitingForAddress")
    assert cell_events({"p-0": same}, [_row(CellPhase.BOOTING, "WaitingForNode")]) == []


def test_drain_progress_and_timeout() -> None:
    ready = {"p-0": _row(CellPhase.READY, "CellReady")}
    (start,) = cell_events(ready, [_row(CellPhase.DRAINING, "CellDraining", "cordoning")])
    assert (start.reason, start.action, start.warning) == ("CellDraining", "Drain", False)
    draining = {"p-0": _row(CellPhase.DRAINING, "CellDraining")}
    (evict,) = cell_events(draining, [_row(CellPhase.DRAINING, "EvictingPods", "evicting 2")])
    assert evict.reason == "EvictingPods" and not evict.warning
    (timeout,) = cell_events(draining, [_row(CellPhase.READY, "DrainTimedOut", "kept")])
    assert timeout.reason == "DrainTimedOut" and timeout.warning


def test_failure_is_a_warning_with_attempt_and_vanished_cell_is_deleted() -> None:
    before = {"p-0": _row(CellPhase.JOINING, "WaitingForNode")}
    (failed,) = cell_events(before, [_row(CellPhase.FAILED, "JoinTimeout", "x" * 5000, 2)])
    assert failed.warning and failed.reason == "JoinTimeout"
    assert failed.note.startswith("cell p-0 failed (attempt 2): ")
    assert len(failed.note) == NOTE_LIMIT
    assert [e.reason for e in cell_events(before, [])] == ["CellDeleted"]


def test_condition_changes() -> None:
    old = [{"type": "Ready", "status": "False", "reason": "CellsNotReady", "message": "0 of 1"}]
    same = [{"type": "Ready", "status": "False", "reason": "CellsNotReady", "message": "0 of 2"}]
    assert condition_events(old, same) == []
    new = [
        {"type": "Ready", "status": "True", "reason": "AllCellsReady", "message": "1 of 1"},
        {"type": "WorkloadClusterReachable", "status": "False", "reason": "Unreachable"},
    ]
    ready, unreachable = condition_events(old, new)
    assert (ready.reason, ready.warning, ready.note) == (
        "AllCellsReady",
        False,
        "Ready=True: 1 of 1",
    )
    assert unreachable.warning
