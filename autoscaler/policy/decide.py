"""``decide``: one pure scaling decision per observation, with a reason for every outcome.

Why this module exists: it is the heart of the operator, and the one function both the live
loop and the simulator call (ARCHITECTURE §3-4). Order of work:

1. Pool fit: pods no fresh cell could host are reported as ``unschedulable``; they never count
   as demand and never block scale-down.
2. Pack the rest into Ready cells, then Booting cells, then new cells (``packing``). A pod
   pending past ``stuck_pending_seconds`` may not count on Ready cells HAMi already passed it
   over on; with evicting drains, pods on Draining cells are packed too (they need a home).
3. Raw recommendation = max(min replicas, current + cells the packed backlog needs + missing
   headroom, forecast) when that is above the current count; else current minus the cells that
   could go (below threshold, keeping headroom), never below min or the forecast.
4. Scale up at once by what is needed, bounded by max replicas, free physical GPUs, the
   in-flight limit (Booting cells count; only while no cell is Ready or one is Failed,
   ``limits.in_flight_limit``) and rate policies; the lowest recommendation over the up
   window wins (HPA). Scale down only when metrics are fresh, the workload cluster is
   reachable, scale-down is enabled, the post-scale-up delay has passed, the highest
   recommendation over the down window allows it, within rate policies and (for cells with
   pods) the disruption budget, and only cells idle for the whole window whose pods re-pack
   elsewhere. Legacy cooldowns (``scale_*_cooldown_seconds``) pace both directions; the
   min-replicas floor is never paced.
5. ``Shadow`` mode returns the same decision, memory included, with ``act=False``.

"Current" counts Ready and Booting cells; Draining and Failed cells count toward nothing
(Draining ones that still hold pods only toward the disruption budget).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from autoscaler.policy import cell_index, limits, next_change, same_facts, warm_spare
from autoscaler.policy.decide_paths import Inputs, hold, scale_down, scale_up
from autoscaler.policy.decision import Decision, Reason, Unschedulable
from autoscaler.policy.fit import fits_fresh_cell
from autoscaler.policy.forecast import forecast_demand
from autoscaler.policy.hedge import (
    NO_HEDGE,
    Hedge,
    cancel_boots,
    cancellable,
    hedge,
    hedge_delay_over,
    hedge_delay_seconds,
    pods_waiting,
    ripe_unused,
    still_unused,
    unused_grace_seconds,
)
from autoscaler.policy.packing import PackingResult, pack_bins
from autoscaler.policy.policy_config import Mode, PolicyConfig
from autoscaler.policy.scale_down import (
    hand_over_idle,
    pods_to_move,
    with_idle_cells,
)
from autoscaler.policy.types import CellState, CellView, Observation, PendingPod, PolicyMemory

FORECAST_TOLERANCE = 0.1  # a forecast of 3.08 cells asks for 3, not 4 (HPA-style tolerance)


def _split_fit(
    pending: Sequence[PendingPod], config: PolicyConfig
) -> tuple[tuple[PendingPod, ...], tuple[Unschedulable, ...]]:
    fitting: list[PendingPod] = []
    unfit: list[Unschedulable] = []
    for pod in pending:
        result = fits_fresh_cell(pod, config.shape, config.node_template)
        if result.ok:
            fitting.append(pod)
        else:
            unfit.append(Unschedulable(pod.key, result.reason, result.message))
    return tuple(fitting), tuple(unfit)


def _stuck(
    fitting: Sequence[PendingPod], cells: Sequence[CellView], config: PolicyConfig, now: float
) -> dict[str, frozenset[str]]:
    """Pods pending past ``stuck_pending_seconds``, and the Ready cells HAMi passed them over on
    (Ready when the pod arrived)."""
    if config.stuck_pending_seconds <= 0:
        return {}
    out: dict[str, frozenset[str]] = {}
    for pod in fitting:
        if now - pod.first_seen < config.stuck_pending_seconds:
            continue
        passed = frozenset(
            c.name
            for c in cells
            if c.state == CellState.READY
            and c.ready_at is not None
            and c.ready_at <= pod.first_seen
        )
        if passed:
            out[pod.key] = passed
    return out


def _displaced(cells: Sequence[CellView]) -> list[PendingPod]:
    """Pods still running on Draining cells: they will need a home once evicted, so they are
    packed like pending pods (capacity is found, or started, before the eviction)."""
    out: list[PendingPod] = []
    for cell in cells:
        if cell.state == CellState.DRAINING:
            moved = pods_to_move(cell, cell.gpus)
            out += [replace(p, key=f"draining:{p.key}") for p in moved]
    return out


def _removable(
    below: Sequence[CellView],
    packing: PackingResult,
    empty: int,
    headroom: int,
    index: cell_index.CellIndex,
) -> int:
    """Candidates that could go while keeping ``headroom`` empty cells."""
    empty_below = index.empty_among(below, packing)
    return (len(below) - empty_below) + min(empty_below, max(0, empty - headroom))


def _forecast(
    observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float, used: int
) -> tuple[float | None, int]:
    if not config.prewarm:
        return None, 0
    window = config.forecast_window_seconds
    samples = limits.add_sample(memory.demand_samples, now, float(used), window)
    value = forecast_demand(
        samples, now, config.boot_seconds, config.forecast_window_seconds, config.forecast_method
    )
    if value is None:
        return None, 0
    return value, max(0, math.ceil(value - FORECAST_TOLERANCE))


def _inputs(
    observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
) -> Inputs:
    cells = observation.cells
    # each cell's facts are derived once per view and kept between calls (cell_index)
    index = cell_index.index_of(cells, config.shape, config.utilization_threshold)
    booting, ready = index.count(CellState.BOOTING), index.count(CellState.READY)
    current = ready + booting
    failed = index.count(CellState.FAILED)
    draining = index.draining_busy()
    trusted = observation.metrics.fresh and observation.workload_cluster_reachable
    pending = observation.pending if observation.workload_cluster_reachable else ()
    fitting, unfit = _split_fit(pending, config)
    stuck = _stuck(fitting, cells, config, now)
    rehome = config.rehome_draining_pods and observation.workload_cluster_reachable
    idle = observation.idle_cells if config.scale_down_on_usage else frozenset()
    displaced = _displaced([c for c in cells if c.name not in idle]) if rehome else []
    packing = pack_bins(
        (*fitting, *displaced), index.bins, config.shape, config.packing_heuristic, excluded=stuck
    )
    empty = index.empty_after(packing)
    headroom = warm_spare.headroom_cells(memory, config, now)
    below_packed = index.below(packing)  # scale_down.candidates on the packed utilisation
    below = tuple(with_idle_cells(cells, below_packed, idle) if idle else below_packed)
    forecast, forecast_target = (
        _forecast(observation, memory, config, now, packing.cells_used()) if trusted else (None, 0)
    )
    return Inputs(
        current=current,
        booting=booting,
        draining=draining,
        fitting=fitting,
        unschedulable=unfit,
        packing=packing,
        below=below,
        empty_cells=empty,
        headroom=headroom,
        headroom_missing=max(0, headroom - empty),
        removable=_removable(below, packing, empty, headroom, index),
        forecast=forecast,
        forecast_target=forecast_target,
        trusted=trusted,
        stuck=len(stuck),
        displaced=len(displaced),
        ready=ready,
        failed=failed,
        proven_before=memory.boots_proven,
    )


def _hedge(
    observation: Observation,
    memory: PolicyMemory,
    inp: Inputs,
    config: PolicyConfig,
    now: float,
) -> Hedge:
    """Spare boots for the cells pending pods wait for (``policy.hedge``); none when what is
    pending cannot be trusted, spares could not be cancelled (scale-down off), or boots are
    not proven to work (a new pool's first wave, a Failed cell: no boot beyond the need)."""
    down_off = not config.scale_down_enabled or config.scale_down.select_policy == "Disabled"
    evidence = limits.boot_evidence(inp.ready, inp.failed, inp.proven_before)
    if down_off or config.boot_hedge_fraction <= 0 or not inp.trusted:
        return NO_HEDGE
    if evidence != limits.PROVEN:
        return NO_HEDGE
    usage, new = inp.packing.usage, inp.packing.new_cells
    grace = unused_grace_seconds(config)
    unused = ripe_unused(observation.cells, memory.never_used, grace, now)
    fraction, smallest = config.boot_hedge_fraction, config.boot_hedge_min_wave
    placements = inp.packing.placements if config.boot_hedge_per_pod else ()
    pods = pods_waiting(observation.cells, placements)
    hedged = hedge(observation.cells, usage, new, fraction, unused, smallest, pods)
    if hedged.missing and not hedge_delay_over(inp.fitting, hedge_delay_seconds(config), now):
        return replace(hedged, due=False)
    return hedged


def _raw(inp: Inputs, config: PolicyConfig, reachable: bool) -> int:
    ceiling = max(config.max_replicas, config.min_replicas)
    if not reachable:  # nothing observed can be trusted: only the floor may move the count
        return min(max(config.min_replicas, inp.current), ceiling)
    up = inp.current + inp.packing.new_cells + inp.headroom_missing + inp.spares
    target = max(config.min_replicas, up, inp.forecast_target)
    if target <= inp.current:
        down = inp.current - (inp.removable if inp.trusted else 0)
        target = max(config.min_replicas, down, inp.forecast_target)
    return min(target, ceiling)


def _never_used(
    observation: Observation, memory: PolicyMemory, config: PolicyConfig, inp: Inputs
) -> frozenset[str]:
    """``hedge.still_unused`` while hedging (nothing is kept otherwise: the memory, and so the
    status, of a pool without the hedge is unchanged). Untrusted pods keep only Booting cells:
    a Ready cell nobody could see is not known to be unused."""
    if config.boot_hedge_fraction <= 0:
        return frozenset()
    before = memory.never_used if inp.trusted else frozenset()
    return still_unused(observation.cells, before)


def _remember(
    memory: PolicyMemory,
    config: PolicyConfig,
    inp: Inputs,
    now: float,
    raw: int,
    never_used: frozenset[str],
    idle: tuple[dict[str, float], tuple[tuple[float, float], ...]],
) -> PolicyMemory:
    """Memory after this call, before any scale event is recorded (``idle``: ``_idle``)."""
    # A swap seen in halves (a pod took an idle cell; the cell about to fall idle has not yet)
    # is recorded as the pool still having the idle cell whose time waits (``_idle``): the
    # half-seen swap's one-observation rise does not hold a whole stabilisation window.
    waiting = len(idle[1])
    kept = raw if raw > inp.current else max(config.min_replicas, raw - waiting)
    recs = limits.trim(
        (*memory.recommendations, (now, kept)), now, limits.recommendation_horizon(config)
    )
    samples = memory.demand_samples
    if inp.trusted:
        used = float(inp.packing.cells_used())
        samples = limits.add_sample(samples, now, used, config.forecast_window_seconds)
    events = limits.trim(memory.scale_events, now, limits.event_horizon(config))
    evidence = limits.boot_evidence(inp.ready, inp.failed, memory.boots_proven)
    horizon = limits.scale_up_horizon(config)
    ups = tuple(u for u in memory.scale_ups if now - u[0] < horizon)
    return replace(
        memory,
        scale_ups=ups,
        recommendations=recs,
        idle_since=idle[0],
        idle_left=idle[1],
        demand_samples=samples,
        scale_events=events,
        boots_proven=evidence == limits.PROVEN,
        never_used=never_used,
    )


def _idle(
    memory: PolicyMemory, config: PolicyConfig, inp: Inputs, now: float, cells: Sequence[CellView]
) -> tuple[dict[str, float], tuple[tuple[float, float], ...]]:
    """Each idle cell's first idle time and the idle times waiting to be handed over
    (``scale_down.hand_over_idle``); nothing when the metrics cannot be trusted."""
    if not inp.trusted:
        return {}, ()
    grace = config.idle_hand_over_boots * config.boot_seconds
    return hand_over_idle(memory.idle_since, memory.idle_left, inp.below, now, cells, grace)


def decide(
    observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
) -> Decision:
    """The target cell count for one pool, why, and the memory to hand back next time."""
    inp = _inputs(observation, memory, config, now)
    idle = _idle(memory, config, inp, now, observation.cells)
    hedged = _hedge(observation, memory, inp, config, now)
    inp = replace(inp, spares=hedged.missing)
    raw = _raw(inp, config, observation.workload_cluster_reachable)
    unused = _never_used(observation, memory, config, inp)
    keep = max(config.min_replicas, inp.forecast_target)
    cancel = cancellable(hedged, inp.current, keep, inp.empty_cells, inp.headroom)
    cancelling = bool(cancel) and raw <= inp.current
    if cancelling:  # the surplus boots going now are not needed either
        raw = max(keep, raw - min(cancel, len(hedged.surplus)))
    mem = _remember(memory, config, inp, now, raw, unused, idle)
    if cancelling:
        decision = cancel_boots(hedged, cancel, inp.current, mem, now)
    elif raw > inp.current:
        decision = scale_up(observation, mem, config, now, inp, raw)
    elif raw < inp.current:
        decision = scale_down(observation, mem, config, now, inp, raw)
    else:
        decision = hold(observation, mem, config, inp)
    used = float(inp.packing.cells_used()) if inp.trusted else None
    packed, down = bool(inp.fitting or inp.displaced), raw < inp.current
    reads = same_facts.reads(observation, config, decision.reason, down, packed, hedged != NO_HEDGE)
    # ``steady`` reads only the decision's memory: one copy of the decision carries it all.
    # No promise while an idle time waits to be handed over: what is recorded moves at its
    # grace's end (``_remember``), within seconds.
    steady = None
    if not decision.memory.idle_left:
        steady = next_change.steady(observation, memory, decision, config, now, raw, used, reads)
    return replace(
        decision,
        cells_needed=inp.packing.new_cells,
        pending_asks=len(inp.fitting),
        unschedulable=inp.unschedulable,
        forecast_cells=inp.forecast,
        steady=steady,
        act=decision.act and config.mode != Mode.SHADOW,
    )


__all__ = ["Reason", "decide"]
