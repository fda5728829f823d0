"""When ``decide``'s output can next change while the observation stays the same.

Why this module exists: with nothing new observed, ``decide`` keeps returning the same count,
reason and victims until a clock inside the policy runs out: a stabilisation window forgetting
a different recommendation, a cooldown or post-scale-up delay ending, a rate-policy period
passing, a cell becoming idle for the whole window, a pending pod becoming "stuck"
or waiting long enough to start hedged spares. Computing
that instant once per decision lets the simulator skip the identical calls in between (a month
of 10 s ticks is 259,200 calls, most of them idle) and lets the live loop requeue for it. The
skip must be exact, so ``advance`` replays what each skipped call would have written to memory.

Conservative by construction: every instant returned is at or before the first real change
(a later call at that instant simply decides again). Pre-warming makes the forecast move with
time itself, and a decision that records a scale event changes memory on every call; both get
no promise (``None``).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import replace

from autoscaler.policy import limits, warm_spare
from autoscaler.policy.cell_index import state_count
from autoscaler.policy.decision import Decision, Reads, Steady
from autoscaler.policy.hedge import (
    hedge_delay_clocks,
    hedge_delay_seconds,
    unused_grace_clocks,
    unused_grace_seconds,
)
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellState, Observation, PolicyMemory


def _later(times: Sequence[float], now: float) -> float:
    """The first clock at or after ``now``. One exactly at ``now`` changes the answer right
    after it (windows include their boundary), so the promise ends at the next instant, not at
    ``now``: a decision made at a clock's instant (a wake at the last promise's end) must still
    promise the clocks after it, or the caller would wait for its next tick to see them."""
    at_or_after = map(operator.ge, times, itertools.repeat(now))
    first = min(itertools.compress(times, at_or_after), default=math.inf)
    return math.nextafter(now, math.inf) if first == now else first


def _window_end(
    recommendations: Sequence[tuple[float, int]], now: float, window: float, raw: int, down: bool
) -> list[float]:
    """When the window's bound over ``raw`` and the recommendations within ``window`` of
    ``now`` can first move: the highest for the down window (``down``), else the lowest.

    Only the bound is read (``limits.stabilised_down``/``stabilised_up``) and the skipped
    calls record ``raw`` itself, so the bound moves only once its newest occurrence leaves
    the window, not when another value beyond ``raw`` does (that took most of a month's
    decide calls while a scale-down waited out its window). Empty when no recommendation in
    the window is beyond ``raw``: the bound is ``raw``.
    """
    start = now - window
    beyond = [(t, r) for t, r in recommendations if t >= start and (r > raw if down else r < raw)]
    if not beyond:
        return []
    bound = max(r for _, r in beyond) if down else min(r for _, r in beyond)
    return [max(t for t, r in beyond if r == bound) + window]


def _memory_clocks(
    memory: PolicyMemory, config: PolicyConfig, now: float, raw: int, current: int
) -> list[float]:
    """Instants at which something remembered stops (or starts) counting for the path this
    observation takes (``decide`` scales up when ``raw > current``, down when below, else
    holds, and the hold path reads no clock)."""
    if raw == current:
        return []
    periods = [p.period_seconds for p in config.scale_up.policies + config.scale_down.policies]
    out = [t + p for t, _ in memory.scale_events for p in periods]
    up = memory.last_scale_up_at
    if raw > current:  # the lowest recommendation over the up window, the up cooldown
        window = config.scale_up.stabilization_window_seconds
        out += _window_end(memory.recommendations, now, window, raw, down=False)
        if up is not None:
            out.append(up + config.scale_up_cooldown_seconds)
        return out
    window = config.scale_down.stabilization_window_seconds
    out += _window_end(memory.recommendations, now, window, raw, down=True)
    if up is not None:
        out += [
            up + config.scale_down_delay_after_scale_up_seconds,
            up + config.scale_down_cooldown_seconds,
        ]
    if memory.last_scale_down_at is not None:
        out.append(memory.last_scale_down_at + config.scale_down_cooldown_seconds)
    out += [since + window for since in memory.idle_since.values()]
    return out


def _records_scale_event(
    before: PolicyMemory, after: PolicyMemory, config: PolicyConfig, now: float
) -> bool:
    trimmed = limits.trim(before.scale_events, now, limits.event_horizon(config))
    return (
        after.last_scale_up_at != before.last_scale_up_at
        or after.last_scale_down_at != before.last_scale_down_at
        or after.scale_events != trimmed
    )


def steady(
    observation: Observation,
    memory: PolicyMemory,
    decision: Decision,
    config: PolicyConfig,
    now: float,
    raw: int,
    cells_used: float | None,
    reads: Reads = Reads.CELLS,
) -> Steady | None:
    """How long ``decision`` (made at ``now`` from ``memory``) holds for this observation.

    ``raw`` is the raw recommendation and ``cells_used`` the demand sample ``decide`` recorded
    (None when it recorded none); ``reads`` what of the cells it read (``policy.same_facts``).
    None when no promise can be made.
    """
    if config.prewarm and cells_used is not None:
        return None  # the forecast moves with the clock and with every sample
    if _records_scale_event(memory, decision.memory, config, now):
        return None
    cells = observation.cells
    current = state_count(cells, CellState.READY) + state_count(cells, CellState.BOOTING)
    clocks = _memory_clocks(decision.memory, config, now, raw, current)
    warm = warm_spare.warm_until(decision.memory, config)
    if warm is not None:  # the kept empty cells drop back to headroom_cells then
        clocks.append(warm)
    stuck = config.stuck_pending_seconds
    if stuck > 0 and observation.workload_cluster_reachable:
        clocks += [p.first_seen + stuck for p in observation.pending]
    hedging = config.boot_hedge_fraction > 0 and decision.memory.boots_proven
    if hedging and observation.workload_cluster_reachable:  # no spare before boots are proven
        clocks += hedge_delay_clocks(observation.pending, hedge_delay_seconds(config), now)
    if hedging:  # an unused Ready cell may retire once it has been Ready for the grace
        unused, grace = decision.memory.never_used, unused_grace_seconds(config)
        clocks += unused_grace_clocks(cells, unused, grace, now)
    return Steady(
        until=_later(clocks, now),
        raw=raw,
        cells_used=cells_used,
        recommendation_horizon_seconds=limits.recommendation_horizon(config),
        event_horizon_seconds=limits.event_horizon(config),
        sample_window_seconds=config.forecast_window_seconds,
        reads=reads,
    )


def _samples(
    samples: Sequence[tuple[float, float]], times: Sequence[float], value: float, window: float
) -> tuple[tuple[float, float], ...]:
    """``limits.add_sample`` once per time, in one pass (its trims are monotone in time, and
    never drop the newest sample, so trimming once at the end gives the same result)."""
    bucket = window / limits.SAMPLES_PER_WINDOW
    out = list(samples)
    for t in times:
        if out and t - out[-1][0] < bucket:
            start, peak = out[-1]
            out[-1] = (start, max(peak, value))
        else:
            out.append((t, value))
    return limits.trim(out, times[-1], window, limits.MAX_DEMAND_SAMPLES)


def advance(memory: PolicyMemory, steady_state: Steady, times: Sequence[float]) -> PolicyMemory:
    """``memory`` after the calls at ``times`` (ascending, all before ``steady_state.until``)
    that returned the steady decision: exactly what those calls would have handed back."""
    if not times:
        return memory
    last = times[-1]
    recs = memory.recommendations
    if steady_state.raw is not None:
        horizon = steady_state.recommendation_horizon_seconds
        added = tuple((t, steady_state.raw) for t in times if last - t <= horizon)
        recs = limits.trim((*recs, *added), last, horizon)
    samples = memory.demand_samples
    if steady_state.cells_used is not None:
        value = steady_state.cells_used
        samples = _samples(samples, times, value, steady_state.sample_window_seconds)
    events = memory.scale_events
    if steady_state.event_horizon_seconds is not None:
        events = limits.trim(events, last, steady_state.event_horizon_seconds)
    return replace(memory, recommendations=recs, demand_samples=samples, scale_events=events)
