"""What one simulated run measured, and the integrals that accumulate it.

Why this module exists: cost and utilisation are time integrals over a piecewise-constant
world; keeping the integration here (advance the clock, add count x dt) keeps the event loop
free of bookkeeping and makes the definitions easy to find: a cell costs from the moment it is
requested until its drain completes (booting, ready and draining all cost); utilisation is the
time-weighted mean over Ready cells of max(memory, cores, slots) allocated. A run's result is
assembled here too (``run_result``), so what its waits and unplaced pods count is defined next
to the fields: a wait still open when the run ends is censored there.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulations.simulator.engine.sim import Simulation


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


def run_result(sim: Simulation, now: float) -> SimResult:
    """The run of ``sim``, ended at ``now``. A pod still pending waited until ``now``, and so
    did each member of an atomic gang never admitted (from its arrival): both waits are added
    to ``sim.waits`` and counted unplaced, with the pods that never arrived."""
    for entry in sim.world.pending.values():
        sim.waits[entry.pod.key] += now - entry.since
    held = [p for gang in sim.book.gangs.values() if not gang.admitted for p in gang.arrived]
    held = held if sim.book.atomic else []
    for pod in held:  # atomic gangs never admitted: waited from arrival to the end
        sim.waits[pod.key] += now - pod.arrival_seconds
    counters = sim.counters
    return SimResult(
        policy=sim.policy.name,
        pods=len(sim.pods),
        cost_cell_hours=sim.integrals.cell_seconds / 3600.0,
        waits_seconds=tuple(sim.waits.values()),
        unplaced=len(sim.world.pending) + (len(sim.pods) - sim.arrived) + len(held),
        unschedulable=sim.unschedulable,
        evictions=counters.evictions,
        scale_up_cells=counters.scale_up_cells,
        scale_down_cells=counters.scale_down_cells,
        boot_failures=counters.boot_failures,
        mean_utilisation=sim.integrals.mean_utilisation(),
        end_seconds=now,
        events=counters.events,
        decisions=counters.decisions,
        reasons=tuple(sorted((counters.reasons or {}).items())),
        timeline=tuple(sim.timeline.samples),
        cells=tuple(sim.timeline.cells),
        boot_seconds=sim.cfg.boot.median_seconds,
        drains_abandoned=counters.drains_abandoned,
        gangs=sim.book.stats(now, sim.waits),
    )
