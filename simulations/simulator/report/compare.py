"""Run several policies and the oracle on one trace and summarise them side by side.

Why this module exists: ``simulate``, ``sweep`` and the benchmark all do the same thing — replay
one trace through N policies under one world config, compute the oracle, summarise against it
— and must do it identically for their numbers to agree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import Manager
from queue import Empty, Queue

from simulations.simulator.baselines.oracle import PACK, oracle
from simulations.simulator.distributed import executor
from simulations.simulator.engine.metrics import SimResult
from simulations.simulator.engine.policy import ScalingPolicy
from simulations.simulator.engine.sim import SimConfig, simulate
from simulations.simulator.report.progress import progress_bar, progress_enabled
from simulations.simulator.report.summary import PolicySummary, summarise
from simulations.simulator.traces.model import TracePod


@dataclass(frozen=True, slots=True)
class Comparison:
    results: tuple[SimResult, ...]  # oracle first
    summaries: tuple[PolicySummary, ...]  # same order

    def summary(self, policy: str) -> PolicySummary:
        return next(s for s in self.summaries if s.policy == policy)


def _run_one(
    pods: Sequence[TracePod],
    factory: Callable[[], ScalingPolicy],
    config: SimConfig,
    name: str = "",
    updates: Queue[tuple[str, float]] | None = None,
) -> SimResult:
    """One policy run (module-level: picklable); progress goes to ``updates`` when given."""
    progress = None if updates is None else (lambda fraction: updates.put((name, fraction)))
    return simulate(pods, factory(), config, progress)


def _parallel(
    pods: Sequence[TracePod],
    policies: Mapping[str, Callable[[], ScalingPolicy]],
    config: SimConfig,
    jobs: int,
    show_progress: bool | None,
) -> list[SimResult]:
    """The policies in ``jobs`` processes; their progress reaches this process's bar through
    a manager queue (only when the bar is shown)."""
    with (
        progress_bar(show_progress) as task,
        contextlib.ExitStack() as stack,
        ProcessPoolExecutor(max_workers=jobs) as pool,
    ):
        bars = {name: task(name) for name in policies}
        shown = progress_enabled(show_progress)
        updates = stack.enter_context(Manager()).Queue() if shown else None
        futures = [
            pool.submit(_run_one, pods, f, config, name, updates) for name, f in policies.items()
        ]
        while updates is not None and not all(f.done() for f in futures):
            with contextlib.suppress(Empty):
                name, fraction = updates.get(timeout=0.2)
                bars[name](fraction)
        return [f.result() for f in futures]


def compare(
    pods: Sequence[TracePod],
    policies: Mapping[str, Callable[[], ScalingPolicy]],
    config: SimConfig,
    oracle_method: str = PACK,
    show_progress: bool | None = None,
    jobs: int = 1,
    scheduler: str | None = None,
) -> Comparison:
    """Oracle plus one fresh instance of each policy, in the given order.

    ``jobs > 1`` runs the policies in that many processes (results are identical: each run is
    deterministic for the config's seed); ``scheduler`` (tcp://host:port) runs them on that
    Dask distributed cluster instead, with the same results (no progress bar there).
    """
    reference = oracle(pods, config.policy_config.shape, method=oracle_method)
    results = [reference]
    if scheduler is not None:
        with executor(scheduler=scheduler) as cluster:
            shared = cluster.share(tuple(pods))
            results += cluster.run(_run_one, [(shared, f, config) for f in policies.values()])
    elif jobs > 1:
        results += _parallel(pods, policies, config, jobs, show_progress)
    else:
        with progress_bar(show_progress) as task:
            for name, factory in policies.items():
                results.append(simulate(pods, factory(), config, task(name)))
    boot = config.boot.median_seconds
    summaries = tuple(summarise(r, reference.cost_cell_hours, boot) for r in results)
    return Comparison(tuple(results), summaries)
