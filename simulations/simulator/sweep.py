"""``gpucellpool sweep``: try our policy's knobs on traces and seeds; report the Pareto front.

Why this module exists: the right stabilisation window, utilisation threshold, headroom,
pre-warming, in-flight limit and hedged boots depend on the workload; a user should pick them
from measured trade-offs (cell-hours vs p95 pod wait) on their own traces, not from our
guesses. Every point
is a full simulation of the production ``decide`` with a modified ``PolicyConfig``, repeated
over several seeds (boot times are random) so each figure is a mean with a 95 % interval and
every "dominates" is judged on the intervals (simulations/simulator/report/intervals.py).

A run of point P on trace T with seed S is exactly ``gpucellpool simulate --trace T --seed S``
with P's knobs: the seed drives the trace's rescaling and the world, as there. The oracle is
computed once per (trace, seed), not per point (once per trace when
every seed gives the same pods). The runs go to an executor
(simulations/simulator/distributed.py): this process, ``--jobs`` local processes or a Dask cluster
(``--scheduler``), with identical results.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autoscaler.policy.policy_config import PolicyConfig
from simulations.simulator import argtypes as at
from simulations.simulator.baselines import PEERS
from simulations.simulator.baselines.oracle import oracle
from simulations.simulator.cli import (
    add_parallel_arguments,
    add_trace_arguments,
    add_world_arguments,
    fail,
    policy_config,
    sim_config,
    trace_pods,
)
from simulations.simulator.distributed import ClusterUnavailable, Executor, executor
from simulations.simulator.engine import ProductionPolicy, SimConfig, simulate
from simulations.simulator.report import summarise
from simulations.simulator.report.intervals import SeedStats, over_seeds
from simulations.simulator.report.pareto import report_markdown, write_report
from simulations.simulator.report.summary import PolicySummary
from simulations.simulator.traces import TracePod
from simulations.simulator.traces.model import TraceError

OURS = "gpucellpool"


def _window(config: PolicyConfig, seconds: Any) -> PolicyConfig:
    down = replace(config.scale_down, stabilization_window_seconds=seconds)
    return replace(config, scale_down=down)


def _field(name: str) -> Callable[[PolicyConfig, Any], PolicyConfig]:
    return lambda config, value: replace(config, **{name: value})


# knob -> (label prefix, how the value is shown, how it is applied)
KNOBS: dict[
    str, tuple[str, Callable[[object], str], Callable[[PolicyConfig, object], PolicyConfig]]
]
KNOBS = {
    "window": ("w", lambda v: f"{v:g}s", _window),
    "threshold": ("u", lambda v: f"{v:g}", _field("utilization_threshold")),
    "headroom": ("h", str, _field("headroom_cells")),
    "prewarm": ("prewarm", lambda v: "on" if v else "off", _field("prewarm")),
    "in_flight": ("inflight", str, _field("max_cells_in_flight")),
    "hedge": ("hedge", lambda v: f"{v:g}", _field("boot_hedge_fraction")),
    "hedge_min_wave": ("minwave", str, _field("boot_hedge_min_wave")),
    "hedge_delay": ("hdelay", lambda v: f"{v:g}", _field("boot_hedge_delay_boots")),
    "hedge_per_pod": ("perpod", lambda v: "on" if v else "off", _field("boot_hedge_per_pod")),
    "warm_spare": ("warm", str, _field("warm_spare_cells")),
    "warm_spare_seconds": ("warmfor", lambda v: f"{v:g}s", _field("warm_spare_seconds")),
    "warm_spare_lone_arrivals": ("warmlone", str, _field("warm_spare_lone_arrivals")),
}


@dataclass(frozen=True, slots=True)
class Point:
    """One knob setting: the knobs the user swept and their values; the rest are defaults."""

    knobs: tuple[tuple[str, object], ...] = ()

    def label(self) -> str:
        parts = [f"{KNOBS[k][0]}={KNOBS[k][1](v)}" for k, v in self.knobs]
        return f"{OURS} " + (" ".join(parts) if parts else "(defaults)")

    def apply(self, config: PolicyConfig) -> PolicyConfig:
        for knob, value in self.knobs:
            config = KNOBS[knob][2](config, value)
        return config


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("1", "on", "true", "yes", "0", "off", "false", "no"):
        raise argparse.ArgumentTypeError(f"{text!r} is not on/off")
    return value in ("1", "on", "true", "yes")


def _report_dir(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: exists and is not a directory")
    if not path.resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: folder {path.parent} does not exist")
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_trace_arguments(parser, many=True)
    add_world_arguments(parser)
    g = parser.add_argument_group(
        "knobs (comma-separated values; the grid is their product; a knob not given keeps "
        "the policy's default)"
    )
    seconds = at.comma_list(at.bounded(0, 7 * 86400))
    g.add_argument("--window", type=seconds, help="scale-down window s")
    share = at.comma_list(at.bounded(0, 1, low_open=True))
    g.add_argument("--threshold", type=share, help="utilisation threshold")
    cells = at.comma_list(at.int_at_least(0, 1000))
    g.add_argument("--headroom", type=cells, help="headroom cells")
    g.add_argument("--prewarm", type=at.comma_list(_bool), help="pre-warming on/off")
    g.add_argument(
        "--in-flight", type=at.comma_list(at.int_at_least(1, 1000)), help="max cells booting"
    )
    g.add_argument(
        "--hedge",
        type=at.comma_list(at.bounded(0, 10)),
        help="spare boots per cell a wave waits for (0: off; docs/autoscaling.md, Hedged boots)",
    )
    g.add_argument(
        "--hedge-min-wave",
        type=at.comma_list(at.int_at_least(1, 1000)),
        help="smallest wave (cells) that gets hedged spares",
    )
    g.add_argument(
        "--hedge-delay",
        type=at.comma_list(at.bounded(0, 1)),
        help="start spares once a pending pod has waited this share of a boot",
    )
    g.add_argument(
        "--hedge-per-pod",
        type=at.comma_list(_bool),
        help="size the spares by the pods waiting too, not only the cells (on/off)",
    )
    g.add_argument(
        "--warm-spare",
        type=cells,
        help="empty cells kept while the pool grew recently (0: off; policy.warm_spare)",
    )
    g.add_argument(
        "--warm-spare-seconds", type=seconds, help="how long after growing the warm spare stays"
    )
    g.add_argument(
        "--warm-spare-lone-arrivals",
        type=cells,
        help="keep the warm spare while this many lone arrivals in a sharing pool happened "
        "within its time (0: after any growth; policy.warm_spare)",
    )
    parser.add_argument(
        "--seeds",
        type=at.int_at_least(1, 1000),
        default=5,
        help="seeds per point: --seed, --seed+1, ... (default 5; intervals need >= 2)",
    )
    parser.add_argument("--with-peers", action="store_true", help="add the peer baselines")
    parser.add_argument(
        "--reference",
        default="cluster-autoscaler",
        choices=sorted(PEERS),
        help="peer every row is judged against (with --with-peers; default cluster-autoscaler)",
    )
    parser.add_argument(
        "--report-dir", type=_report_dir, help="write sweep.md, sweep.json, sweep.png there"
    )
    add_parallel_arguments(parser)


def grid(args: argparse.Namespace) -> list[Point]:
    swept = [(k, getattr(args, k)) for k in KNOBS if getattr(args, k) is not None]
    combos = itertools.product(*(values for _, values in swept))
    return [Point(tuple(zip((k for k, _ in swept), combo, strict=True))) for combo in combos]


def work(pods: Sequence[TracePod], config: SimConfig, what: object) -> float | PolicySummary:
    """One task (module-level: picklable): the oracle's cost for ``what`` = an oracle method,
    else the run of a ``Point`` of our policy or of a peer name, summarised (cost ratio left
    NaN: the caller divides by the oracle of the same trace and seed)."""
    if isinstance(what, Point):
        tuned = replace(config, policy_config=what.apply(config.policy_config))
        result = simulate(pods, ProductionPolicy(), tuned)
        label = what.label()
    elif isinstance(what, str) and what in PEERS:
        result = simulate(pods, PEERS[what](), config)
        label = what
    else:
        return oracle(pods, config.policy_config.shape, method=str(what)).cost_cell_hours
    return replace(summarise(result, 0.0, config.boot.median_seconds), policy=label)


@dataclass(frozen=True, slots=True)
class Sweep:
    """What to run: traces (label -> pods per seed), seeds, points, peers."""

    traces: dict[str, dict[int, tuple[TracePod, ...]]]
    configs: dict[int, SimConfig]  # per seed
    points: tuple[Point, ...]
    peers: tuple[str, ...]
    oracle_method: str


def _calls(
    plan: Sweep, pool: Executor
) -> tuple[list[tuple[object, ...]], dict[tuple[str, int], int], dict[int, tuple[str, int]]]:
    """The tasks: one oracle per trace and distinct window (seeds that rescale a trace to the
    same pods share it: with ``--arrival-multiplier 1`` every seed does), then every point and
    peer per (trace, seed). Also which call is the oracle of each (trace, seed), and the
    (trace, seed) of each run."""
    calls: list[tuple[object, ...]] = []
    oracle_of: dict[tuple[str, int], int] = {}
    run_of: dict[int, tuple[str, int]] = {}
    for trace, by_seed in plan.traces.items():
        distinct: list[tuple[tuple[TracePod, ...], object, int]] = []  # pods, handle, oracle
        for seed, pods in by_seed.items():
            known = next((d for d in distinct if d[0] is pods or d[0] == pods), None)
            if known is None:
                known = (pods, pool.share(pods), len(calls))
                calls.append((known[1], plan.configs[seed], plan.oracle_method))
                distinct.append(known)
            oracle_of[(trace, seed)] = known[2]
            for what in (*plan.points, *plan.peers):
                run_of[len(calls)] = (trace, seed)
                calls.append((known[1], plan.configs[seed], what))
    return calls, oracle_of, run_of


def run_sweep(plan: Sweep, pool: Executor) -> list[SeedStats]:
    """Every oracle and (trace, seed, point or peer) run, summarised over seeds: one
    ``SeedStats`` per trace and point/peer, in trace then plan order."""
    calls, oracle_of, run_of = _calls(plan, pool)
    results = pool.run(work, calls)
    runs: dict[tuple[str, str], list[PolicySummary]] = {}
    for index, (trace, seed) in run_of.items():
        result, oracle_cost = results[index], results[oracle_of[(trace, seed)]]
        assert isinstance(result, PolicySummary) and isinstance(oracle_cost, float)
        ratio = result.cost_cell_hours / oracle_cost if oracle_cost > 0 else float("nan")
        runs.setdefault((trace, result.policy), []).append(replace(result, cost_ratio=ratio))
    seeds = tuple(plan.configs)
    return [over_seeds(policy, trace, seeds, rs) for (trace, policy), rs in runs.items()]


def _trace_label(path: Path | None, taken: set[str]) -> str:
    label = path.name if path is not None else "bundled openb"
    while label in taken:
        label += "'"
    taken.add(label)
    return label


def plan_from(args: argparse.Namespace) -> Sweep:
    """The sweep the flags ask for; ``TraceError`` (one line) on a bad trace."""
    seeds = range(args.seed, args.seed + args.seeds)
    traces: dict[str, dict[int, tuple[TracePod, ...]]] = {}
    taken: set[str] = set()
    for path in args.trace or [None]:
        label = _trace_label(path, taken)
        traces[label] = {}
        for seed in seeds:
            pods, loaded = trace_pods(
                argparse.Namespace(**{**vars(args), "trace": path, "seed": seed})
            )
            traces[label][seed] = pods
        print(f"trace {label}: {loaded.summary()}", file=sys.stderr)
    base = policy_config(args)
    configs = {s: sim_config(argparse.Namespace(**{**vars(args), "seed": s}), base) for s in seeds}
    peers = tuple(PEERS) if args.with_peers else ()
    return Sweep(traces, configs, tuple(grid(args)), peers, args.oracle_method)


def run(args: argparse.Namespace) -> int:
    if args.min_cells > args.max_cells:
        return fail(f"--min-cells {args.min_cells} is above --max-cells {args.max_cells}")
    try:
        plan = plan_from(args)
    except TraceError as error:
        return fail(f"trace {error}")
    empty = [label for label, by_seed in plan.traces.items() if not any(by_seed.values())]
    if empty:
        print(f"no pods in the selected window of {', '.join(empty)}", file=sys.stderr)
        return 1
    runs = len(plan.traces) * len(plan.configs) * (len(plan.points) + len(plan.peers))
    try:
        with executor(args.jobs, args.scheduler) as pool:
            print(f"{runs} runs on {pool.name}", file=sys.stderr)
            stats = run_sweep(plan, pool)
    except ClusterUnavailable as error:
        return fail(str(error))
    reference = args.reference if any(s.policy == args.reference for s in stats) else None
    print(report_markdown(stats, reference))
    if args.report_dir is not None:
        try:
            meta = {"runs": runs, "seeds": list(plan.configs), "traces": list(plan.traces)}
            for line in write_report(args.report_dir, stats, reference, meta):
                print(line, file=sys.stderr)
        except OSError as error:
            return fail(f"cannot write the report: {error}")
    return 0
