"""The loop's per-pool state and settings, and the metrics it records after each decision.

Why this module exists: ``autoscaler.loop`` is the control flow (wake, debounce, observe,
decide, publish); what it remembers per pool between decisions, the knobs of its timing, and
the translation of one decision into the pool's metrics are plain data and one plain function,
kept here so the loop module stays readable.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.explain import Outcome
from autoscaler.gang_pods import PLACEHOLDER_UID_PREFIX
from autoscaler.loop_ports import PoolRecorder
from autoscaler.observe import utilisation
from autoscaler.policy.config import policy_config_from_spec, pool_shape
from autoscaler.policy.decision import Decision, Reason, Steady
from autoscaler.policy.expander import PoolShare
from autoscaler.policy.next_change import advance
from autoscaler.policy.pool_demand import ParseMemo
from autoscaler.policy.types import Observation, PendingPod, PolicyMemory
from autoscaler.usage_freshness import PodChanges
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.runtime.runner import RunnerSettings

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class LoopSettings:
    debounce_s: float = 0.15
    """Quiet time that ends a burst of watch events (one decision for the whole burst)."""
    max_debounce_s: float = 1.0
    """Upper bound of the trailing debounce, so a steady stream of events cannot starve."""
    leading_edge: bool = True
    """A wake-up of a pool quiet for ``debounce_s`` decides at once (the keyed runner's leading
    edge; not for pools with a scale-up cooldown); what follows it is debounced trailing."""
    tick_s: float = 10.0
    """Time-based rules (stabilisation, delays) need a decision even when nothing changes; the
    cadence while the last decision made no promise (``Decision.steady`` None), and for a pool
    reading Prometheus (its usage changes without any watch event)."""
    resync_s: float = 60.0
    """Longest sleep while the last decision holds (``Decision.steady``): the pool decides at the
    earliest of a wake-up, ``steady.until`` (a window or delay ending, at its exact time) and
    this periodic resync (never shorter than ``tick_s``). Only for pools without Prometheus."""
    memory_persist_s: float = 30.0
    """How often memory is written back when its scaling facts (``scale_facts``) are unchanged;
    a restart loses at most this much of its samples (``resync_s`` while a decision holds: the
    samples of the ticks slept through are recorded at the next decision)."""
    usage_timeout_s: float = 5.0
    """Bound on a Prometheus read inside a decision."""
    message_refresh_s: float = 30.0
    """How often a status whose decision changed only in its message's text is rewritten."""
    writes_in_flight: int = 32
    """Status applies (with the memory) in flight at once across every pool, and as many
    Events: enough for 50 pools deciding one burst together without queueing most of them
    behind the others, still a bound an overloaded apiserver works through within the request
    timeout."""
    unsynced_retry_s: float = 1.0
    """The tick while the workload caches are not synced: events are routed to the pools they
    concern, so no event may come for a pool once its caches finish syncing."""


@dataclass(slots=True)
class PoolState:
    pool: GPUCellPool
    raw_status: JSON
    memory: PolicyMemory | None = None
    first_seen: dict[str, float] = field(default_factory=dict)
    published: Outcome | None = None
    event_reason: str | None = None  # the reason of the last Event posted
    latency_reported: set[str] = field(default_factory=set)  # pods whose wait was observed
    memory_written_at: float = float("-inf")
    facts_written: tuple[Any, ...] | None = None  # ``scale_facts`` of the memory last written
    status_written_at: float = float("-inf")
    decisions: int = 0
    skipped: int = 0  # wake-ups whose decision inputs had not changed (see ``_unchanged``)
    last_decision: Decision | None = None
    last_inputs: tuple[Any, ...] | None = None
    decided_at: float = float("-inf")
    steady: Steady | None = None  # the last decision's promise (``Decision.steady``)
    steady_memory: PolicyMemory | None = None  # the memory that decision left (replay base)
    synced: bool = True
    measured: Any = None  # autoscaler.measured_use.MeasuredUse of the last observation
    measured_published: tuple[Any, ...] | None = None  # measured_use.published() last written
    share: PoolShare = field(default_factory=PoolShare)
    """The expander's split of the last observed pending pods (``autoscaler.sharing``)."""
    cluster_of: tuple[GPUCellPool, object] | None = None
    """``WorkloadView.cluster_of`` of the pool object it was computed for (``Autoscaler``'s
    ``_state_identity``)."""
    parsed: ParseMemo = field(default_factory=dict)
    """The pending pods' parsed asks by UID (``pool_demand.pending_for_pool``'s memo), kept
    for the pods still counted."""
    pod_changes: PodChanges = field(default_factory=PodChanges)
    """When the pods of each Node the pool reads last changed (``autoscaler.usage_freshness``)."""


def runner_settings(settings: LoopSettings) -> RunnerSettings:
    """The keyed runner's timing for decisions: the loop's debounce (a pending pod decided
    within ~``debounce_s``, a storm within ``max_debounce_s``), and a failed decision retried
    after 1 s, doubling up to a tick (never more often than before once it keeps failing)."""
    return RunnerSettings(
        debounce_min_s=settings.debounce_s,
        debounce_max_s=settings.max_debounce_s,
        backoff_base_s=min(1.0, settings.tick_s),
        backoff_max_s=settings.tick_s,
        gate_recheck_s=settings.tick_s,
    )


