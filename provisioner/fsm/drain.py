"""The drain decision: what to do next to a cell that is leaving the pool.

Why this module exists: removing a cell must never pull a GPU from under running pods by
accident, and must never hang forever by accident either. One pure function answers "what is
the next step for this cell?" from a fresh observation; the shell performs that one step
(cordon, evict, delete Node, release finalizer, delete outer objects), re-observes and asks
again, so every destructive step is re-checked against fresh state.

Sequence: cordon -> WaitForIdle (no HAMi allocations left) or Evict (evict the Node's pods
through the Eviction API; PodDisruptionBudgets are enforced by the API server, 429 retries are
the shell's job) -> on ``timeout``: pool deletion proceeds anyway (``DrainTimedOut``), an
implicit drain (scale-down, rolling update) is abandoned (uncordon, keep the cell) -> delete
the workload Node -> release the ``cell-drain`` finalizer -> delete the outer objects. Unknown
never proceeds: unreadable allocations count as busy. ``Force`` pool deletion and the
replacement of a Failed cell skip the wait; ``Force`` first deletes the Node's pods (grace
period 0, no eviction: the VM is destroyed right after), once - a refused delete never holds a
forced deletion. A cell leaving because its infrastructure Node is drained (``OuterNodeDrain``,
``fsm.drain_outer``) drains like a scale-down but, at ``timeout``, proceeds like a pool deletion:
keeping it would only see it chosen again while its host stays drained. Pool deletion also
decides when the pool's own finalizer may go.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpucellpool.api.autoscaling import DrainMode
from provisioner.fsm.vocabulary import CellPhase, CellReason, StallReason


class DrainCause(enum.StrEnum):
    SCALE_DOWN = "ScaleDown"
    ROLLING_UPDATE = "RollingUpdate"
    POOL_DELETION = "PoolDeletion"
    OUTER_DELETED = "OuterDeleted"  # a user deleted the SwiftGuest / Machine by hand
    REPLACE_FAILED = "ReplaceFailed"
    OUTER_NODE_DRAIN = "OuterNodeDrain"  # the infrastructure Node hosting the cell is drained


class DrainAction(enum.StrEnum):
    CORDON = "Cordon"
    EVICT = "Evict"
    DELETE_PODS = "DeletePods"  # Force: delete without eviction
    WAIT = "Wait"
    ABANDON = "Abandon"  # uncordon, return the cell to service
    DELETE_NODE = "DeleteNode"
    RELEASE_FINALIZER = "ReleaseFinalizer"
    DELETE_OUTER = "DeleteOuter"
    DONE = "Done"


@dataclass(frozen=True, slots=True)
class PodOnNode:
    """A pod bound to the cell's Node. DaemonSet and mirror pods are never evicted."""

    namespace: str
    name: str
    uses_gpu: bool = False
    daemonset: bool = False
    mirror: bool = False
    terminating: bool = False

    @property
    def evictable(self) -> bool:
        return not (self.daemonset or self.mirror or self.terminating)


@dataclass(frozen=True, slots=True)
class DrainInput:
    """One observation of a leaving cell. ``allocations``: HAMi allocations on the Node
    (allocated + to-allocate), meaningful only when ``allocations_known``. ``started_at_s``:
    when the drain began (for pool deletion: the pool's deletionTimestamp). ``timeout_s``: None
    waits for ever."""

    cause: DrainCause
    now_s: float
    started_at_s: float
    mode: DrainMode = DrainMode.WAIT_FOR_IDLE
    timeout_s: float | None = None
    force: bool = False
    workload_reachable: bool = True
    node_exists: bool = True
    node_cordoned: bool = False
    allocations_known: bool = False
    allocations: int = 0
    pods: tuple[PodOnNode, ...] = ()
    finalizer_present: bool = True
    outer_exists: bool = True
    outer_deleting: bool = False
    pods_deleted: bool = False  # Force: the pods' deletion was already requested this pass


@dataclass(frozen=True, slots=True)
class DrainStep:
    """The next action, the cell's phase/reason while it happens, and pods to evict now.
    ``node_left_behind``: teardown proceeds without deleting the Node (workload cluster
    unreachable after a pool-deletion timeout); the shell reports it. ``delete``: pods to
    delete without eviction now (Force). ``refused``: set by the shell after an evict step."""

    action: DrainAction
    phase: CellPhase
    reason: str
    message: str
    evict: tuple[PodOnNode, ...] = ()
    node_left_behind: bool = False
    delete: tuple[PodOnNode, ...] = ()
    refused: tuple[str, ...] = ()  # "ns/name" whose eviction a PodDisruptionBudget refused


def _teardown(inp: DrainInput, reason: str, message: str) -> DrainStep:
    """Delete Node, release finalizer, delete outer objects: one step per call."""
    deleting = CellPhase.DELETING
    if inp.node_exists and inp.workload_reachable:
        return DrainStep(DrainAction.DELETE_NODE, deleting, reason, message)
    left_behind = inp.node_exists and not inp.workload_reachable
    if inp.finalizer_present:
        step = DrainAction.RELEASE_FINALIZER
    elif not inp.outer_deleting:
        step = DrainAction.DELETE_OUTER
    else:
        step = DrainAction.WAIT
        message = "waiting for KubeSwift / Cluster API to delete the outer objects"
    return DrainStep(step, deleting, reason, message, node_left_behind=left_behind)


