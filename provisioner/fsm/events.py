"""Which Events one reconcile pass announces: a pure diff of the cell rows and conditions.

Why this module exists: ``kubectl describe gpucellpool`` should tell the story of a pool -
cells created, Ready, draining, evicting, timed out, failed (with the attempt number), removed,
and pool conditions changing - without the shell deciding ad hoc. The shell hands the previous
and the new status to ``pass_events`` and posts what comes back; reasons follow the original
operator's Events (``CellCreating``, ``CellDraining``, ``RollingUpdate``, the Failed cell's own
reason) plus the cell and condition reasons. Notes carry only our own messages (names, phases,
counts), never Secret contents, and are bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucellpool.api.status import CellPhase, CellStatus
from provisioner.fsm.vocabulary import CellReason

NOTE_LIMIT = 1000
# Reasons that deserve a Warning when a condition moves to them.
WARNING_REASONS = frozenset(
    {
        "Unreachable",
        "CredentialInvalid",
        "Forbidden",
        "InsufficientPhysicalGPU",
        "CellReplacementExhausted",
        "FaultNotInTheCell",
        "BootstrapCredentialSuspect",
        "BootstrapTemplateInvalid",
        "UpdateBlocked",
        "HAMiNotDetected",
        "RegistrationUnparseable",
        "DRAFeatureGateMissing",
        "DRADeviceClassMissing",
        "ScaleDownHeld",
        "EvictionBlocked",
        "InfrastructureNodesUnreadable",
        "AdmissionRulesFailed",
    }
)
# Drain progress reasons announced even when the phase stays Draining.
DRAIN_REASONS = frozenset(
    {CellReason.EVICTING_PODS, CellReason.WAITING_FOR_ALLOCATIONS, CellReason.DRAIN_TIMED_OUT}
)


@dataclass(frozen=True, slots=True)
class PoolEvent:
    """One Event about the pool. ``action``: what the operator was doing (events.k8s.io)."""

    reason: str
    note: str
    warning: bool = False
    action: str = "Reconcile"


def _note(text: str) -> str:
    return text if len(text) <= NOTE_LIMIT else text[: NOTE_LIMIT - 3] + "..."


def _cell_event(old: CellStatus | None, new: CellStatus) -> PoolEvent | None:
    name, reason, msg = new.name, new.reason or str(new.phase), new.message or ""
    if old is None:
        return PoolEvent("CellCreating", f"creating cell {name}", action="Create")
    if new.phase is old.phase and (new.reason == old.reason or new.reason not in DRAIN_REASONS):
        return None
    if new.phase is CellPhase.FAILED:
        attempt = new.failure_count or 1
        return PoolEvent(reason, _note(f"cell {name} failed (attempt {attempt}): {msg}"), True)
    if new.phase is CellPhase.DRAINING and old.phase is not CellPhase.DRAINING:
        return PoolEvent("CellDraining", _note(f"draining cell {name}: {msg}"), action="Drain")
    if new.reason == CellReason.DRAIN_TIMED_OUT:
        return PoolEvent(reason, _note(f"cell {name}: {msg}"), True, action="Drain")
    action = "Drain" if new.phase is CellPhase.DRAINING else "Reconcile"
    text = f"cell {name}: {old.phase} -> {new.phase}" + (f": {msg}" if msg else "")
    return PoolEvent(reason, _note(text), action=action)


def cell_events(before: Mapping[str, CellStatus], after: Iterable[CellStatus]) -> list[PoolEvent]:
    """Phase transitions (and drain progress) of the cells; a cell that vanished is deleted."""
    events: list[PoolEvent] = []
    seen: set[str] = set()
    for row in sorted(after, key=lambda r: r.index):
        seen.add(row.name)
        event = _cell_event(before.get(row.name), row)
        if event is not None:
            events.append(event)
    for name in sorted(set(before) - seen):
        events.append(PoolEvent("CellDeleted", f"cell {name} removed", action="Delete"))
    return events


def condition_events(
    before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]]
) -> list[PoolEvent]:
    """A condition whose status or reason changed (or appeared)."""
    old = {str(c.get("type")): c for c in before}
    events: list[PoolEvent] = []
    for cond in after:
        type_, reason = str(cond.get("type")), str(cond.get("reason", ""))
        prev = old.get(type_)
        if prev is not None and (prev.get("status"), prev.get("reason")) == (
            cond.get("status"),
            reason,
        ):
            continue
        msg = str(cond.get("message") or "")
        text = f"{type_}={cond.get('status')}" + (f": {msg}" if msg else "")
        events.append(PoolEvent(reason, _note(text), reason in WARNING_REASONS))
    return events


def pass_events(
    before_cells: Mapping[str, CellStatus],
    after_cells: Iterable[CellStatus],
    before_conditions: Iterable[Mapping[str, Any]],
    after_conditions: Iterable[Mapping[str, Any]],
) -> list[PoolEvent]:
    return cell_events(before_cells, after_cells) + condition_events(
        before_conditions, after_conditions
    )
