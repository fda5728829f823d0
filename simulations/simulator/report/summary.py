"""Turn raw run results into the figures a user compares policies on.

Why this module exists: "which policy is best" is a two-axis question (cost vs wait) with
secondary costs (churn, evictions); computing the same figures the same way for every policy,
and the Pareto front, belongs in one place that the table, JSON, sweep and benchmark all share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from simulations.simulator.engine.metrics import SimResult


@dataclass(frozen=True, slots=True)
class PolicySummary:
    policy: str
    cost_cell_hours: float
    cost_ratio: float  # to the oracle
    wait_p50_seconds: float
    wait_p95_seconds: float
    wait_p99_seconds: float
    wait_max_seconds: float
    waited_longer_than_boot: float  # share of pods, 0..1
    scale_up_cells: int
    scale_down_cells: int
    evictions: int
    mean_utilisation: float
    pods: int
    unplaced: int
    unschedulable: int
    # Gangs (docs/simulation.md "Gangs"); 0 / NaN for a trace without them
    gangs: int = 0
    gang_wait_p50_seconds: float = float("nan")  # gang arrival (last member) to start (all placed)
    gang_wait_p95_seconds: float = float("nan")
    gang_wait_max_seconds: float = float("nan")
    gangs_unstarted: int = 0
    partial_gang_gpu_hours: float = 0.0  # GPUs held by members of gangs not yet started
    solo_wait_p95_seconds: float = float("nan")  # pods outside gangs

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(result: SimResult, oracle_cost: float, boot_seconds: float) -> PolicySummary:
    """Figures for one run; ``boot_seconds`` is the yardstick for "waited too long"."""
    waits = np.asarray(result.waits_seconds, dtype=float)
    if waits.size == 0:  # nothing simulated (e.g. every pod unhostable): no wait, not 0 s
        waits = np.full(1, np.nan)
    p50, p95, p99 = np.percentile(waits, [50, 95, 99])
    return PolicySummary(
        policy=result.policy,
        cost_cell_hours=result.cost_cell_hours,
        cost_ratio=result.cost_cell_hours / oracle_cost if oracle_cost > 0 else float("nan"),
        wait_p50_seconds=float(p50),
        wait_p95_seconds=float(p95),
        wait_p99_seconds=float(p99),
        wait_max_seconds=float(waits.max()),
        waited_longer_than_boot=float(np.mean(waits > boot_seconds)),
        scale_up_cells=result.scale_up_cells,
        scale_down_cells=result.scale_down_cells,
        evictions=result.evictions,
        mean_utilisation=result.mean_utilisation,
        pods=result.pods,
        unplaced=result.unplaced,
        unschedulable=result.unschedulable,
        **_gang_figures(result),
    )


def _gang_figures(result: SimResult) -> dict[str, Any]:
    """The gang columns of a run ({} for a trace without gangs: the defaults stand)."""
    gangs = result.gangs
    if not gangs.waits_seconds:
        return {}
    g50, g95 = np.percentile(np.asarray(gangs.waits_seconds, dtype=float), [50, 95])
    solo = np.asarray(gangs.solo_waits_seconds, dtype=float)
    return {
        "gangs": gangs.count,
        "gang_wait_p50_seconds": float(g50),
        "gang_wait_p95_seconds": float(g95),
        "gang_wait_max_seconds": max(gangs.waits_seconds),
        "gangs_unstarted": gangs.unstarted,
        "partial_gang_gpu_hours": gangs.partial_gpu_hours,
        "solo_wait_p95_seconds": float(np.percentile(solo, 95)) if solo.size else float("nan"),
    }


def dominates(a: PolicySummary, b: PolicySummary) -> bool:
    """``a`` is no worse than ``b`` on (cost, p95 wait) and strictly better on one."""
    no_worse = a.cost_cell_hours <= b.cost_cell_hours and a.wait_p95_seconds <= b.wait_p95_seconds
    better = a.cost_cell_hours < b.cost_cell_hours or a.wait_p95_seconds < b.wait_p95_seconds
    return no_worse and better


def pareto_front(summaries: Sequence[PolicySummary]) -> list[PolicySummary]:
    """The summaries no other summary dominates, cheapest first."""
    front = [s for s in summaries if not any(dominates(o, s) for o in summaries if o is not s)]
    return sorted(front, key=lambda s: (s.cost_cell_hours, s.wait_p95_seconds))


def dominated_by(ours: PolicySummary, others: Sequence[PolicySummary]) -> list[str]:
    """Names of the policies in ``others`` that dominate ``ours``."""
    return [o.policy for o in others if o is not ours and dominates(o, ours)]
