"""How closely two cell-count timelines agree: the twin's against the simulator's.

Why this module exists: "one policy, two worlds" is only a claim until the same trace replayed
by ``gpucellpool simulate`` and by the twin (real apiservers, real Prometheus, the real
operator) is shown to give the same cells over time. The acceptance numbers are defined here,
once, as pure functions of two step functions: the share of the horizon during which the two
counts are within +/- ``tolerance`` cells, and each side's integral (cell-hours) and their
ratio. A timeline is a sequence of ``(time_seconds, cells)`` change points; the count holds
until the next point, and is 0 before the first.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Timeline = Sequence[tuple[float, float]]
Piece = tuple[float, float, float, float]  # (from seconds, to seconds, a's count, b's count)

MIN_WITHIN_FRACTION = 0.98
"""Issue 13's acceptance: the two counts within +/-1 cell for at least this share of the time."""
MAX_CELL_HOURS_ERROR = 0.02
"""Issue 13's acceptance: the two cell-hours within this relative error of each other."""


def criterion() -> str:
    """The acceptance in words, for reports and benchmark text."""
    return (
        f">= {100 * MIN_WITHIN_FRACTION:g} % within +/-1 cell "
        f"and cell-hours within {100 * MAX_CELL_HOURS_ERROR:g} %"
    )


@dataclass(frozen=True, slots=True)
class Fidelity:
    """The agreement of timeline ``a`` (the twin) with ``b`` (the simulator) over a horizon."""

    start_seconds: float
    end_seconds: float
    tolerance_cells: float
    within_fraction: float  # share of [start, end) with |a - b| <= tolerance
    cell_hours_a: float
    cell_hours_b: float
    max_gap_cells: float  # the largest |a - b| seen

    @property
    def cell_hours_ratio(self) -> float:
        """a / b (1.0 is perfect; nan when b is empty)."""
        return self.cell_hours_a / self.cell_hours_b if self.cell_hours_b else float("nan")

    def passes(
        self,
        min_within: float = MIN_WITHIN_FRACTION,
        max_ratio_error: float = MAX_CELL_HOURS_ERROR,
    ) -> bool:
        """The acceptance (``criterion()``): enough of the time within tolerance, cell-hours
        close enough."""
        return (
            self.within_fraction >= min_within
            and abs(self.cell_hours_ratio - 1.0) <= max_ratio_error
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cell_hours_ratio": self.cell_hours_ratio}


def normalise(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted by time; of several points at one instant the last one wins; repeats dropped."""
    by_time: dict[float, float] = {}
    for t, v in sorted(points, key=lambda point: point[0]):  # stable: input order within a time
        by_time[float(t)] = float(v)
    out: list[tuple[float, float]] = []
    for t, v in sorted(by_time.items()):
        if not out or out[-1][1] != v:
            out.append((t, v))
    return out


def value_at(timeline: Timeline, time_seconds: float) -> float:
    """The count holding at ``time_seconds`` (0 before the first point)."""
    times = [t for t, _ in timeline]
    index = bisect.bisect_right(times, time_seconds) - 1
    return float(timeline[index][1]) if index >= 0 else 0.0


def pieces(a: Timeline, b: Timeline, start: float, end: float) -> list[Piece]:
    """(from, to, a, b): the pieces of [start, end) on which both normalised timelines are
    constant, in time order (a sweep)."""
    inner = {t for line in (a, b) for t, _ in line if start < t < end}
    cuts = sorted({start, end, *inner})
    out, i, j = [], 0, 0
    va, vb = value_at(a, start), value_at(b, start)
    for lo, hi in itertools.pairwise(cuts):
        while i < len(a) and a[i][0] <= lo:
            va, i = float(a[i][1]), i + 1
        while j < len(b) and b[j][0] <= lo:
            vb, j = float(b[j][1]), j + 1
        out.append((lo, hi, va, vb))
    return out


def _segments(
    a: Timeline, b: Timeline, start: float, end: float
) -> list[tuple[float, float, float]]:
    """(duration, a, b) of each of ``pieces``."""
    return [(hi - lo, va, vb) for lo, hi, va, vb in pieces(a, b, start, end)]


def cell_hours(timeline: Timeline, start: float, end: float) -> float:
    """The integral of the count over [start, end), in cell-hours."""
    return sum(d * v for d, v, _ in _segments(normalise(timeline), (), start, end)) / 3600.0


def compare(a: Timeline, b: Timeline, start: float, end: float, tolerance: float = 1.0) -> Fidelity:
    """How closely ``a`` follows ``b`` over [start, end)."""
    if end <= start:
        raise ValueError(f"empty horizon [{start}, {end})")
    a, b = normalise(a), normalise(b)
    parts = _segments(a, b, start, end)
    within = sum(d for d, x, y in parts if abs(x - y) <= tolerance)
    return Fidelity(
        start_seconds=start,
        end_seconds=end,
        tolerance_cells=tolerance,
        within_fraction=within / (end - start),
        cell_hours_a=sum(d * x for d, x, _ in parts) / 3600.0,
        cell_hours_b=sum(d * y for d, _, y in parts) / 3600.0,
        max_gap_cells=max((abs(x - y) for _, x, y in parts), default=0.0),
    )
