"""The throughput benchmark's runs: the oracle and every policy, each timed where it runs.

Why this module exists: issue 14's throughput targets are wall time for all policies on this
machine, and the runs are independent, so they go through the simulator's own executor
(``simulations.simulator.distributed``: local processes, the same results as one after another).
Each run measures its own wall and CPU time in the process that runs it, so the table can report
both per policy honestly, and the batch's wall time is measured around the whole of it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape
from simulations.simulator.baselines.oracle import BOUND, oracle
from simulations.simulator.cli import POLICIES
from simulations.simulator.distributed import executor
from simulations.simulator.engine import SimConfig
from simulations.simulator.engine.metrics import SimResult
from simulations.simulator.engine.sim import Simulation
from simulations.simulator.traces import TracePod

ORACLE = "oracle (bound)"
ORACLE_POINTS = 20_000
# longest first, so the last process to start is not the one that runs longest (wall ~ max)
LONGEST_FIRST = ("gpucellpool", "cluster-autoscaler", "hpa-keda", "original-gpucellpool", ORACLE)


@dataclass(frozen=True, slots=True)
class TimedRun:
    """One run's result and what it cost in the process that ran it."""

    name: str
    result: SimResult
    wall_seconds: float
    cpu_seconds: float
    decide_calls: int  # ticks that reached ``decide`` (0 for the oracle)


@dataclass(frozen=True, slots=True)
class Batch:
    """Every run of one benchmark, in ``LONGEST_FIRST`` order, and the wall time of all."""

    runs: tuple[TimedRun, ...]
    wall_seconds: float
    workers: int

    def run(self, name: str) -> TimedRun:
        return next(r for r in self.runs if r.name == name)

    @property
    def cpu_seconds(self) -> float:
        return sum(r.cpu_seconds for r in self.runs)


def bench_config(shape: CellShape) -> SimConfig:
    """The throughput benchmark's world: maxReplicas 1000, 500 timeline samples."""
    return SimConfig(policy_config=PolicyConfig(max_replicas=1000, shape=shape), samples=500)


def timed_run(pods: Sequence[TracePod], name: str, config: SimConfig) -> TimedRun:
    """Run ``name`` (a policy of ``simulations.simulator.cli.POLICIES`` or ``ORACLE``) on
    ``pods``."""
    started, cpu = time.perf_counter(), time.process_time()
    calls = 0
    if name == ORACLE:
        result = oracle(pods, config.policy_config.shape, max_points=ORACLE_POINTS, method=BOUND)
    else:
        run = Simulation(pods, POLICIES[name](), config)
        result = run.run()
        calls = run.decide_calls
    wall, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return TimedRun(name, result, wall, cpu_s, calls)


def run_all(
    pods: Sequence[TracePod], shape: CellShape, workers: int, names: Sequence[str] = LONGEST_FIRST
) -> Batch:
    """``names`` on ``pods`` in ``workers`` local processes (this process when 1); the
    results are the same whatever ``workers`` is (every run is deterministic)."""
    config = bench_config(shape)
    started = time.perf_counter()
    with executor(jobs=workers) as pool:
        shared = pool.share(tuple(pods))
        runs = pool.run(timed_run, [(shared, name, config) for name in names])
    return Batch(tuple(runs), time.perf_counter() - started, workers)
