"""Means and 95 % intervals over seeds, and who is ahead of whom judged on those intervals.

Why this module exists: boot times are random, so one seed's p95 wait can flip a comparison
that another seed reverses. A claim like "not dominated" or "ahead of Cluster Autoscaler" is
only worth making when it survives that noise: every figure is summarised over several seeds as
a mean with a 95 % confidence interval of that mean (Student's t), and every comparison is made
on the intervals, never on the means alone. The rules, for figures where lower is better:

- A is **ahead of** B on a figure when A's interval lies wholly below B's: ``A.high < B.low``.
- A is **no worse than** B when A's interval reaches down to B's: ``A.low <= B.high`` (they
  overlap, or A is ahead): the seeds cannot tell that A is worse.
- A **dominates** B when A is no worse on cost and on p95 wait and ahead on at least one.
- The **Pareto front** is every point no other point dominates. A point off the front is
  measurably beaten; a point on it is not (which, with wide intervals, can be many points).

With one seed an interval is the single value (no spread is known): the rules then reduce to
plain comparisons of the values. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from simulations.simulator.report.summary import PolicySummary

# Student's t, two-sided 95 %, for 1..30 degrees of freedom
T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip

# The figures every sweep table reports, lower is better for each.
METRICS = (
    "cost_cell_hours",
    "cost_ratio",
    "wait_p95_seconds",
    "wait_p99_seconds",
    "wait_max_seconds",
    "waited_longer_than_boot",
)
# The two axes "dominates" and the Pareto front are judged on.
AXES = ("cost_cell_hours", "wait_p95_seconds")


def t_quantile(degrees_of_freedom: int) -> float:
    """The 97.5th percentile of Student's t (beyond the table: a close approximation)."""
    if degrees_of_freedom < 1:
        raise ValueError("a t interval needs at least two values")
    if degrees_of_freedom <= len(T_975):
        return T_975[degrees_of_freedom - 1]
    return 1.96 + 2.5 / degrees_of_freedom  # within 0.002 of the exact value past 30


@dataclass(frozen=True, slots=True)
class Interval:
    """The mean of ``n`` values and the 95 % confidence interval of that mean."""

    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int | None]:
        def plain(x: float) -> float | None:
            return None if math.isnan(x) else x  # NaN (nothing measured) as JSON null

        return {"mean": plain(self.mean), "low": plain(self.low), "high": plain(self.high)} | {
            "n": self.n
        }


def interval(values: Sequence[float]) -> Interval:
    """Mean +/- t * s / sqrt(n); the value itself for n = 1; NaN if any value is NaN."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("an interval needs at least one value")
    mean = float(data.mean())
    if data.size == 1 or math.isnan(mean):
        return Interval(mean, mean, mean, int(data.size))
    half = t_quantile(data.size - 1) * float(data.std(ddof=1)) / math.sqrt(data.size)
    return Interval(mean, mean - half, mean + half, int(data.size))


def ahead(a: Interval, b: Interval) -> bool:
    """``a`` measurably lower than ``b``: its whole interval lies below ``b``'s."""
    return a.high < b.low


def no_worse(a: Interval, b: Interval) -> bool:
    """The seeds cannot tell that ``a`` is higher than ``b`` (overlapping, or ``a`` ahead)."""
    return a.low <= b.high


def verdict(a: Interval, b: Interval) -> str:
    """``a`` against ``b``: "ahead", "behind" or "tied" (intervals overlap)."""
    if ahead(a, b):
        return "ahead"
    if ahead(b, a):
        return "behind"
    return "tied"


@dataclass(frozen=True, slots=True)
class SeedStats:
    """One policy (or knob setting) on one trace, summarised over its seeds."""

    policy: str
    trace: str
    seeds: tuple[int, ...]
    metrics: Mapping[str, Interval]

    def __getitem__(self, metric: str) -> Interval:
        return self.metrics[metric]

    def as_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "trace": self.trace,
            "seeds": list(self.seeds),
            **{m: i.as_dict() for m, i in self.metrics.items()},
        }


def _at_least_zero(i: Interval) -> Interval:
    """Every figure in ``METRICS`` is >= 0, so a mean's interval is cut at 0 (this changes no
    verdict: the other interval's high end is >= 0 too)."""
    return Interval(i.mean, max(0.0, i.low), i.high, i.n) if i.low < 0 else i


def over_seeds(
    policy: str, trace: str, seeds: Sequence[int], runs: Sequence[PolicySummary]
) -> SeedStats:
    """The intervals of ``METRICS`` over ``runs`` (one summary per seed, in ``seeds`` order)."""
    if len(runs) != len(seeds):
        raise ValueError(f"{len(runs)} runs for {len(seeds)} seeds")
    metrics = {m: _at_least_zero(interval([float(getattr(r, m)) for r in runs])) for m in METRICS}
    return SeedStats(policy, trace, tuple(seeds), metrics)


def dominates(a: SeedStats, b: SeedStats) -> bool:
    """No worse than ``b`` on both ``AXES`` and ahead on at least one (module docstring)."""
    return all(no_worse(a[m], b[m]) for m in AXES) and any(ahead(a[m], b[m]) for m in AXES)


def pareto_front(points: Sequence[SeedStats]) -> list[SeedStats]:
    """The points no other point dominates, cheapest mean first."""
    front = [p for p in points if not any(dominates(o, p) for o in points if o is not p)]
    return sorted(front, key=lambda p: (p[AXES[0]].mean, p[AXES[1]].mean))
