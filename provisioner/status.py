"""Pool status from one pass: counts, the provisioner's conditions, one status-subresource patch.

Why this module exists: status is how a user (and ``kubectl wait``) learns what the provisioner
did and why. The rows come from the state machine; this module adds the counts and the
``WorkloadClusterReachable``, ``Progressing`` and ``Ready`` conditions (transition times kept
while the status does not change), and writes them with one JSON merge patch on the ``status``
subresource - only the keys the provisioner owns, so the autoscaler's fields are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpucellpool.api.conditions import ConditionType
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellPhase, CellStatus
from provisioner.backends.base import rfc3339
from provisioner.fsm.inventory import PhysicalCondition
from provisioner.fsm.vocabulary import TEARDOWN_PHASES
from provisioner.kube import JSON, KINDS, KubeApi
from provisioner.workload import Reachability


@dataclass(frozen=True, slots=True)
class Counts:
    ready: int
    creating: int
    draining: int
    failed: int


def count(rows: Iterable[CellStatus]) -> Counts:
    rows = list(rows)
    ready = sum(1 for r in rows if r.phase is CellPhase.READY)
    failed = sum(1 for r in rows if r.phase is CellPhase.FAILED)
    draining = sum(1 for r in rows if r.phase in TEARDOWN_PHASES)
    return Counts(ready, len(rows) - ready - failed - draining, draining, failed)


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: float,
    generation: int,
) -> list[dict[str, Any]]:
    """Upsert one condition; ``lastTransitionTime`` moves only when ``status`` flips.
    ``status``: a bool, or the literal "True" / "False" / "Unknown"."""
    value = status if isinstance(status, str) else ("True" if status else "False")
    old = next((c for c in conditions if c.get("type") == type_), None)
    moved = old is None or old.get("status") != value
    entry = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message[:32768],
        "observedGeneration": generation,
        "lastTransitionTime": rfc3339(now) if moved else old["lastTransitionTime"],  # type: ignore[index]
    }
    return [c for c in conditions if c.get("type") != type_] + [entry]


@dataclass(frozen=True, slots=True)
class PassSummary:
    """What the pass concluded, for the conditions."""

    reach: Reachability
    desired: int
    stall_reason: str | None = None
    stall_message: str = ""
    created: int = 0
    updated: tuple[bool, str, str] | None = None
    physical: PhysicalCondition | None = None
    capacity: tuple[str, str, str] | None = None


def conditions(
    pool: GPUCellPool, rows: list[CellStatus], summary: PassSummary, now: float
) -> list[dict[str, Any]]:
    gen = pool.metadata.generation
    raw = [c.to_api() for c in pool.status.conditions or []]
    reach = summary.reach
    raw = set_condition(
        raw,
        ConditionType.WORKLOAD_CLUSTER_REACHABLE,
        reach.reachable,
        reach.reason,
        reach.message,
        now,
        gen,
    )
    c = count(rows)
    busy = c.creating + c.draining + summary.created
    if summary.stall_reason:
        progressing = (False, summary.stall_reason, summary.stall_message)
    elif busy:
        progressing = (True, "CellCreating", f"{c.creating} creating, {c.draining} draining")
    else:
        progressing = (False, "Idle", "")
    raw = set_condition(raw, ConditionType.PROGRESSING, *progressing, now, gen)
    if summary.updated is not None:
        raw = set_condition(raw, ConditionType.UPDATED, *summary.updated, now, gen)
    if summary.physical is not None:
        p = summary.physical
        raw = set_condition(
            raw, ConditionType.PHYSICAL_GPUS_AVAILABLE, p.status, p.reason, p.message, now, gen
        )
    if summary.capacity is not None:
        raw = set_condition(raw, ConditionType.CAPACITY_AVAILABLE, *summary.capacity, now, gen)
    if not reach.reachable:
        ready = (False, "Unreachable", reach.message)
    elif summary.desired == 0 and c.ready == 0:
        ready = (True, "ScaledToZero", "")
    elif c.ready >= summary.desired:
        ready = (True, "AllCellsReady", f"{c.ready} of {summary.desired} cells Ready")
    else:
        ready = (False, "CellsNotReady", f"{c.ready} of {summary.desired} cells Ready")
    return set_condition(raw, ConditionType.READY, *ready, now, gen)


def status_patch(
    pool: GPUCellPool, rows: list[CellStatus], conds: list[dict[str, Any]], desired: int
) -> JSON:
    c = count(rows)
    ordered = sorted(rows, key=lambda r: r.index)
    status: JSON = {
        "observedGeneration": pool.metadata.generation,
        "replicas": len(rows),
        "selector": pool.selector(),
        "readyCells": c.ready,
        "creatingCells": c.creating,
        "drainingCells": c.draining,
        "failedCells": c.failed,
        "cells": [r.to_api() for r in ordered],
        "conditions": conds,
    }
    if not pool.spec.autoscaling.enabled:
        status["desiredReplicas"] = desired
    return {"status": status}


async def write_status(api: KubeApi, pool: GPUCellPool, patch: JSON) -> JSON:
    meta = pool.metadata
    return await api.patch(KINDS["GPUCellPool"], meta.namespace, meta.name, patch, status=True)
