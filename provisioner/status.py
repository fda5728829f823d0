"""Pool status from one pass: counts, the provisioner's conditions, one status-subresource patch.

Why this module exists: status is how a user (and ``kubectl wait``) learns what the provisioner
did and why. The rows come from the state machine; this module adds the counts and the
``WorkloadClusterReachable``, ``Progressing`` and ``Ready`` conditions (transition times kept
while the status does not change), and writes them with one JSON merge patch on the ``status``
subresource - only the keys the provisioner owns, so the autoscaler's fields are left alone.
``physicalCapacity`` and ``workloadCapacity`` (``fsm.pool_capacity``) are sent as values that
replace the stored objects; ``workloadCapacity`` only when HAMi was read this pass (a failed
read keeps the stored one, as in the earlier implementation). ``cellDeviceShape``
(``fsm.device_shape``) is the per-GPU shape of that reading, kept when there is none.

The one key both writers touch is ``conditions``: a merge patch replaces the whole list, and the
autoscaler server-side-applies its ``ScalingActive`` entry into the same list. So the patch
carries the ``resourceVersion`` of the read the conditions were built from: if the autoscaler
(or anyone) wrote in between, the apiserver answers 409 instead of letting the provisioner put
the old ``ScalingActive`` back. ``write_status`` then re-reads the pool and sends the same rows
and its own conditions over the live list of everyone else's (``rebase``), a bounded number of
times; the pass's rows (created cells, drain outcomes, tombstones) are never dropped for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucellpool.api.conditions import ConditionType
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import (
    MAX_PLAN_REJECTIONS,
    CellPhase,
    CellStatus,
    PlanRejection,
    WorkloadCapacity,
)
from provisioner.backends.base import rfc3339
from provisioner.fsm.device_shape import device_shape
from provisioner.fsm.inventory import PhysicalCondition
from provisioner.fsm.plan_check import CheckedPlan
from provisioner.fsm.pool_capacity import physical_capacity, replacing
from provisioner.fsm.rows import to_time
from provisioner.fsm.vocabulary import TEARDOWN_PHASES
from provisioner.kube import JSON, KINDS, Conflict, KubeApi
from provisioner.workload import Reachability

STATUS_WRITE_ATTEMPTS = 3
"""Conflicting status writes in one pass before the pass gives up (the next pass re-reads)."""

PROVISIONER_CONDITIONS = frozenset(
    {
        ConditionType.WORKLOAD_CLUSTER_REACHABLE,
        ConditionType.PROGRESSING,
        ConditionType.UPDATED,
        ConditionType.PHYSICAL_GPUS_AVAILABLE,
        ConditionType.CAPACITY_AVAILABLE,
        ConditionType.CAPACITY_PROVIDER_READY,
        ConditionType.READY,
        ConditionType.DEGRADED,
        ConditionType.CELL_DRAIN_REQUESTED,
    }
)
"""The condition types the provisioner sets; every other type belongs to someone else."""
RULES_FAILED = "AdmissionRulesFailed"
RULES_PASS = "AdmissionRulesPass"
"""Degraded's reasons: the stored pool breaks the admission rules (``rule_gate``), or no more."""


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
    """What the pass concluded, for the conditions and the capacity objects.

    ``free_gpus``: the physical ledger's free count (None: unknown); ``workload``: HAMi
    capacity read this pass (None: not read, keep the stored one)."""

    reach: Reachability
    desired: int
    stall_reason: str | None = None
    stall_message: str = ""
    created: int = 0
    updated: tuple[bool, str, str] | None = None
    physical: PhysicalCondition | None = None
    capacity: tuple[str, str, str] | None = None
    free_gpus: int | None = None
    workload: WorkloadCapacity | None = None
    provider: tuple[str, str, str] | None = None  # CapacityProviderReady (fsm.provider_health)
    drain_requested: tuple[str, str, str] | None = None  # CellDrainRequested (fsm.drain_outer)
    plan: CheckedPlan | None = None  # the autoscaler's plan as checked (fsm.plan_check)


def conditions(
    pool: GPUCellPool, rows: list[CellStatus], summary: PassSummary, now: float
) -> list[dict[str, Any]]:
    gen = pool.metadata.generation
    raw = [c.to_api() for c in pool.status.conditions or []]
    if any(c.get("type") == ConditionType.DEGRADED for c in raw):  # a pass ran: rules passed
        passed = "the stored pool passes the admission rules"
        raw = set_condition(raw, ConditionType.DEGRADED, False, RULES_PASS, passed, now, gen)
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
    if summary.provider is not None:
        raw = set_condition(raw, ConditionType.CAPACITY_PROVIDER_READY, *summary.provider, now, gen)
    ready = _ready(summary, c.ready)
    if summary.drain_requested is not None:
        raw = set_condition(
            raw, ConditionType.CELL_DRAIN_REQUESTED, *summary.drain_requested, now, gen
        )
    return set_condition(raw, ConditionType.READY, *ready, now, gen)


