"""Run several policies and the oracle on one trace and summarise them side by side.

Why this module exists: ``simulate``, ``sweep`` and the benchmark all do the same thing — replay
one trace through N policies under one world config, compute the oracle, summarise against it
— and must do it identically for their numbers to agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
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


def _run_one(
    pods: Sequence[TracePod], factory: Callable[[], ScalingPolicy], config: SimConfig
) -> SimResult:
    return simulate(pods, factory(), config)


def compare(
    pods: Sequence[TracePod],
    policies: Mapping[str, Callable[[], ScalingPolicy]],
    config: SimConfig,
    oracle_method: str = PACK,
    show_progress: bool | None = None,
    jobs: int = 1,
) -> Comparison:
    """Oracle plus one fresh instance of each policy, in the given order.

    ``jobs > 1`` runs the policies in that many processes (results are identical: each run is
    deterministic for the config's seed).
    """
    reference = oracle(pods, config.policy_config.shape, method=oracle_method)
    results = [reference]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_run_one, pods, f, config) for f in policies.values()]
            results += [f.result() for f in futures]
    else:
        with progress_bar(show_progress) as task:
            for name, factory in policies.items():
                results.append(simulate(pods, factory(), config, task(name)))
    boot = config.boot.median_seconds
    summaries = tuple(summarise(r, reference.cost_cell_hours, boot) for r in results)
    return Comparison(tuple(results), summaries)
