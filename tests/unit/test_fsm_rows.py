"""Status-row bridge: API rows <-> FSM rows, incarnation reset, tombstones, failure history."""

from __future__ import annotations

from datetime import UTC, datetime

from gpucellpool.api.status import CellStatus
from provisioner.fsm.cell_state import CellDecision, CellRow
from provisioner.fsm.membership import IndexHistory
from provisioner.fsm.rows import (
    cell_row,
    failure_history,
    member_row,
    to_seconds,
    tombstone,
    updated_status,
)
from provisioner.fsm.vocabulary import CellPhase as P

T = datetime(2026, 8, 8, 10, 0, tzinfo=UTC)
TS = T.timestamp()


def stored(**kw: object) -> CellStatus:
    base: dict[str, object] = {"name": "gpu-7", "index": 7, "phase": P.READY}
    base.update(kw)
    return CellStatus.model_validate(base)


def test_roundtrip_through_the_fsm_row() -> None:
    row = cell_row(
        stored(
            guestUID="u", lastTransitionTime=T, readyOnce=True, failureCount=2, reason="CellReady"
        )
    )
    assert row == CellRow(P.READY, "CellReady", "", "u", TS, True, 2)
    assert cell_row(None) == CellRow()


def test_updated_status_writes_the_decision_and_keeps_observed_fields() -> None:
    prev = stored(guestUID="u", hostNode="host-a", devices=["0000:01:00.0"])
    decision = CellDecision(CellRow(P.JOINING, "NodeNotReady", "m", "u", TS + 5.7, True, 0))
    out = updated_status(prev, "gpu-7", 7, decision)
    assert (out.phase, out.reason, out.message, out.ready_once) == (
        P.JOINING,
        "NodeNotReady",
        "m",
        True,
    )
    assert out.last_transition_time == datetime(2026, 8, 8, 10, 0, 5, tzinfo=UTC)
    assert out.host_node == "host-a" and out.devices == ["0000:01:00.0"]


def test_new_incarnation_drops_observed_fields() -> None:
    prev = stored(guestUID="old", hostNode="host-a", phase=P.DRAINING)
    out = updated_status(
        prev, "gpu-7", 7, CellDecision(CellRow(P.ALLOCATING_GPU, guest_uid="new", failure_count=1))
    )
    assert out.host_node is None and out.guest_uid == "new" and out.failure_count == 1


def test_failed_tombstones_are_kept_at_any_index() -> None:
    row = stored(
        phase=P.FAILED,
        index=40,
        name="gpu-40",
        failureCount=3,
        reason="JoinTimeout",
        guestUID="u",
        nodeName="gpu-40",
    )
    kept = tombstone(row)
    assert (
        kept is not None
        and kept.index == 40
        and kept.reason == "JoinTimeout"
        and kept.failure_count == 3
    )
    assert kept.guest_uid is None and kept.node_name is None
    assert tombstone(stored(failureCount=2)) is None  # last incarnation succeeded


def test_failure_history_from_rows() -> None:
    rows = [
        stored(phase=P.FAILED, failureCount=2, lastTransitionTime=T),
        stored(name="gpu-1", index=1, failureCount=1, lastTransitionTime=T),
        stored(name="gpu-2", index=2),
    ]
    assert failure_history(rows) == {7: IndexHistory(2, TS), 1: IndexHistory(1, None)}


def test_member_row() -> None:
    m = member_row(stored(phase=P.FAILED, reason="NodeNeverRegistered"), has_object=False)
    assert (m.name, m.index, m.phase, m.has_object, m.reason) == (
        "gpu-7",
        7,
        P.FAILED,
        False,
        "NodeNeverRegistered",
    )
    assert to_seconds(None) is None
    assert m.current_template
    old = stored(templateHash="aaaaaaaaaa")
    assert not member_row(old, True, current_hash="bbbbbbbbbb").current_template
    assert member_row(old, True, current_hash="aaaaaaaaaa").current_template
    assert member_row(stored(), True, current_hash="bbbbbbbbbb").current_template
