"""Template hash over the whole cell shape, and rolling-update planning.

Why this module exists: a running VM never re-reads its spec, so the only way to apply a changed
cell shape is to replace the cell. Two pure decisions make that safe:

* ``template_hash``: 10 hex chars of SHA-256 over canonical JSON (sorted keys, no whitespace,
  ``None`` dropped) of the WHOLE cell shape - guestTemplate, GPU backend and its settings,
  provisioner and clusterAPI, spreadPolicy, nodeIPFrom, bootstrap (and a digest of the join
  template's content), the Node labels/annotations/taints and the expected HAMi devices. The
  earlier implementation hashed only the raw guestTemplate bytes, so a GPU-backend or bootstrap
  edit never marked a cell stale, and key order changed the hash.
* ``plan_rollout``: Deployment-style ``maxSurge`` / ``maxUnavailable`` over cells. A stale cell
  is never deleted in place: it is marked Draining, and the drain (cordon, wait for idle or
  evict, with its own timeout) empties it first. Idle stale cells go before busy ones. Defaults
  (surge 0, unavailable 1) are the earlier one-cell-at-a-time behaviour. A stale cell whose
  last drain was abandoned (``fsm.drain_backoff``: a PodDisruptionBudget blocked it until
  ``drain.timeout``) is skipped while its back-off lasts - another stale cell takes its turn, or
  the update waits - instead of being cordoned again every timeout; the ``Updated`` message
  says which cells are held and for how long.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucellpool.api.pool import GPUCellPool
from provisioner.fsm.drain_backoff import hold_note
from provisioner.fsm.vocabulary import CREATING_PHASES, TEARDOWN_PHASES, CellPhase

HASH_HEX_CHARS = 10


def _drop_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_drop_none(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Stable JSON: sorted keys, no whitespace, ``None`` members dropped, UTF-8 kept."""
    return json.dumps(_drop_none(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def hash_shape(shape: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(shape).encode("utf-8")).hexdigest()[:HASH_HEX_CHARS]


def cell_shape(pool: GPUCellPool, bootstrap_digest: str = "") -> dict[str, Any]:
    """Everything that is baked into a cell when it is created (defaults applied).

    ``bootstrap_digest``: a digest of the join template content (the shell hashes the Secret
    bytes; the content itself never reaches this module's outputs). Timeouts are not shape.
    """
    spec = pool.spec
    bootstrap = None
    if spec.bootstrap is not None:
        bootstrap = spec.bootstrap.to_api()
        bootstrap.pop("readyTimeout", None)
    node = spec.workload_cluster.node
    return {
        "cell": spec.cell.to_api(),
        "bootstrap": bootstrap,
        "bootstrapDigest": bootstrap_digest or None,
        "node": node.to_api() if node is not None else None,
        "expectedDevices": spec.expected_devices_per_cell(),
    }


def template_hash(pool: GPUCellPool | Mapping[str, Any], bootstrap_digest: str = "") -> str:
    """The ``cells.kubeswift.io/template-hash`` of cells built from this pool now."""
    model = pool if isinstance(pool, GPUCellPool) else GPUCellPool.model_validate(pool)
    return hash_shape(cell_shape(model, bootstrap_digest))


@dataclass(frozen=True, slots=True)
class RolloutCell:
    """``busy``: HAMi allocations on the Node (None = unknown, treated as busy).
    ``held_for_s``: what is left of the cell's drain back-off (0: not held); ``held_until_s``:
    when that back-off ends (Unix seconds, named in the message); ``abandons``: its abandoned
    drains so far (``fsm.drain_backoff``)."""

    name: str
    index: int
    phase: CellPhase
    template_hash: str = ""
    busy: bool | None = None
    draining_for_rollout: bool = False
    held_for_s: float = 0.0
    held_until_s: float = 0.0
    abandons: int = 0


@dataclass(frozen=True, slots=True)
class RolloutInput:
    """``max_surge`` / ``max_unavailable``: an int count or a percentage string ("25%") of
    ``desired_replicas``; surge rounds up, unavailable rounds down; both 0 means 1 unavailable."""

    cells: tuple[RolloutCell, ...]
    current_hash: str
    desired_replicas: int
    rolling_update: bool = False
    workload_reachable: bool = True
    max_surge: int | str = 0
    max_unavailable: int | str = 1


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """``drain``: stale cells to mark Draining now (reason RollingUpdate).
    ``creation_adjustment``: pass to membership (extra cells to create for surge, or negative
    to hold back a replacement while a drained cell still holds its GPU).
    ``reason``: the ``Updated`` condition reason; ``stale``: names of stale cells."""

    reason: str
    drain: tuple[str, ...] = ()
    creation_adjustment: int = 0
    stale: tuple[str, ...] = ()
    message: str = ""


def resolve_count(value: int | str, total: int, round_up: bool) -> int:
    """An int, or "N%" of ``total`` (rounded up for surge, down for unavailable)."""
    if isinstance(value, int):
        return max(value, 0)
    text = value.strip()
    if not text.endswith("%"):
        return max(int(text), 0)
    scaled = int(text[:-1]) * total / 100
    return max(math.ceil(scaled) if round_up else math.floor(scaled), 0)


def is_stale(cell: RolloutCell, current_hash: str) -> bool:
    """An empty hash (cells of the earlier implementation) counts as current."""
    return cell.template_hash not in ("", current_hash)


def _drain_order(cell: RolloutCell) -> tuple[int, int, int]:
    """Not-yet-Ready cells first (nothing to lose), then idle, then busy; lowest index first."""
    not_ready = 0 if cell.phase is not CellPhase.READY else 1
    busy = 0 if cell.busy is False else 1
    return (not_ready, busy, cell.index)


def plan_rollout(inp: RolloutInput) -> RolloutPlan:
    """Which stale cells to drain now, and how many extra cells to create for surge."""
    live = [c for c in inp.cells if c.phase not in TEARDOWN_PHASES]
    stale = sorted((c for c in live if is_stale(c, inp.current_hash)), key=_drain_order)
    names = tuple(c.name for c in sorted(stale, key=lambda c: c.index))
    rollout_draining = sum(1 for c in inp.cells if c.draining_for_rollout)
    if not stale and rollout_draining == 0:
        return RolloutPlan(reason="AllCellsCurrent")
    if not inp.rolling_update:
        msg = f"{len(stale)} cell(s) built from an older template; updatePolicy is Manual"
        return RolloutPlan(reason="TemplateChanged", stale=names, message=msg)
    if not inp.workload_reachable:
        msg = "workload cluster unreachable"
        return RolloutPlan(reason="UpdateBlocked", stale=names, message=msg)
    desired = inp.desired_replicas
    surge = resolve_count(inp.max_surge, desired, round_up=True)
    unavailable = resolve_count(inp.max_unavailable, desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    available = sum(1 for c in live if c.phase is CellPhase.READY)
    budget = available - (desired - unavailable)
    drain: list[str] = []
    held = [c for c in stale if c.held_for_s > 0]
    for cell in stale:
        if cell.held_for_s > 0:
            continue  # drain back-off: the next stale cell takes its turn
        if cell.phase in CREATING_PHASES or cell.phase is CellPhase.FAILED:
            drain.append(cell.name)  # not available anyway: costs no availability
        elif budget > 0:
            drain.append(cell.name)
            budget -= 1
    draining = rollout_draining + len(drain)
    # Never more than desired + surge objects holding GPUs; no surge cell beyond the stale ones.
    adjustment = min(surge - draining, len(stale) - len(drain))
    reason = "RollingUpdate" if draining or adjustment > 0 else "UpdateBlocked"
    msg = (
        f"{len(stale)} stale cell(s); draining {len(drain)} now "
        f"(maxSurge {surge}, maxUnavailable {unavailable}, {available} available)"
    )
    if held:
        notes = "; ".join(hold_note(c.name, c.abandons, c.held_until_s) for c in held)
        msg += f"; held: {notes}"
    return RolloutPlan(
        reason=reason, drain=tuple(drain), creation_adjustment=adjustment, stale=names, message=msg
    )
