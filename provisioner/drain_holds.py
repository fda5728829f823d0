"""Apply the drain back-off to membership's scale-down victims (the shell side).

Why this module exists: membership (``fsm.membership``) picks scale-down victims without knowing
which cells just had a drain abandoned; ``fsm.drain_backoff.choose_victims`` decides which of
them are held and which cell stands in. This module feeds it the live cells and their abandon
records (annotations on the outer objects) and folds its answer back into the plan: the held
victims are not marked, and when the scale-down is held the plan carries ``ScaleDownHeld`` with
the reason, which becomes the ``Progressing`` condition and a Warning Event. ``held_for_s``
gives the rolling update (``rollout_shell``) the same back-off per cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellStatus
from provisioner.backends.base import CellObjects
from provisioner.fsm.drain_backoff import VictimCandidate, choose_victims, held_until_s
from provisioner.fsm.membership import MembershipPlan
from provisioner.fsm.vocabulary import TEARDOWN_PHASES, StallReason


def drain_timeout_s(pool: GPUCellPool) -> float | None:
    """The pool's ``autoscaling.drain.timeout`` (the back-off's base), None when unset."""
    drain = pool.spec.autoscaling.drain
    return drain.timeout.seconds if drain.timeout is not None else None


def backoff_end_s(pool: GPUCellPool, cell: CellObjects) -> float | None:
    """When the cell's drain back-off ends (None: it never had one)."""
    return held_until_s(cell.abandon_record, drain_timeout_s(pool))


def held_for_s(pool: GPUCellPool, cell: CellObjects, now: float) -> float:
    """What is left of the cell's drain back-off (0 when it may be drained now)."""
    until = backoff_end_s(pool, cell)
    return max(until - now, 0.0) if until is not None else 0.0


def leaving(cell: CellObjects, row: CellStatus | None) -> bool:
    """Whether the cell is on its way out: marked for a drain, being deleted, or its row in a
    teardown phase (it counts neither as a live cell nor as a possible victim)."""
    marked = bool(cell.drain_cause) or cell.deleting
    return marked or (row is not None and row.phase in TEARDOWN_PHASES)


def _candidates(
    pool: GPUCellPool, cells: Mapping[str, CellObjects], rows: Mapping[str, CellStatus]
) -> tuple[VictimCandidate, ...]:
    timeout = drain_timeout_s(pool)
    found = []
    for name, cell in cells.items():
        if leaving(cell, rows.get(name)):
            continue
        record = cell.abandon_record
        found.append(VictimCandidate(name, cell.index, record, held_until_s(record, timeout)))
    return tuple(found)


def hold_scale_down(
    pool: GPUCellPool,
    cells: Mapping[str, CellObjects],
    rows: Mapping[str, CellStatus],
    plan: MembershipPlan,
    now: float,
    preferred: tuple[str, ...] = (),
) -> MembershipPlan:
    """The plan with held victims replaced or held back (and the reason, when held).
    ``preferred``: the autoscaler's victims membership was given (stand-ins come from them
    first)."""
    if not plan.remove:
        return plan
    choice = choose_victims(plan.remove, _candidates(pool, cells, rows), now, preferred)
    if choice.remove == plan.remove:
        return plan
    held = replace(plan, remove=choice.remove)
    if choice.held and plan.stall is None:
        held = replace(held, stall=StallReason.SCALE_DOWN_HELD, stall_message=choice.message)
    return held
