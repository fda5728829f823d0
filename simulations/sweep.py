"""``gpucellpool sweep``: try our policy's knobs on a trace and print the cost/wait Pareto front.

Why this module exists: the right stabilisation window, utilisation threshold, headroom,
pre-warming and in-flight limit depend on the workload; a user should pick them from measured
trade-offs (cell-hours vs p95 pod wait) on their own trace, not from our guesses. Every point
is one full simulation of the production ``decide`` with a modified ``PolicyConfig``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from autoscaler.policy.types import PolicyConfig
from simulations import argtypes as at
from simulations.baselines import PEERS
from simulations.baselines.oracle import oracle
from simulations.cli import (
    add_trace_arguments,
    add_world_arguments,
    policy_config,
    sim_config,
    trace_pods,
)
from simulations.engine import ProductionPolicy, SimConfig, simulate
from simulations.report import markdown, pareto_front, summarise
from simulations.report.summary import PolicySummary
from simulations.traces import TracePod
from simulations.traces.model import TraceError


@dataclass(frozen=True, slots=True)
class Point:
    window_seconds: float
    threshold: float
    headroom: int
    prewarm: bool
    in_flight: int

    def label(self) -> str:
        return (
            f"w={self.window_seconds:g}s u={self.threshold:g} h={self.headroom} "
            f"prewarm={'on' if self.prewarm else 'off'} inflight={self.in_flight}"
        )

    def apply(self, config: PolicyConfig) -> PolicyConfig:
        return replace(
            config,
            scale_down=replace(config.scale_down, stabilization_window_seconds=self.window_seconds),
            utilization_threshold=self.threshold,
            headroom_cells=self.headroom,
            prewarm=self.prewarm,
            max_cells_in_flight=self.in_flight,
        )


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("1", "on", "true", "yes", "0", "off", "false", "no"):
        raise argparse.ArgumentTypeError(f"{text!r} is not on/off")
    return value in ("1", "on", "true", "yes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_trace_arguments(parser)
    add_world_arguments(parser)
    g = parser.add_argument_group("knobs (comma-separated values; the grid is their product)")
    seconds = at.comma_list(at.bounded(0, 7 * 86400))
    g.add_argument("--window", type=seconds, default=[300.0, 600.0], help="scale-down window s")
    share = at.comma_list(at.bounded(0, 1, low_open=True))
    g.add_argument("--threshold", type=share, default=[0.5, 0.7], help="utilisation threshold")
    cells = at.comma_list(at.int_at_least(0, 1000))
    g.add_argument("--headroom", type=cells, default=[0, 1], help="headroom cells")
    g.add_argument(
        "--prewarm", type=at.comma_list(_bool), default=[False, True], help="pre-warming on/off"
    )
    in_flight = at.comma_list(at.int_at_least(1, 1000))
    g.add_argument("--in-flight", type=in_flight, default=[2, 8], help="max cells booting at once")
    parser.add_argument("--with-peers", action="store_true", help="add the peer baselines")
    parser.add_argument(
        "--jobs", type=at.int_at_least(1, 64), default=1, help="parallel simulations"
    )


def grid(args: argparse.Namespace) -> list[Point]:
    return [
        Point(*values)
        for values in itertools.product(
            args.window, args.threshold, args.headroom, args.prewarm, args.in_flight
        )
    ]


def run_point(pods: Sequence[TracePod], config: SimConfig, point: Point) -> tuple[str, object]:
    """One simulation of our policy with ``point``'s knobs (module-level: picklable)."""
    tuned = replace(config, policy_config=point.apply(config.policy_config))
    return point.label(), simulate(pods, ProductionPolicy(), tuned)


def sweep(
    pods: Sequence[TracePod], config: SimConfig, points: Sequence[Point], jobs: int = 1
) -> list[tuple[str, object]]:
    if jobs <= 1:
        return [run_point(pods, config, p) for p in points]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_point, pods, config, p) for p in points]
        return [f.result() for f in futures]


def run(args: argparse.Namespace) -> int:
    try:
        pods, loaded = trace_pods(args)
    except TraceError as error:
        print(f"gpucellpool: trace {error}", file=sys.stderr)
        return 2
    if not pods:
        print("no pods in the selected window", file=sys.stderr)
        return 1
    print(f"trace: {loaded.summary()}; {len(pods)} pods in the window", file=sys.stderr)
    config = sim_config(args, policy_config(args))
    reference = oracle(pods, config.policy_config.shape, method=args.oracle_method)
    boot = config.boot.median_seconds
    summaries: list[PolicySummary] = []
    for label, result in sweep(pods, config, grid(args), args.jobs):
        summary = summarise(result, reference.cost_cell_hours, boot)  # type: ignore[arg-type]
        summaries.append(replace(summary, policy=f"gpucellpool {label}"))
    if args.with_peers:
        for name, factory in PEERS.items():
            result = simulate(pods, factory(), config)
            summaries.append(
                replace(summarise(result, reference.cost_cell_hours, boot), policy=name)
            )
    summaries.sort(key=lambda s: (s.cost_cell_hours, s.wait_p95_seconds))
    print(f"all {len(summaries)} points (oracle: {reference.cost_cell_hours:,.0f} cell-hours)\n")
    print(markdown(summaries))
    print("Pareto front (cost vs p95 wait)\n")
    print(markdown(pareto_front(summaries)))
    return 0
