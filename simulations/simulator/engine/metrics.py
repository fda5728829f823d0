"""What one simulated run measured, and the integrals that accumulate it.

Why this module exists: cost and utilisation are time integrals over a piecewise-constant
world; keeping the integration here (advance the clock, add count x dt) keeps the event loop
free of bookkeeping and makes the definitions easy to find: a cell costs from the moment it is
requested until its drain completes (booting, ready and draining all cost); utilisation is the
time-weighted mean over Ready cells of max(memory, cores, slots) allocated.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """One point of the timeline: demand (cells the running + pending pods pack into)."""

    time_seconds: float
    demand_cells: int
    ready: int
    booting: int
    draining: int
    desired: int


@dataclass(frozen=True, slots=True)
class GangStats:
    """What a run measured about its gangs (empty / zero for a trace without gangs)."""

    waits_seconds: tuple[float, ...] = ()  # per gang: arrival to first start (censored at end)
    unstarted: int = 0  # gangs that never started
    # GPU-hours held by members of gangs not (yet) started: paid for, used by nothing
    partial_gpu_hours: float = 0.0
    # atomic: plan_gang's reasons, counted once per admission try with new inputs
    admissions: tuple[tuple[str, int], ...] = ()
    solo_waits_seconds: tuple[float, ...] = ()  # waits of the pods outside gangs

    @property
    def count(self) -> int:
        return len(self.waits_seconds)


@dataclass(frozen=True, slots=True)
class SimResult:
    """Everything one run of one policy on one trace produced."""

    policy: str
    pods: int
    cost_cell_hours: float
    waits_seconds: tuple[float, ...]  # total time each pod spent pending (censored at the end)
    unplaced: int  # pods still pending when the run ended
    unschedulable: int  # pods no fresh cell could ever host (left out of the run)
    evictions: int
    scale_up_cells: int
    scale_down_cells: int
    boot_failures: int
    mean_utilisation: float
    end_seconds: float
    events: int
    decisions: int
    reasons: tuple[tuple[str, int], ...]
    timeline: tuple[Sample, ...]
    boot_seconds: float  # the median boot time the run used (for "waited longer than a boot")
    drains_abandoned: int = 0  # WaitForIdle drains that hit their timeout (cell kept)
    gangs: GangStats = GangStats()
    cells: tuple[tuple[float, int], ...] = ()
    """Billable cells (Ready + Booting + Draining) at each change: exact, where ``timeline``
    is sampled (the fidelity check compares this with the twin's cells)."""


class Integrals:
    """Time integrals of billable cells and Ready-cell utilisation."""

    def __init__(self) -> None:
        self.last_time = 0.0
        self.cell_seconds = 0.0
        self.util_seconds = 0.0
        self.ready_seconds = 0.0
        self.billable = 0
        self.util_sum = 0.0
        self.ready = 0

    def advance(self, now: float) -> None:
        dt = now - self.last_time
        if dt > 0:
            self.cell_seconds += self.billable * dt
            self.util_seconds += self.util_sum * dt
            self.ready_seconds += self.ready * dt
            self.last_time = now

    def mean_utilisation(self) -> float:
        return self.util_seconds / self.ready_seconds if self.ready_seconds else 0.0


@dataclass(slots=True)
class Counters:
    evictions: int = 0
    scale_up_cells: int = 0
    scale_down_cells: int = 0
    boot_failures: int = 0
    drains_abandoned: int = 0
    events: int = 0
    decisions: int = 0
    reasons: Counter[str] | None = None

    def reason(self, name: str) -> None:
        if self.reasons is None:
            self.reasons = Counter()
        self.reasons[name] += 1
