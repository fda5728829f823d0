"""Pool status from one pass: counts, the provisioner's conditions, one server-side apply.

Why this module exists: status is how a user (and ``kubectl wait``) learns what the provisioner
did and why. The rows come from the state machine; this module adds the counts and the
``WorkloadClusterReachable``, ``Progressing`` and ``Ready`` conditions (transition times kept
while the status does not change), and writes them.

Each status field has one owner (docs/architecture.md, "Who writes which status field"). The
provisioner server-side-applies the fields it owns (``PROVISIONER_FIELDS`` and the
``PROVISIONER_CONDITIONS`` entries of the ``conditions`` list, which the CRD keys by ``type``)
as field manager ``STATUS_FIELD_MANAGER``, forced, and nothing else: the autoscaler's fields
and conditions (its own manager) are never in the body, so neither writer can revert the
other, and no ``resourceVersion`` precondition or re-read is needed. An apply removes what its
manager owned and no longer sends, so every apply carries every owned field: values this pass
did not produce (``workloadCapacity`` when HAMi was not read, ``cellDeviceShape``,
``planRejections`` when no plan was checked) are sent back as stored (``stored_status``).
``desiredReplicas`` of a pool without autoscaling goes under ``REPLICAS_FIELD_MANAGER`` and
only when it differs, so it is not removed when autoscaling is turned on.

An older provisioner wrote status with a merge patch as ``gpucellpool``; ``write_status``
folds that ownership into the new manager's once per pool (``fsm.field_ownership``).
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
from provisioner.fsm.field_ownership import is_legacy_status_entry, upgraded_managed_fields
from provisioner.fsm.inventory import PhysicalCondition
from provisioner.fsm.plan_check import CheckedPlan
from provisioner.fsm.pool_capacity import physical_capacity
from provisioner.fsm.rows import to_time
from provisioner.fsm.vocabulary import TEARDOWN_PHASES
from provisioner.kube import (
    FIELD_MANAGER,
    JSON,
    KINDS,
    REPLICAS_FIELD_MANAGER,
    STATUS_FIELD_MANAGER,
    Conflict,
    KubeApi,
)
from provisioner.workload import Reachability

PROVISIONER_FIELDS = frozenset(
    {
        "observedGeneration",
        "replicas",
        "selector",
        "readyCells",
        "creatingCells",
        "drainingCells",
        "failedCells",
        "cells",
        "physicalCapacity",
        "workloadCapacity",
        "cellDeviceShape",
        "planRejections",
    }
)
"""The status keys the provisioner owns (besides its conditions, and ``desiredReplicas`` of a
pool without autoscaling, which has a manager of its own)."""
DESIRED_REPLICAS = "desiredReplicas"
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
    """Only the provisioner's condition types (what its Events and its applies speak for)."""
    return [dict(c) for c in conds if c.get("type") in PROVISIONER_CONDITIONS]


def capacity_status(pool: GPUCellPool, rows: list[CellStatus], summary: PassSummary) -> JSON:
    """``physicalCapacity`` (always) and ``workloadCapacity`` (when read) as status keys (a
    field left out of an object is removed by the apply); the physical ``model`` follows the
    inner reading the status will carry (this pass's, else the kept one)."""
    inner = summary.workload or pool.status.workload_capacity
    out: JSON = {
        "physicalCapacity": physical_capacity(rows, summary.free_gpus, inner).to_api(),
    }
    if summary.workload is not None:
        out["workloadCapacity"] = summary.workload.to_api()
    shape = device_shape(summary.workload, pool.status.cell_device_shape)
    if shape is not None:  # never cleared: a pool scaled to zero keeps the last one learned
        out["cellDeviceShape"] = shape.to_api()
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


def stored_status(pool: GPUCellPool) -> JSON:
    """The provisioner's status fields as ``pool`` stores them (its conditions only), which
    an apply that does not recompute them sends back unchanged."""
    stored = pool.status.to_api()
    out: JSON = {key: value for key, value in stored.items() if key in PROVISIONER_FIELDS}
    out["conditions"] = own_conditions(stored.get("conditions") or [])
    return out


def apply_body(pool: GPUCellPool, status: Mapping[str, Any]) -> JSON:
    """A server-side apply body for ``pool``'s status subresource."""
    meta = pool.metadata
    return {
        "apiVersion": pool.api_version,
        "kind": pool.kind,
        "metadata": {"name": meta.name, "namespace": meta.namespace},
        "status": dict(status),
    }


