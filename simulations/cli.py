"""``gpucellpool simulate``: replay a demand trace through scaling policies and compare them.

Why this module exists: before turning autoscaling on, a user wants to know what it would cost
and how long pods would wait on *their* demand. With no arguments this replays the bundled
Alibaba openb trace (its last 7 days, on 1-GPU cells: a pool of tens of cells) through our
policy and every peer, and prints cost, waits and churn against the oracle.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from autoscaler.policy.types import CellShape, PolicyConfig
from simulations.baselines import PEERS
from simulations.baselines.oracle import BOUND, PACK
from simulations.engine import BootModel, DrainMode, ProductionPolicy, ScalingPolicy, SimConfig
from simulations.engine.hami import BINPACK, SPREAD
from simulations.engine.policy import legacy_windows_policy
from simulations.report import PlotUnavailable, markdown, plot_timelines, rich_table, write_json
from simulations.report.compare import Comparison, compare
from simulations.traces import (
    BUNDLED_OPENB_PATH,
    LoadResult,
    RescaleSpec,
    TracePod,
    load_generic,
    load_openb,
    rescale,
)

DAY = 86400.0
POLICIES: dict[str, Callable[[], ScalingPolicy]] = {"gpucellpool": ProductionPolicy, **PEERS}
EXTRA_POLICIES: dict[str, Callable[[], ScalingPolicy]] = {
    "gpucellpool-legacy-windows": legacy_windows_policy
}


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("trace")
    g.add_argument("--trace", type=Path, help="trace file (default: the bundled openb trace)")
    g.add_argument("--trace-format", choices=("auto", "openb", "generic"), default="auto")
    g.add_argument("--start", type=float, help="window start, trace seconds")
    g.add_argument("--days", type=float, help="window length in days (bundled: last 7 days)")
    g.add_argument("--time-compression", type=float, default=1.0)
    g.add_argument("--arrival-multiplier", type=float, default=1.0)
    g.add_argument("--duration-scale", type=float, default=1.0)
    g.add_argument("--jitter-seconds", type=float, default=300.0)


def add_world_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("pool and world")
    g.add_argument("--cell-gpus", type=int, default=1, help="GPUs per cell")
    g.add_argument("--cell-memory-mib", type=int, default=24576, help="memory per GPU")
    g.add_argument("--cell-slots", type=int, default=10, help="HAMi slots per GPU")
    g.add_argument("--max-cells", type=int, default=1000, help="maxReplicas")
    g.add_argument("--min-cells", type=int, default=0, help="minReplicas")
    g.add_argument("--physical-gpus", type=int, help="GPUs available for cells (default: no limit)")
    g.add_argument("--boot-seconds", type=float, default=300.0, help="median boot time")
    g.add_argument("--boot-sigma", type=float, default=0.25, help="lognormal sigma of boot time")
    g.add_argument("--boot-failure", type=float, default=0.0, help="probability a boot fails")
    g.add_argument("--drain", choices=[m.value for m in DrainMode], default="wait-for-idle")
    g.add_argument(
        "--drain-timeout",
        type=float,
        default=-1.0,
        help="wait-for-idle: abandon a drain after this many seconds (default: never)",
    )
    g.add_argument("--node-policy", choices=(BINPACK, SPREAD), default=BINPACK)
    g.add_argument("--gpu-policy", choices=(BINPACK, SPREAD), default=SPREAD)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--oracle-method", choices=(PACK, BOUND), default=PACK)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("output")
    g.add_argument("--format", choices=("table", "md"), default="table")
    g.add_argument("--json", type=Path, help="also write the summaries as JSON")
    g.add_argument("--plot", type=Path, help="also write a PNG of demand vs cells")
    g.add_argument("--no-progress", action="store_true")
    g.add_argument("--jobs", type=int, default=1, help="run policies in parallel processes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_trace_arguments(parser)
    add_world_arguments(parser)
    parser.add_argument(
        "--policy",
        action="append",
        choices=sorted({**POLICIES, **EXTRA_POLICIES}),
        help="policy to run (repeatable; default: --compare, every policy but the extras)",
    )
    parser.add_argument("--compare", action="store_true", help="run every policy (default)")
    add_output_arguments(parser)


def load_trace(path: Path | None, trace_format: str) -> LoadResult:
    path = path or BUNDLED_OPENB_PATH
    if trace_format == "auto":
        from simulations.traces.bundled import open_text  # noqa: PLC0415

        with open_text(path) as stream:
            header = stream.readline()
        trace_format = "openb" if "gpu_milli" in header else "generic"
    return load_openb(path) if trace_format == "openb" else load_generic(path)


def trace_pods(args: argparse.Namespace) -> tuple[tuple[TracePod, ...], LoadResult]:
    loaded = load_trace(args.trace, args.trace_format)
    last = max((p.arrival_seconds for p in loaded.pods), default=0.0)
    days = args.days if args.days is not None else (7.0 if args.trace is None else None)
    start = args.start
    if start is None:
        start = max(0.0, last - days * DAY) if args.trace is None and days else 0.0
    end = start + days * DAY if days else None
    spec = RescaleSpec(
        start_seconds=start,
        end_seconds=end,
        time_compression=args.time_compression,
        duration_scale=args.duration_scale,
        arrival_multiplier=args.arrival_multiplier,
        jitter_seconds=args.jitter_seconds,
        seed=args.seed,
    )
    return rescale(loaded.pods, spec), loaded


def policy_config(args: argparse.Namespace, **overrides: object) -> PolicyConfig:
    shape = CellShape(
        gpus=args.cell_gpus,
        memory_mib=args.cell_memory_mib,
        cores_percent=100,
        slots=args.cell_slots,
    )
    base = PolicyConfig(
        min_replicas=args.min_cells,
        max_replicas=args.max_cells,
        shape=shape,
        boot_seconds=args.boot_seconds,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def sim_config(args: argparse.Namespace, config: PolicyConfig) -> SimConfig:
    return SimConfig(
        policy_config=config,
        boot=BootModel(
            median_seconds=args.boot_seconds,
            sigma=args.boot_sigma,
            failure_probability=args.boot_failure,
        ),
        drain_mode=DrainMode(args.drain),
        drain_timeout_seconds=None if args.drain_timeout < 0 else args.drain_timeout,
        node_policy=args.node_policy,
        gpu_policy=args.gpu_policy,
        physical_gpus=args.physical_gpus,
        seed=args.seed,
    )


def emit(
    comparison: Comparison, args: argparse.Namespace, title: str, meta: dict[str, object]
) -> None:
    if args.format == "md" or not sys.stdout.isatty():
        print(f"{title}\n")
        print(markdown(comparison.summaries))
    else:
        from rich.console import Console  # noqa: PLC0415

        Console().print(rich_table(comparison.summaries, title))
    if args.json:
        write_json(args.json, comparison.summaries, meta)
    if args.plot:
        try:
            plot_timelines(comparison.results, args.plot, title)
        except PlotUnavailable as error:
            print(f"plot skipped: {error}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    pods, loaded = trace_pods(args)
    print(f"trace: {loaded.summary()}", file=sys.stderr)
    if not pods:
        print("no pods in the selected window", file=sys.stderr)
        return 1
    names = args.policy or list(POLICIES)
    config = sim_config(args, policy_config(args))
    comparison = compare(
        pods,
        {name: {**POLICIES, **EXTRA_POLICIES}[name] for name in names},
        config,
        oracle_method=args.oracle_method,
        show_progress=False if args.no_progress else None,
        jobs=args.jobs,
    )
    span_days = max(p.arrival_seconds for p in pods) / DAY
    title = f"{len(pods)} pods over {span_days:.1f} days, {args.cell_gpus}-GPU cells"
    meta = {"pods": len(pods), "span_days": span_days, "trace": str(args.trace or "bundled")}
    emit(comparison, args, title, meta)
    return 0