def _ready(summary: PassSummary, ready_cells: int) -> tuple[bool, str, str]:
    """``Ready``: the cells' count, forced False while unreachable or the provider is not."""
    desired, provider = summary.desired, summary.provider
    if not summary.reach.reachable:
        return False, "Unreachable", summary.reach.message
    if provider is not None and provider[0] == "False" and desired:
        return False, provider[1], provider[2]
    if desired == 0 and ready_cells == 0:
        return True, "ScaledToZero", ""
    if ready_cells >= desired:
        return True, "AllCellsReady", f"{ready_cells} of {desired} cells Ready"
    return False, "CellsNotReady", f"{ready_cells} of {desired} cells Ready"


def own_conditions(conds: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Only the provisioner's condition types (what its Events and its rebase speak for)."""
    return [dict(c) for c in conds if c.get("type") in PROVISIONER_CONDITIONS]


def capacity_status(pool: GPUCellPool, rows: list[CellStatus], summary: PassSummary) -> JSON:
    """``physicalCapacity`` (always) and ``workloadCapacity`` (when read) as status keys whose
    values replace the stored objects; the physical ``model`` follows the inner reading the
    status will carry (this pass's, else the kept one)."""
    inner = summary.workload or pool.status.workload_capacity
    out: JSON = {
        "physicalCapacity": replacing(physical_capacity(rows, summary.free_gpus, inner)),
    }
    if summary.workload is not None:
        out["workloadCapacity"] = replacing(summary.workload)
    shape = device_shape(summary.workload, pool.status.cell_device_shape)
    if shape is not None:  # never cleared: a pool scaled to zero keeps the last one learned
        out["cellDeviceShape"] = replacing(shape)
    if summary.plan is not None:  # the list replaces the stored one: [] clears it
        out["planRejections"] = [r.to_api() for r in published_rejections(summary.plan)]
    elif not pool.spec.autoscaling.enabled and pool.status.plan_rejections:
        out["planRejections"] = []  # autoscaling turned off: no plan, nothing rejected
    return out


def published_rejections(checked: CheckedPlan) -> list[PlanRejection]:
    """``status.planRejections`` for ``checked`` (empty: the whole plan was accepted): the first
    ``MAX_PLAN_REJECTIONS`` (the CRD's bound; a longer list would fail every status write)."""
    rejections = checked.rejections[:MAX_PLAN_REJECTIONS]
    return [
        PlanRejection(
            step=v.step,
            cell=v.cell,
            reason=v.rejection.value,
            message=v.message[:1024],
            retry_after=to_time(v.retry_after_s),
        )
        for v in rejections
    ]


def status_patch(
    pool: GPUCellPool,
    rows: list[CellStatus],
    conds: list[dict[str, Any]],
    desired: int,
    capacity: Mapping[str, Any] | None = None,
) -> JSON:
    """The merge patch, preconditioned on the resourceVersion ``pool`` was read at;
    ``capacity``: the keys of ``capacity_status`` (left out: the stored objects stay)."""
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
        **(capacity or {}),
    }
    if not pool.spec.autoscaling.enabled:
        status["desiredReplicas"] = desired
    patch: JSON = {"status": status}
    if pool.metadata.resource_version:  # always, for a pool read from the apiserver
        patch["metadata"] = {"resourceVersion": pool.metadata.resource_version}
    return patch


def rebase(patch: JSON, live: Mapping[str, Any]) -> JSON:
    """``patch`` re-aimed at ``live`` (the pool re-read after a 409): preconditioned on its
    resourceVersion, every condition type the provisioner does not own exactly as ``live`` has
    it, and no ``desiredReplicas`` once ``live`` is autoscaled (the autoscaler owns it then).
    Rows, counts and ``observedGeneration`` stay: they say what this pass saw and did."""
    live_status = live.get("status") or {}
    theirs = [
        dict(c)
        for c in live_status.get("conditions") or []
        if c.get("type") not in PROVISIONER_CONDITIONS
    ]
    status = dict(patch["status"])
    status["conditions"] = theirs + own_conditions(status["conditions"])
    if ((live.get("spec") or {}).get("autoscaling") or {}).get("enabled"):
        status.pop("desiredReplicas", None)
    version = (live.get("metadata") or {}).get("resourceVersion")
    return {"metadata": {"resourceVersion": version}, "status": status}


async def write_status(api: KubeApi, pool: GPUCellPool, patch: JSON) -> list[dict[str, Any]]:
    """Write ``patch`` (from ``status_patch``); on 409 re-read and ``rebase``, at most
    ``STATUS_WRITE_ATTEMPTS`` writes. Returns the conditions written; raises ``Conflict`` when
    every attempt lost the race or the pool is gone or was re-created (another uid)."""
    meta, kind = pool.metadata, KINDS["GPUCellPool"]
    for attempt in range(1, STATUS_WRITE_ATTEMPTS + 1):
        try:
            await api.patch(kind, meta.namespace, meta.name, patch, status=True)
        except Conflict:
            if attempt == STATUS_WRITE_ATTEMPTS:
                raise
            live = await api.get(kind, meta.namespace, meta.name)
            if live is None or (live.get("metadata") or {}).get("uid") != meta.uid:
                raise
            patch = rebase(patch, live)
            continue
        conds: list[dict[str, Any]] = patch["status"]["conditions"]
        return conds
    raise AssertionError("unreachable")  # pragma: no cover