def leads(state: PoolState) -> bool:
    """Whether a wake-up that finds the pool quiet decides at once (the keyed runner's leading
    edge, with ``LoopSettings.leading_edge``). Not for a pool pacing its scale-ups by a cooldown
    (legacy ``stabilizationWindow``): the first decision of a burst would start the cooldown
    having seen only the burst's head. Nor for a pool's first decision, or one after a look at
    unsynced workload caches: a new pool's workload connection is still opening, and deciding
    at once would publish 'workload cluster unreachable' for a cluster that is only connecting."""
    cooldown_s = state.pool.spec.autoscaling.scale_up_rules().cooldown_seconds
    return state.decisions > 0 and state.synced and cooldown_s == 0.0


def due(state: PoolState, settings: LoopSettings) -> float:
    """When the pool next decides unless woken: a tick after the last decision, or, while that
    decision holds (``Decision.steady``), at its ``until`` but no later than the resync
    (``LoopSettings.resync_s``; the tick for a pool reading Prometheus, whose usage changes
    without any event)."""
    if not state.synced:
        return state.decided_at + settings.unsynced_retry_s
    tick, steady = settings.tick_s, state.steady
    if steady is None or steady.until <= state.decided_at:
        return state.decided_at + tick
    resync = settings.resync_s if state.pool.spec.autoscaling.prometheus is None else 0.0
    return min(steady.until, state.decided_at + max(tick, resync))


def replayed(state: PoolState, memory: PolicyMemory, now: float, tick_s: float) -> PolicyMemory:
    """``memory`` as deciding every ``tick_s`` would have left it by ``now``: a held decision
    (``Decision.steady``) lets the task sleep past ticks, and each of those identical calls would
    have recorded its samples (``next_change.advance`` replays them exactly), so stabilisation
    windows count as if the pool had decided every tick."""
    steady = state.steady
    if steady is None or memory is not state.steady_memory:
        return memory  # no promise, or the memory was reloaded (takeover, wake_all)
    end = min(now, steady.until)
    count = max(0, math.ceil((end - state.decided_at) / tick_s) - 1)
    times = [state.decided_at + tick_s * k for k in range(1, count + 1)]
    return advance(memory, steady, [t for t in times if t < end])


def scale_facts(memory: PolicyMemory) -> tuple[Any, ...]:
    """What of the memory must survive a restart at once: when and by how much it scaled.

    Written the moment they change (a restart must not scale down just after a scale-up); the
    rolling samples (recommendations, idle times, demand) are written every
    ``memory_persist_s``, which bounds what a restart can lose of them.
    """
    return memory.last_scale_up_at, memory.last_scale_down_at, memory.scale_events


def pending_labels(pod: PendingPod) -> tuple[str, ...]:
    """The pending-pod series' labels (``PENDING_LABELS``): the pod and its per-GPU ask, so a
    trace recorded from Prometheus (``gpucellpool trace record``) knows what a pod that waited,
    or never ran, asked for."""
    namespace, _, name = pod.key.partition("/")
    ask = pod.ask
    return (
        namespace,
        name,
        str(ask.gpu_count),
        "" if ask.memory_mib is None else str(ask.memory_mib),
        "" if ask.memory_percent is None else str(ask.memory_percent),
        str(ask.cores_percent),
    )


def pending_series(
    first_seen: Mapping[str, float], pending: Sequence[PendingPod]
) -> dict[tuple[str, ...], float]:
    """The pending-pod series (labels -> first seen) of ``pending``, less the placeholders of
    booked ProvisioningRequests (``autoscaler.gang_pods``; known by their UIDs in
    ``first_seen``): capacity held for a gang, not pods that asked, so a trace recorded from
    the series must not replay them as demand."""
    held = {
        uid.removeprefix(PLACEHOLDER_UID_PREFIX)
        for uid in first_seen
        if uid.startswith(PLACEHOLDER_UID_PREFIX)
    }
    return {pending_labels(p): p.first_seen for p in pending if p.key not in held}


def record_metrics(
    recorder: PoolRecorder, state: PoolState, decision: Decision, obs: Observation, now: float
) -> set[str]:
    """Record one decision; the pending pods whose decision latency is now reported."""
    oldest = min(state.first_seen.values(), default=now)
    recorder.record_decision(
        reason=decision.reason.value,
        desired=decision.desired_replicas,
        demand_cells=float(decision.cells_needed),
        allocated_cells=float(len(state.pool.status.cells or [])),
        pending_asks=decision.pending_asks,
        unschedulable=len(decision.unschedulable),
        oldest_pending_age_seconds=max(0.0, now - oldest),
        now=now,
    )
    recorder.record_pending(pending_series(state.first_seen, obs.pending))
    recorder.record_reachable(obs.workload_cluster_reachable)
    config = policy_config_from_spec(state.pool.spec, pool_shape(state.pool))
    recorder.record_limits(
        min_cells=config.min_replicas,
        max_cells=config.max_replicas,
        boot_seconds=config.boot_seconds,
        stabilization_seconds=config.scale_down.stabilization_window_seconds,
    )
    recorder.record_cells(Counter(c.phase for c in state.pool.status.cells or []))
    shape = config.shape
    ratio = utilisation(obs.cells, shape) if obs.metrics.fresh else None
    recorder.record_utilization(ratio, fresh=obs.metrics.fresh, age_seconds=obs.metrics.age_seconds)
    if decision.reason is not Reason.SCALED_UP or not decision.act:
        return state.latency_reported
    # Each pending pod's wait until capacity for it was requested, counted once.
    for pod in obs.pending:
        if pod.key not in state.latency_reported:
            recorder.observe_decision_latency(now - pod.first_seen)
    return {p.key for p in obs.pending}
