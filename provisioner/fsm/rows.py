"""Bridge between the API's ``status.cells[]`` rows and the pure core's value types.

Why this module exists: the state machine and membership work on small frozen values with time
as plain seconds; the API publishes pydantic rows with RFC 3339 timestamps. Converting in one
pure place keeps the status-row rules (reference §2.2) in one spot:

* ``lastTransitionTime`` moves only on a phase change; ``readyOnce`` latches; ``failureCount``
  survives replacement;
* Failed tombstones (rows whose object is gone) are kept for EVERY index - the earlier
  implementation kept them only for ``index < spec.replicas``, so autoscaled indexes lost
  their failure count and backoff; ``failure_history`` rebuilds membership's
  per-index history from those rows after an operator restart.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from gpucellpool.api.status import CellStatus
from provisioner.fsm.cell_state import CellDecision, CellRow
from provisioner.fsm.membership import IndexHistory, MemberRow
from provisioner.fsm.vocabulary import CellPhase


def to_seconds(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def to_time(seconds: float | None) -> datetime | None:
    """Seconds -> aware UTC datetime (second precision, as metav1.Time stores it)."""
    return None if seconds is None else datetime.fromtimestamp(int(seconds), tz=UTC)


def cell_row(status: CellStatus | None) -> CellRow:
    """The FSM's view of a stored row (a new cell has none)."""
    if status is None:
        return CellRow()
    return CellRow(
        phase=status.phase,
        reason=status.reason or "",
        message=status.message or "",
        guest_uid=status.guest_uid or "",
        last_transition_s=to_seconds(status.last_transition_time),
        ready_once=bool(status.ready_once),
        failure_count=status.failure_count or 0,
    )


def updated_status(
    previous: CellStatus | None, name: str, index: int, decision: CellDecision
) -> CellStatus:
    """A new row carrying the decision; observation fields (devices, node...) are kept and
    are the shell's to refresh with ``model_copy(update=...)``."""
    row = decision.row
    base = previous or CellStatus(name=name, index=index, phase=row.phase)
    if previous is not None and row.guest_uid and previous.guest_uid not in (None, row.guest_uid):
        base = CellStatus(name=name, index=index, phase=row.phase)  # new incarnation
    return base.model_copy(
        update={
            "phase": row.phase,
            "reason": row.reason or None,
            "message": row.message or None,
            "guest_uid": row.guest_uid or None,
            "last_transition_time": to_time(row.last_transition_s),
            "ready_once": row.ready_once,
            "failure_count": row.failure_count,
        }
    )


def tombstone(status: CellStatus) -> CellStatus | None:
    """The row to keep once the cell's objects are gone, or None to drop it.

    A Failed row is kept whatever its index (its count and failure time drive give-up,
    backoff and the hopeless-pool guard); a row whose last incarnation did not fail is
    dropped: that index last succeeded, so there is nothing to back off from.
    """
    if status.phase is not CellPhase.FAILED:
        return None
    return status.model_copy(
        update={
            "guest_uid": None,
            "node_name": None,
            "node_ready": None,
            "devices": None,
            "capacity_devices": None,
            "host_node": None,
        }
    )


def failure_history(rows: Iterable[CellStatus]) -> dict[int, IndexHistory]:
    """Per-index failure history from stored rows (live and tombstones)."""
    history: dict[int, IndexHistory] = {}
    for row in rows:
        if not row.failure_count:
            continue
        failed_at = to_seconds(row.last_transition_time) if row.phase is CellPhase.FAILED else None
        history[row.index] = IndexHistory(row.failure_count, failed_at)
    return history


def member_row(
    status: CellStatus, has_object: bool, current_hash: str = "", fault_outside_cell: bool = False
) -> MemberRow:
    """Membership's view of a row; ``current_hash`` "" means "do not compare templates"."""
    stored_hash = status.template_hash or ""
    return MemberRow(
        name=status.name,
        index=status.index,
        phase=status.phase,
        has_object=has_object,
        ready_once=bool(status.ready_once),
        reason=status.reason or "",
        fault_outside_cell=fault_outside_cell,
        current_template=not current_hash or stored_hash in ("", current_hash),
    )