def status_patch(
    pool: GPUCellPool,
    rows: list[CellStatus],
    conds: list[dict[str, Any]],
    desired: int,
    capacity: Mapping[str, Any] | None = None,
) -> JSON:
    """The apply body of every status field the provisioner owns: this pass's rows, counts and
    conditions (only its own types); ``capacity``: the keys of ``capacity_status`` (left out:
    the stored objects are sent back). ``desiredReplicas`` is in it for a pool without
    autoscaling (``write_status`` sends it under its own manager)."""
    c = count(rows)
    ordered = sorted(rows, key=lambda r: r.index)
    status: JSON = {
        **stored_status(pool),
        "observedGeneration": pool.metadata.generation,
        "replicas": len(rows),
        "selector": pool.selector(),
        "readyCells": c.ready,
        "creatingCells": c.creating,
        "drainingCells": c.draining,
        "failedCells": c.failed,
        "cells": [r.to_api() for r in ordered],
        "conditions": own_conditions(conds),
        **(capacity or {}),
    }
    if not pool.spec.autoscaling.enabled:
        status[DESIRED_REPLICAS] = desired
    return apply_body(pool, status)


async def write_status(api: KubeApi, pool: GPUCellPool, body: JSON) -> list[dict[str, Any]]:
    """Apply ``body`` (from ``status_patch``) as ``STATUS_FIELD_MANAGER``, after the one-time
    managed-fields upgrade of a pool an older provisioner wrote (``upgrade_ownership``); then
    ``desiredReplicas`` as ``REPLICAS_FIELD_MANAGER`` when the pool stores another value.
    Returns the conditions written. Raises ``NotFound`` when the pool is gone and ``Conflict``
    when the upgrade lost a race (the next pass re-reads)."""
    status = dict(body["status"])
    desired = status.pop(DESIRED_REPLICAS, None)
    await upgrade_ownership(api, pool)
    await api.apply({**body, "status": status}, status=True, field_manager=STATUS_FIELD_MANAGER)
    if desired is not None and (
        "desired_replicas" not in pool.status.model_fields_set
        or pool.status.desired_replicas != desired
    ):
        replicas = apply_body(pool, {DESIRED_REPLICAS: desired})
        await api.apply(replicas, status=True, field_manager=REPLICAS_FIELD_MANAGER)
    conds: list[dict[str, Any]] = status["conditions"]
    return conds


def legacy_owned(pool: GPUCellPool) -> bool:
    """Whether ``pool`` (as read) carries the old merge-patch ownership of its status."""
    entries = (pool.metadata.model_extra or {}).get("managedFields")
    if not isinstance(entries, list):
        return False
    return any(isinstance(e, dict) and is_legacy_status_entry(e, FIELD_MANAGER) for e in entries)


async def upgrade_ownership(api: KubeApi, pool: GPUCellPool) -> bool:
    """Fold the old manager's status ownership into ``STATUS_FIELD_MANAGER``'s (what the
    Kubernetes docs prescribe when a writer moves from client-side to server-side apply), once:
    only when ``pool`` shows the old entry, re-checked on the live object, written with its
    ``resourceVersion`` as precondition. True when it rewrote ``managedFields``."""
    if not legacy_owned(pool):
        return False
    meta, kind = pool.metadata, KINDS["GPUCellPool"]
    live = await api.get(kind, meta.namespace, meta.name)
    live_meta = (live or {}).get("metadata") or {}
    if live is None or live_meta.get("uid") != meta.uid:
        raise Conflict(409, f"GPUCellPool {meta.namespace}/{meta.name} was deleted or re-created")
    rewritten = upgraded_managed_fields(
        live_meta.get("managedFields") or [],
        old_manager=FIELD_MANAGER,
        new_manager=STATUS_FIELD_MANAGER,
        owned_keys=PROVISIONER_FIELDS,
        owned_conditions=frozenset(str(c) for c in PROVISIONER_CONDITIONS),
    )
    if rewritten is None:
        return False
    patch = {
        "metadata": {
            "resourceVersion": live_meta.get("resourceVersion"),
            "managedFields": rewritten,
        }
    }
    await api.patch(kind, meta.namespace, meta.name, patch)
    return True
