"""Forecast cell demand one boot time ahead, for optional predictive pre-warming.

Why this module exists: a cell takes minutes to boot, so a policy that only reacts to pending
pods makes every ramp wait a full boot. Looking ``boot_seconds`` ahead lets ``decide`` start
cells early. The forecast may only *add* cells: ``decide`` never scales in on it (the AWS
predictive-scaling rule, autoscaler-anchors §8.2). Both methods are deterministic and cheap:

* ``theil-sen`` (default): the median of pairwise slopes over the recent window, robust to a
  single spike; intercept is the median residual.
* ``holt``: Holt's linear trend for irregular sampling (trend per second), smoothing 0.5/0.3.

numpy is imported when a forecast is first made (only pools with ``prewarm`` make one), not with
the module: every decision imports this module, and numpy costs the operator process ~15 MiB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

THEIL_SEN = "theil-sen"
HOLT = "holt"
METHODS = (THEIL_SEN, HOLT)
MIN_SAMPLES = 3
MAX_SAMPLES = 120  # Theil-Sen is O(n^2) in pairs; the most recent ones matter most
HOLT_ALPHA, HOLT_BETA = 0.5, 0.3


def _recent(
    samples: Sequence[tuple[float, float]], now: float, window_seconds: float
) -> tuple[np.ndarray, np.ndarray] | None:
    kept = [(t, y) for t, y in samples if now - window_seconds <= t <= now][-MAX_SAMPLES:]
    if len(kept) < MIN_SAMPLES:
        return None
    import numpy as np  # noqa: PLC0415 - lazily, see the module docstring

    t = np.array([s[0] for s in kept], dtype=float)
    y = np.array([s[1] for s in kept], dtype=float)
    if float(t[-1] - t[0]) <= 0.0:
        return None
    return t, y


def _theil_sen(t: np.ndarray, y: np.ndarray, at: float) -> float:
    import numpy as np  # noqa: PLC0415 - lazily, see the module docstring

    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    ok = dt > 0
    slope = float(np.median((y[j] - y[i])[ok] / dt[ok])) if ok.any() else 0.0
    intercept = float(np.median(y - slope * t))
    return intercept + slope * at


def _holt(t: np.ndarray, y: np.ndarray, at: float) -> float:
    level, trend = float(y[0]), 0.0
    for k in range(1, len(t)):
        dt = float(t[k] - t[k - 1])
        if dt <= 0:
            continue
        previous = level
        level = HOLT_ALPHA * float(y[k]) + (1 - HOLT_ALPHA) * (level + trend * dt)
        trend = HOLT_BETA * (level - previous) / dt + (1 - HOLT_BETA) * trend
    return level + trend * (at - float(t[-1]))


def forecast_demand(
    samples: Sequence[tuple[float, float]],
    now: float,
    horizon_seconds: float,
    window_seconds: float = 1800.0,
    method: str = THEIL_SEN,
) -> float | None:
    """Cells needed at ``now + horizon_seconds``, or None with too little recent history.

    ``samples`` are (time, cells needed) pairs on the caller's clock. Never negative.
    """
    recent = _recent(samples, now, window_seconds)
    if recent is None:
        return None
    t, y = recent
    at = now + max(horizon_seconds, 0.0)
    value = _holt(t, y, at) if method == HOLT else _theil_sen(t, y, at)
    return max(0.0, value) if math.isfinite(value) else None
