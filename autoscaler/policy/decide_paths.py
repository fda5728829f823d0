"""The three outcomes of ``decide``: scale up, scale down, hold; each with its guards.

Why this module exists: ``decide`` derives one ``Inputs`` value from the observation and then
takes exactly one of these paths. Keeping each path a small function with its guards in a
fixed order makes "which rule fired" readable and testable: every return names a ``Reason``
and says it with numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from autoscaler.policy import limits, warm_spare
from autoscaler.policy.decision import Decision, Reason, Unschedulable
from autoscaler.policy.packing import PackingResult
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.scale_down import (
    VictimLimits,
    choose_victims,
    drain_order,
    idle_for,
    is_empty,
)
from autoscaler.policy.types import CellState, CellView, Observation, PendingPod, PolicyMemory


@dataclass(frozen=True, slots=True)
class Inputs:
    """Everything derived from one observation that the paths use."""

    current: int  # Ready + Booting cells
    booting: int
    draining: int  # Draining cells that still hold pods (they spend the disruption budget)
    fitting: tuple[PendingPod, ...]
    unschedulable: tuple[Unschedulable, ...]
    packing: PackingResult
    below: tuple[CellView, ...]  # Ready cells below the utilisation threshold (projected)
    empty_cells: int  # Ready/Booting cells that hold nothing after packing
    headroom: int  # empty cells to keep: headroom_cells, or the warm spare (policy.warm_spare)
    headroom_missing: int
    removable: int
    forecast: float | None
    forecast_target: int
    trusted: bool  # metrics fresh and workload cluster reachable
    stuck: int = 0  # pending pods HAMi passed over on Ready cells (see _stuck in decide)
    displaced: int = 0  # pods (or GPU blocks) on Draining cells, packed like pending pods
    ready: int = 0  # Ready cells: boots that succeeded (one lifts the in-flight limit)
    failed: int = 0  # Failed cells: boots that failed (any restores the in-flight limit)
    proven_before: bool = False  # PolicyMemory.boots_proven as handed in
    spares: int = 0  # hedged spare boots this decision starts (policy.hedge)


def _decision(
    desired: int, reason: Reason, message: str, memory: PolicyMemory, victims: tuple[str, ...] = ()
) -> Decision:
    return Decision(desired, reason, message, memory, victims)


def _up_bounds(
    obs: Observation, mem: PolicyMemory, config: PolicyConfig, now: float, inp: Inputs
) -> list[tuple[Reason, int, str]]:
    """(reason, cells allowed, detail) for every bound on adding cells, in report order."""
    bounds = [
        (Reason.AT_MAX_REPLICAS, config.max_replicas - inp.current, f"max {config.max_replicas}")
    ]
    if obs.free_physical_gpus is not None:
        gpus = obs.free_physical_gpus
        allowed = gpus // max(config.shape.gpus, 1)
        detail = f"{gpus} free physical GPU(s), {config.shape.gpus} per cell"
        bounds.append((Reason.INSUFFICIENT_PHYSICAL_GPU, allowed, detail))
    in_flight = _in_flight_bound(config, inp)
    if in_flight is not None:
        bounds.append(in_flight)
    rate = limits.rate_allowance(config.scale_up, mem.scale_events, now, inp.current, +1)
    if rate is not None:
        bounds.append((Reason.RATE_LIMITED, rate, f"scale-up rate policy allows {rate} now"))
    if not config.shape_known:
        detail = "no cell shape known (no cell has reported one; none declared)"
        bounds.append((Reason.CELL_SHAPE_UNKNOWN, 0, detail))
    return bounds


def _in_flight_bound(config: PolicyConfig, inp: Inputs) -> tuple[Reason, int, str] | None:
    """``maxCellsInFlight`` until a Ready cell proves boots work, and while a cell is Failed;
    None (no in-flight bound) once boots are proven (``limits.in_flight_limit``)."""
    proven = inp.proven_before
    limit = limits.in_flight_limit(config.max_cells_in_flight, inp.ready, inp.failed, proven)
    if limit is None:
        return None
    evidence = limits.boot_evidence(inp.ready, inp.failed, proven)
    why = "no cell Ready yet" if evidence == limits.UNPROVEN else f"{inp.failed} Failed cell(s)"
    detail = f"{inp.booting} booting of {limit} in flight ({why})"
    return Reason.IN_FLIGHT_LIMIT, limit - inp.booting, detail


def _headroom_words(config: PolicyConfig, inp: Inputs) -> str:
    if inp.headroom > config.headroom_cells:  # policy.warm_spare raised it
        keep = f"{config.warm_spare_seconds:g}s"
        lone = config.warm_spare_lone_arrivals
        if lone > 0:
            why = f"{lone}+ lone arrivals in a pool sharing GPUs within the last {keep}"
            return f"warm spare asks {inp.headroom} ({why})"
        return f"warm spare asks {inp.headroom} (the pool grew within the last {keep})"
    return f"headroom asks {inp.headroom}"


def _up_driver(config: PolicyConfig, inp: Inputs) -> tuple[Reason, str]:
    spares = f"; {inp.spares} spare boot(s) hedge them" if inp.spares else ""
    if inp.packing.new_cells > 0:
        why = f"{len(inp.fitting)} pending pod(s) need {inp.packing.new_cells} new cell(s)"
        if inp.stuck:
            why += f" ({inp.stuck} pending too long to count on their Ready cells)"
        if inp.displaced:
            why += f" (with {inp.displaced} pod(s) to re-home from draining cells)"
        return Reason.SCALED_UP, why + spares
    if config.min_replicas > inp.current:
        return Reason.BELOW_MIN_REPLICAS, f"below min replicas {config.min_replicas}"
    if inp.headroom_missing > 0:
        why = f"{inp.empty_cells} empty cell(s), {_headroom_words(config, inp)}"
        return Reason.HEADROOM, why + spares
    if inp.spares > 0 and inp.spares + inp.current >= inp.forecast_target:
        why = f"{len(inp.fitting)} pending pod(s) wait for booting cells{spares}"
        return Reason.SCALED_UP, why
    return Reason.PREWARMED, f"forecast {inp.forecast or 0.0:.2f} cells in {config.boot_seconds:g}s"


def scale_up(
    obs: Observation, mem: PolicyMemory, config: PolicyConfig, now: float, inp: Inputs, raw: int
) -> Decision:
    """Add every cell the target needs at once, within max, GPUs, in-flight and rate limits."""
    floor = min(config.min_replicas, config.max_replicas)
    # windows and cooldowns pace growth above the floor; the floor itself is never paced
    target = max(limits.stabilised_up(mem.recommendations, now, config.scale_up, raw), floor)
    window = config.scale_up.stabilization_window_seconds
    cooldown = config.scale_up_cooldown_seconds
    since = None if mem.last_scale_up_at is None else now - mem.last_scale_up_at
    if since is not None and since < cooldown and inp.current >= floor:
        msg = f"last scale-up {since:g}s ago, cooldown {cooldown:g}s; holding {inp.current}"
        return _decision(inp.current, Reason.STABILIZING, msg, mem)
    if target <= inp.current:
        msg = f"lowest recommendation in the last {window:g}s is {target}; holding {inp.current}"
        return _decision(inp.current, Reason.STABILIZING, msg, mem)
    wanted = target - inp.current
    bounds = _up_bounds(obs, mem, config, now, inp)
    increase = max(0, min([wanted, *(allowed for _, allowed, _ in bounds)]))
    reason, why = _up_driver(config, inp)
    unclamped = inp.current + inp.packing.new_cells + inp.headroom_missing + inp.spares
    if increase < wanted:
        reason, detail, _ = next((r, d, a) for r, a, d in bounds if max(a, 0) == increase)
        why = f"{why}; capped by {detail}"
    elif max(unclamped, inp.forecast_target) > config.max_replicas:
        reason, why = Reason.AT_MAX_REPLICAS, f"{why}; capped by max {config.max_replicas}"
    desired = inp.current + increase
    if desired < floor:  # the floor is declared, not paced: like HPA, min wins over rate limits
        reason, why = Reason.BELOW_MIN_REPLICAS, f"{why}; raised to min replicas {floor}"
        increase, desired = floor - inp.current, floor
    msg = f"{why}; wanted +{wanted}, scaling {inp.current} -> {desired}"
    if increase > 0:
        events = (*mem.scale_events, (now, increase))
        ups = mem.scale_ups
        if config.boot_hedge_fraction > 0:  # only a hedging pool takes scale-ups back
            ups = (*ups, (now, inp.current, mem.last_scale_up_at))
        episodes = mem.growth_episodes
        if warm_spare.records_growth(config):
            shares = warm_spare.pool_shares(obs.cells, inp.fitting, config.shape)
            new_cells = inp.packing.new_cells
            episodes = warm_spare.grown(episodes, config, now, new_cells, shares)
        mem = replace(
            mem, last_scale_up_at=now, scale_events=events, scale_ups=ups, growth_episodes=episodes
        )
    return _decision(desired, reason, msg, mem)


def _first(rules: list[tuple[bool, Reason, str]]) -> tuple[Reason, str] | None:
    """The first rule whose condition holds, as (reason, message)."""
    return next(((reason, msg) for cond, reason, msg in rules if cond), None)


def _down_guard(
    obs: Observation, mem: PolicyMemory, config: PolicyConfig, now: float, inp: Inputs, raw: int
) -> tuple[Reason, str] | None:
    """The first rule that forbids removing cells now, or None (rules in priority order)."""
    delay = config.scale_down_delay_after_scale_up_seconds
    since = None if mem.last_scale_up_at is None else now - mem.last_scale_up_at
    actions = [t for t in (mem.last_scale_up_at, mem.last_scale_down_at) if t is not None]
    quiet = now - max(actions) if actions else None
    cooldown = config.scale_down_cooldown_seconds
    found = _first(
        [
            (
                not obs.workload_cluster_reachable,
                Reason.WORKLOAD_CLUSTER_UNREACHABLE,
                "workload cluster unreachable: no scale-down",
            ),
            (
                not obs.metrics.fresh,
                Reason.METRICS_STALE,
                f"metrics stale ({obs.metrics.detail}): scale-down frozen",
            ),
            (
                not config.scale_down_enabled,
                Reason.SCALE_DOWN_DISABLED,
                f"{inp.removable} removable cell(s); scale-down is off",
            ),
            (
                since is not None and since < delay,
                Reason.SCALE_DOWN_DELAYED,
                f"last scale-up {since or 0.0:g}s ago, delay is {delay:g}s",
            ),
            (
                quiet is not None and quiet < cooldown,
                Reason.STABILIZING,
                f"last scaling action {quiet or 0.0:g}s ago, scale-down cooldown {cooldown:g}s",
            ),
        ]
    )
    return found if found is not None else _window_guard(mem, config, now, inp, raw)


def _window_guard(
    mem: PolicyMemory, config: PolicyConfig, now: float, inp: Inputs, raw: int
) -> tuple[Reason, str] | None:
    """The last two rules of ``_down_guard``: the down window's highest recommendation, then
    the rate policies (computed only when the rules before them let the scale-down pass)."""
    target = limits.stabilised_down(mem.recommendations, now, config.scale_down, raw)
    if target >= inp.current:
        window = config.scale_down.stabilization_window_seconds
        return Reason.STABILIZING, f"highest recommendation in the last {window:g}s is {target}"
    if limits.rate_allowance(config.scale_down, mem.scale_events, now, inp.current, -1) == 0:
        return Reason.RATE_LIMITED, "scale-down rate policy allows 0 cells now"
    return None


def scale_down(
    obs: Observation, mem: PolicyMemory, config: PolicyConfig, now: float, inp: Inputs, raw: int
) -> Decision:
    """Remove cells idle for the whole window whose pods re-pack, cheapest to drain first."""
    guard = _down_guard(obs, mem, config, now, inp, raw)
    if guard is not None:
        return _decision(inp.current, guard[0], guard[1], mem)
    window = config.scale_down.stabilization_window_seconds
    eligible = idle_for(inp.below, mem.idle_since, now, window)
    refused = [c.name for c in eligible if c.name in obs.protected]  # the provisioner's word
    eligible = [c for c in eligible if c.name not in obs.protected]
    if not eligible:
        msg = f"{len(inp.below)} cell(s) below threshold, none for the whole {window:g}s window"
        if refused:
            names = ", ".join(refused)
            msg = f"idle cell(s) {names} refused by the provisioner (status.planRejections)"
            return _decision(inp.current, Reason.NO_IDLE_CELL, msg, mem)
        return _decision(inp.current, Reason.STABILIZING, msg, mem)
    target = limits.stabilised_down(mem.recommendations, now, config.scale_down, raw)
    rate = limits.rate_allowance(config.scale_down, mem.scale_events, now, inp.current, -1)
    limit = inp.current - target if rate is None else min(inp.current - target, rate)
    busy_limit = max(0, config.disruption_budget - inp.draining)
    ready = [c for c in obs.cells if c.state == CellState.READY]
    choice = choose_victims(
        drain_order(eligible, inp.packing.utilisation),
        ready,
        inp.packing.usage,
        config.shape,
        VictimLimits(limit, busy_limit, max(0, inp.empty_cells - inp.headroom)),
        obs.idle_cells if config.scale_down_on_usage else frozenset(),
    )
    if not choice.victims and choice.over_budget:
        budget = config.disruption_budget
        msg = f"{inp.draining} cell(s) with pods draining, disruption budget {budget}"
        return _decision(inp.current, Reason.DISRUPTION_BUDGET, msg, mem)
    if not choice.victims:
        msg = f"{len(eligible)} idle cell(s), none removable: pods of {choice.blocked} fit nowhere"
        return _decision(inp.current, Reason.NO_IDLE_CELL, msg, mem)
    n = len(choice.victims)
    events = (*mem.scale_events, (now, -n))
    mem = replace(mem, last_scale_down_at=now, scale_events=events, scale_ups=())
    msg = f"{n} cell(s) idle for {window:g}s and drainable; scaling {inp.current} -> "
    msg += str(inp.current - n)
    down = _decision(inp.current - n, Reason.SCALED_DOWN, msg, mem, choice.victims)
    return replace(down, empty_victims=running_nothing(obs.cells, choice.victims))


def running_nothing(cells: Sequence[CellView], victims: Sequence[str]) -> tuple[str, ...]:
    """Of ``victims``, those no pod runs on now (no pod, no GPU slot held): if one runs a pod
    by the time the provisioner acts, it is kept (``plan_check``'s ``VictimInUse``)."""
    empty = {c.name for c in cells if is_empty(c, c.gpus)}
    return tuple(v for v in victims if v in empty)


def hold(obs: Observation, mem: PolicyMemory, config: PolicyConfig, inp: Inputs) -> Decision:
    """Nothing to add or remove; say which rule kept the count where it is."""
    reason, msg = _hold_reason(obs, config, inp)
    return _decision(inp.current, reason, f"{msg}; holding {inp.current}", mem)


def _hold_reason(obs: Observation, config: PolicyConfig, inp: Inputs) -> tuple[Reason, str]:
    below, floor = len(inp.below), config.min_replicas
    found = _first(
        [
            (
                not obs.workload_cluster_reachable,
                Reason.WORKLOAD_CLUSTER_UNREACHABLE,
                "workload cluster unreachable",
            ),
            (
                not obs.metrics.fresh and inp.current > floor,
                Reason.METRICS_STALE,
                f"metrics stale ({obs.metrics.detail}): scale-down frozen",
            ),
            (
                bool(inp.fitting),
                Reason.DEMAND_SATISFIED,
                f"{len(inp.fitting)} pending pod(s) fit free or booting cells",
            ),
            (
                bool(inp.unschedulable),
                Reason.DEMAND_UNSATISFIABLE,
                f"{len(inp.unschedulable)} pending pod(s) fit no cell of this pool",
            ),
            (
                below > 0 and inp.current <= floor,
                Reason.AT_MIN_REPLICAS,
                f"{below} cell(s) below threshold but at min replicas {floor}",
            ),
            (
                below > 0 and inp.removable > 0 and inp.forecast_target >= inp.current,
                Reason.PREWARMED,
                f"forecast {inp.forecast or 0.0:.2f} cells keeps {below} idle cell(s)",
            ),
            (
                below > 0 and inp.removable == 0 and inp.headroom > 0,
                Reason.HEADROOM,
                f"{below} idle cell(s) kept: {_headroom_words(config, inp)}",
            ),
            (
                inp.current > floor,
                Reason.NO_IDLE_CELL,
                f"no cell below {config.utilization_threshold:.0%} utilisation",
            ),
        ]
    )
    return found or (Reason.IDLE, "nothing pending, nothing to remove")
