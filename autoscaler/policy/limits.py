"""HPA-style stabilisation windows and rate policies, over the policy's own memory.

Why this module exists: both directions of ``decide`` bound a raw recommendation the same way
Kubernetes' HPA ``behavior`` does (autoscaler-anchors §3.1): scale-up takes the *lowest*
recommendation over its window, scale-down the *highest*; rate policies cap how many cells
(or what percent) may change per period, with ``selectPolicy`` Max, Min or Disabled.
Keeping that arithmetic here keeps ``decide`` short and lets it be tested on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from autoscaler.policy.types import PolicyConfig, RatePolicyType, ScalingRules

V = TypeVar("V", int, float)
MAX_DEMAND_SAMPLES = 720
SAMPLES_PER_WINDOW = 120  # the forecaster's resolution: one bucket per window / 120
DEFAULT_EVENT_HORIZON_SECONDS = 1800.0  # HPA's periodSeconds maximum


def window_values(
    recommendations: Sequence[tuple[float, int]], now: float, window_seconds: float
) -> list[int]:
    """Recommendations recorded within ``window_seconds`` before ``now`` (inclusive)."""
    return [r for t, r in recommendations if now - window_seconds <= t <= now]


def stabilised_up(
    recommendations: Sequence[tuple[float, int]], now: float, rules: ScalingRules, raw: int
) -> int:
    """Scale-up target: the lowest recommendation over the up window (``raw`` included)."""
    return min([raw, *window_values(recommendations, now, rules.stabilization_window_seconds)])


def stabilised_down(
    recommendations: Sequence[tuple[float, int]], now: float, rules: ScalingRules, raw: int
) -> int:
    """Scale-down target: the highest recommendation over the down window (``raw`` included)."""
    return max([raw, *window_values(recommendations, now, rules.stabilization_window_seconds)])


def rate_allowance(
    rules: ScalingRules,
    events: Sequence[tuple[float, int]],
    now: float,
    current: int,
    direction: int,
) -> int | None:
    """How many more cells may change in ``direction`` (+1 up, -1 down); None = unlimited.

    Each policy allows ``value`` cells (or ``value`` percent of the count at the start of its
    period, rounded up) per ``period_seconds``, minus what already changed in that period.
    """
    if rules.select_policy == "Disabled":
        return 0
    if not rules.policies:
        return None
    allowances = []
    for policy in rules.policies:
        changed = sum(
            abs(d) for t, d in events if now - t < policy.period_seconds and d * direction > 0
        )
        if policy.type == RatePolicyType.PERCENT:
            start = current - direction * changed
            limit = math.ceil(max(start, 0) * policy.value / 100)
        else:
            limit = policy.value
        allowances.append(max(0, limit - changed))
    return min(allowances) if rules.select_policy == "Min" else max(allowances)


def recommendation_horizon(config: PolicyConfig) -> float:
    """How long recommendations must be remembered: the longer stabilisation window."""
    return max(
        config.scale_up.stabilization_window_seconds,
        config.scale_down.stabilization_window_seconds,
    )


def event_horizon(config: PolicyConfig) -> float:
    """How long scale events must be remembered: the longest rate-policy period."""
    periods = [p.period_seconds for p in config.scale_up.policies + config.scale_down.policies]
    return max([DEFAULT_EVENT_HORIZON_SECONDS, *periods])


def trim(
    pairs: Sequence[tuple[float, V]],
    now: float,
    horizon_seconds: float,
    limit: int | None = None,
) -> tuple[tuple[float, V], ...]:
    """Pairs no older than ``horizon_seconds``, at most ``limit`` of the newest."""
    kept = tuple((t, v) for t, v in pairs if now - t <= horizon_seconds)
    return kept[-limit:] if limit else kept


def add_sample(
    samples: Sequence[tuple[float, float]], now: float, value: float, window_seconds: float
) -> tuple[tuple[float, float], ...]:
    """Append a demand sample, one per ``window_seconds / SAMPLES_PER_WINDOW`` bucket.

    The loop may call ``decide`` many times a second; a sample inside the latest bucket merges
    into it, keeping the bucket's peak, so the history spans the whole forecast window.
    """
    bucket = window_seconds / SAMPLES_PER_WINDOW
    if samples and now - samples[-1][0] < bucket:
        start, peak = samples[-1]
        merged = (*samples[:-1], (start, max(peak, value)))
    else:
        merged = (*samples, (now, value))
    return trim(merged, now, window_seconds, MAX_DEMAND_SAMPLES)