def _timed_out(inp: DrainInput) -> bool:
    return inp.timeout_s is not None and inp.now_s - inp.started_at_s >= inp.timeout_s


def _busy_step(inp: DrainInput, evictable: tuple[PodOnNode, ...]) -> DrainStep:
    """The cell still has work on it and the drain has not timed out."""
    draining = CellPhase.DRAINING
    if inp.mode is DrainMode.EVICT and evictable:
        # GPU consumers first (they hold the HAMi allocations), then by name for stability.
        order = sorted(evictable, key=lambda p: (not p.uses_gpu, p.namespace, p.name))
        msg = f"evicting {len(order)} pod(s)"
        return DrainStep(
            DrainAction.EVICT, draining, CellReason.EVICTING_PODS, msg, evict=tuple(order)
        )
    if not inp.allocations_known:
        msg = "HAMi allocations unreadable; unknown never proceeds"
    else:
        msg = f"{inp.allocations} HAMi allocation(s) left on the Node"
    return DrainStep(DrainAction.WAIT, draining, CellReason.WAITING_FOR_ALLOCATIONS, msg)


def _forced_step(inp: DrainInput) -> DrainStep:
    """Force (pool deletion) deletes the pods once, then tears down; a Failed cell's
    replacement tears down at once."""
    doomed = tuple(p for p in inp.pods if not (p.daemonset or p.mirror))
    if inp.force and doomed and inp.node_exists and not inp.pods_deleted:
        msg = f"deleting {len(doomed)} pod(s) without eviction (Force)"
        return DrainStep(
            DrainAction.DELETE_PODS,
            CellPhase.DELETING,
            CellReason.CELL_DELETING,
            msg,
            delete=doomed,
        )
    return _teardown(inp, CellReason.CELL_DELETING, "tearing down without waiting")


def _gate_step(inp: DrainInput) -> DrainStep | None:
    """Steps that do not depend on the Node's workload: gone, forced, unreachable, cordon."""
    if not inp.outer_exists:
        return DrainStep(DrainAction.DONE, CellPhase.DELETING, CellReason.CELL_DELETING, "gone")
    if inp.force or inp.cause is DrainCause.REPLACE_FAILED:
        return _forced_step(inp)
    if not inp.workload_reachable:
        if inp.cause is DrainCause.POOL_DELETION and _timed_out(inp):
            return _teardown(inp, CellReason.DRAIN_TIMED_OUT, "drain timed out while unreachable")
        msg = "workload cluster unreachable; drain paused"
        return DrainStep(DrainAction.WAIT, CellPhase.DRAINING, CellReason.UNREACHABLE, msg)
    if inp.node_exists and not inp.node_cordoned:
        msg = "cordoning the Node"
        return DrainStep(DrainAction.CORDON, CellPhase.DRAINING, CellReason.CELL_DRAINING, msg)
    return None


def decide_drain(inp: DrainInput) -> DrainStep:
    """The next step for one leaving cell."""
    gate = _gate_step(inp)
    if gate is not None:
        return gate
    evictable = tuple(p for p in inp.pods if p.evictable)
    idle = not inp.node_exists or (
        inp.allocations_known
        and inp.allocations == 0
        and not (inp.mode is DrainMode.EVICT and evictable)
    )
    if idle:
        return _teardown(inp, CellReason.CELL_DRAINING, "Node is idle")
    if _timed_out(inp):
        proceeding = (
            DrainCause.POOL_DELETION,
            DrainCause.OUTER_DELETED,
            DrainCause.OUTER_NODE_DRAIN,
        )
        if inp.cause in proceeding:
            return _teardown(inp, CellReason.DRAIN_TIMED_OUT, "drain timed out; proceeding")
        msg = "drain timed out; uncordoning and keeping the cell"
        return DrainStep(DrainAction.ABANDON, CellPhase.READY, CellReason.DRAIN_TIMED_OUT, msg)
    return _busy_step(inp, evictable)


@dataclass(frozen=True, slots=True)
class PoolDeletionPlan:
    """``drain``: cells to force into Draining now; ``release_pool_finalizer``: no cell object
    remains, the pool's finalizer may go; ``timed_out``: the pool's drainTimeout has passed."""

    drain: tuple[str, ...]
    release_pool_finalizer: bool
    timed_out: bool


def plan_pool_deletion(
    cells: tuple[tuple[str, CellPhase], ...],
    deletion_started_s: float,
    drain_timeout_s: float,
    now_s: float,
) -> PoolDeletionPlan:
    """Every listed cell (name, phase) drains; the window runs from the deletionTimestamp."""
    drain = tuple(
        name for name, phase in cells if phase not in (CellPhase.DRAINING, CellPhase.DELETING)
    )
    return PoolDeletionPlan(
        drain=drain,
        release_pool_finalizer=not cells,
        timed_out=now_s - deletion_started_s >= drain_timeout_s,
    )


def eviction_hold(refused: tuple[str, ...], remaining_s: float) -> tuple[str | None, str]:
    """Pool deletion's ``Progressing`` stall while PodDisruptionBudgets refuse evictions:
    (reason, message), or (None, "") when nothing was refused this pass."""
    if not refused:
        return None, ""
    return StallReason.EVICTION_BLOCKED, (
        f"pool deletion held: a PodDisruptionBudget refused the eviction of "
        f"{', '.join(refused)}; deletion proceeds anyway in {max(remaining_s, 0):.0f}s "
        "(deletion.drainTimeout)"
    )
