"""Run several policies and the oracle on one trace and summarise them side by side.

Why this module exists: ``simulate``, ``sweep`` and the benchmark all do the same thing — replay
one trace through N policies under one world config, compute the oracle, summarise against it
— and must do it identically for their numbers to agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from simulations.baselines.oracle import PACK, oracle
from simulations.engine.metrics import SimResult
from simulations.engine.policy import ScalingPolicy
from simulations.engine.sim import SimConfig, simulate
from simulations.report.progress import progress_bar
from simulations.report.summary import PolicySummary, summarise
from simulations.traces.model import TracePod


@dataclass(frozen=True, slots=True)
class Comparison:
    results: tuple[SimResult, ...]  # oracle first
    summaries: tuple[PolicySummary, ...]  # same order

    def summary(self, policy: str) -> PolicySummary:
        return next(s for s in self.summaries if s.policy == policy)


def compare(
    pods: Sequence[TracePod],
    policies: Mapping[str, Callable[[], ScalingPolicy]],
    config: SimConfig,
    oracle_method: str = PACK,
    show_progress: bool | None = None,
) -> Comparison:
    """Oracle plus one fresh instance of each policy, in the given order."""
    reference = oracle(pods, config.policy_config.shape, method=oracle_method)
    results = [reference]
    with progress_bar(show_progress) as task:
        for name, factory in policies.items():
            results.append(simulate(pods, factory(), config, task(name)))
    boot = config.boot.median_seconds
    summaries = tuple(summarise(r, reference.cost_cell_hours, boot) for r in results)
    return Comparison(tuple(results), summaries)
