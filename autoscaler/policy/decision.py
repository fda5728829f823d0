"""What the scaling policy returns: the target, its reason, the victims and how long it holds.

Why this module exists: a ``Decision`` is the one output of ``decide``, read by the live loop
(published as ``status.lastDecision``, ``autoscaler.explain``), by the simulator's actuator and
by the provisioner's plan check through the published victims. Its ``Reason`` values are the
machine-readable reasons users see, so they are kept apart from the observation values
(``autoscaler.policy.types``) and the configuration (``autoscaler.policy.policy_config``).
Plain frozen values: nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from autoscaler.policy.types import PolicyMemory


class Reason(enum.StrEnum):
    """Machine-readable reason for every outcome, including doing nothing."""

    SCALED_UP = "ScaledUp"
    SCALED_DOWN = "ScaledDown"
    # hedged spare cells that never ran a pod given up (boots cancelled, unused Ready cells
    # retired; autoscaler.policy.hedge): not a scale-down of cells that served
    SPARES_CANCELLED = "SparesCancelled"
    PREWARMED = "Prewarmed"
    HEADROOM = "Headroom"
    STABILIZING = "Stabilizing"
    RATE_LIMITED = "RateLimited"
    AT_MAX_REPLICAS = "AtMaxReplicas"
    AT_MIN_REPLICAS = "AtMinReplicas"
    BELOW_MIN_REPLICAS = "BelowMinReplicas"
    IN_FLIGHT_LIMIT = "InFlightLimit"
    INSUFFICIENT_PHYSICAL_GPU = "InsufficientPhysicalGPU"
    DEMAND_UNSATISFIABLE = "DemandUnsatisfiable"
    CELL_SHAPE_UNKNOWN = "CellShapeUnknown"  # no cell above the floor until a shape is known
    DEMAND_SATISFIED = "DemandSatisfied"  # pending pods fit free or booting capacity
    METRICS_STALE = "MetricsStale"  # scale-down frozen
    SCALE_DOWN_DISABLED = "ScaleDownDisabled"
    SCALE_DOWN_DELAYED = "ScaleDownDelayed"  # too soon after a scale-up
    DISRUPTION_BUDGET = "DisruptionBudget"
    NO_IDLE_CELL = "NoIdleCell"
    WORKLOAD_CLUSTER_UNREACHABLE = "WorkloadClusterUnreachable"
    IDLE = "Idle"  # nothing pending, nothing to remove


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A pending pod no fresh cell of this pool could ever host, and why."""

    key: str
    reason: str  # e.g. NodeSelectorMismatch, TooManyGPUs, CardInsufficientMemory
    message: str


class Reads(enum.StrEnum):
    """What of the cells a decision read (``policy.same_facts``), for a caller to tell which
    changed observations would give the same decision."""

    FACTS = "facts"  # counts and each cell's facts (state, empty, below threshold, busy drain)
    CELLS = "cells"  # any cell's usage (pods packed, a victim's pods re-packed)


@dataclass(frozen=True, slots=True)
class Steady:
    """How long a decision holds while the observation stays the same (``policy.next_change``).

    Before ``until`` (seconds, the caller's clock), calling ``decide`` again with the same
    observation gives the same count, reason, victims and ``act``; each such call would only
    record ``raw`` (the raw recommendation; None: nothing) and ``cells_used`` (a demand sample;
    None: nothing) in memory, trimmed to the horizons. A caller may skip those calls (the
    simulator) or sleep until ``until`` (the live loop's requeue) and lose nothing. So does an
    observation that differs only in what ``reads`` says the decision did not look at
    (``policy.same_facts.holds_after``).
    """

    until: float
    raw: int | None = None
    cells_used: float | None = None
    recommendation_horizon_seconds: float = 0.0
    event_horizon_seconds: float | None = None  # None: scale events are not trimmed
    sample_window_seconds: float = 0.0
    reads: Reads = Reads.CELLS  # a changed observation may repeat it (``policy.same_facts``)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy wants, and why.

    ``desired_replicas`` is the target cell count. ``victims`` names cells to drain (cheapest
    first) when scaling down. ``act`` is False in Shadow mode: publish, do not act.
    """

    desired_replicas: int
    reason: Reason
    message: str
    memory: PolicyMemory
    victims: tuple[str, ...] = ()
    act: bool = True
    cells_needed: int = 0  # cells the packed backlog needs beyond free and booting capacity
    pending_asks: int = 0  # pending pods that count for this pool
    unschedulable: tuple[Unschedulable, ...] = ()
    forecast_cells: float | None = None
    # None: no promise, decide again at the next tick (see ``Steady``)
    steady: Steady | None = None
    # Of ``victims``, those chosen while they ran no pod (surplus boots and unused spares
    # cancelled, empty idle cells scaled down): the provisioner keeps one that a pod runs on by
    # the time it acts (``provisioner.fsm.plan_check``, ``VictimInUse``)
    empty_victims: tuple[str, ...] = ()
