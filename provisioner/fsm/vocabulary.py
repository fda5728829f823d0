"""The words the provisioner's pure core speaks: cell phases, cell reasons, stall reasons.

Why this module exists: every other module in ``provisioner.fsm`` (state machine, membership,
rollout, drain) and every adapter that writes ``status.cells[]`` must agree on the exact
spelling of a phase or a reason, because users and alerts match on them. The phase enum is
part of the GPUCellPool API, so it is re-exported from ``gpucellpool.api`` (the single source
of truth); the reasons are the provisioner's own vocabulary.
"""

from __future__ import annotations

import enum

from gpucellpool.api.status import PRE_GPU_PHASES, CellPhase

__all__ = [
    "CREATING_PHASES",
    "PRE_GPU_PHASES",
    "TEARDOWN_PHASES",
    "CellPhase",
    "CellReason",
    "StallReason",
]


# Phases a cell passes through on its way to Ready; they count as "in flight".
CREATING_PHASES: frozenset[CellPhase] = frozenset(
    {
        CellPhase.PENDING,
        CellPhase.ALLOCATING_GPU,
        CellPhase.GUEST_PROVISIONING,
        CellPhase.BOOTING,
        CellPhase.JOINING,
        CellPhase.AWAITING_GPU_CAPACITY,
    }
)
# Phases owned by teardown: the state machine never moves a cell out of them.
TEARDOWN_PHASES: frozenset[CellPhase] = frozenset({CellPhase.DRAINING, CellPhase.DELETING})
# PRE_GPU_PHASES (before the guest holds a GPU) is part of the API: gpucellpool.api.status.


class CellReason(enum.StrEnum):
    """Machine-readable cause in ``status.cells[].reason`` and in Events.

    The first block are the reasons of the earlier implementation (same spelling, same
    meaning). The second block names the "waiting" states, so that every decision carries a
    reason, not only failures.
    """

    CELL_PROVISION_TIMEOUT = "CellProvisionTimeout"
    NODE_NEVER_REGISTERED = "NodeNeverRegistered"
    JOIN_TIMEOUT = "JoinTimeout"
    GPU_NOT_ADVERTISED = "GPUNotAdvertised"
    NODE_NAME_COLLISION = "NodeNameCollision"
    UNREACHABLE = "Unreachable"
    WAITING_FOR_ALLOCATIONS = "WaitingForAllocations"
    DRAIN_TIMED_OUT = "DrainTimedOut"
    CELL_DRAINING = "CellDraining"

    GUEST_NOT_CREATED = "GuestNotCreated"
    GUEST_FAILED = "GuestFailed"
    GUEST_NETWORK_FAILED = "GuestNetworkFailed"
    WAITING_FOR_GPU_ALLOCATION = "WaitingForGPUAllocation"
    WAITING_FOR_GUEST = "WaitingForGuest"
    WAITING_FOR_ADDRESS = "WaitingForAddress"
    WAITING_FOR_NODE = "WaitingForNode"
    NODE_NOT_READY = "NodeNotReady"
    WAITING_FOR_GPU_CAPACITY = "WaitingForGPUCapacity"
    FOREIGN_NODE = "ForeignNode"
    CELL_READY = "CellReady"
    CELL_DELETING = "CellDeleting"
    EVICTING_PODS = "EvictingPods"


class StallReason(enum.StrEnum):
    """Why membership refuses to create or replace cells (``Progressing`` condition)."""

    INSUFFICIENT_PHYSICAL_GPU = "InsufficientPhysicalGPU"
    CELL_REPLACEMENT_EXHAUSTED = "CellReplacementExhausted"
    FAULT_NOT_IN_THE_CELL = "FaultNotInTheCell"
    BOOTSTRAP_CREDENTIAL_SUSPECT = "BootstrapCredentialSuspect"
    UNREACHABLE = "Unreachable"
    BOOTSTRAP_TEMPLATE_INVALID = "BootstrapTemplateInvalid"
    # Not membership's own: a scale-down victim is in drain back-off (fsm.drain_backoff) and
    # no other cell can stand in, so the pool stays above its target for now.
    SCALE_DOWN_HELD = "ScaleDownHeld"
    # Not membership's own: pool deletion waits because a PodDisruptionBudget refused an
    # eviction (drain.mode Evict); it proceeds at deletion.drainTimeout.
    EVICTION_BLOCKED = "EvictionBlocked"
