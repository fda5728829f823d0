"""``gpucellpool simulate``: replay a demand trace through scaling policies and compare them.

Why this module exists: before turning autoscaling on, a user wants to know what it would cost
and how long pods would wait on *their* demand. With no arguments this replays the bundled
Alibaba openb trace (its last 7 days, on 1-GPU cells: a pool of tens of cells) through our
policy and every peer, and prints cost, waits and churn against the oracle.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from dataclasses import replace

from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape
from simulations.simulator import argtypes as at
from simulations.simulator.baselines import PEERS
from simulations.simulator.baselines.oracle import BOUND, PACK
from simulations.simulator.distributed import ClusterUnavailable, scheduler_address
from simulations.simulator.engine import (
    BootModel,
    DrainMode,
    ProductionPolicy,
    ScalingPolicy,
    SimConfig,
)
from simulations.simulator.engine.hami import BINPACK, SPREAD
from simulations.simulator.engine.policy import atomic_gang_policy, legacy_windows_policy
from simulations.simulator.report import (
    PlotUnavailable,
    markdown,
    plot_timelines,
    rich_table,
    write_json,
)
from simulations.simulator.report.compare import Comparison, compare
from simulations.simulator.report.render import gang_rich_table
from simulations.simulator.traces import LoadResult, RescaleSpec, TracePod, rescale
from simulations.simulator.traces.detect import FORMATS, load_trace, require_well_formed
from simulations.simulator.traces.dra import MODES as DRA_MODES
from simulations.simulator.traces.dra import in_mode
from simulations.simulator.traces.model import HORIZON_SECONDS, TraceError

DAY = 86400.0
POLICIES: dict[str, Callable[[], ScalingPolicy]] = {"gpucellpool": ProductionPolicy, **PEERS}
EXTRA_POLICIES: dict[str, Callable[[], ScalingPolicy]] = {
    "gpucellpool-legacy-windows": legacy_windows_policy,
    "gpucellpool-atomic": atomic_gang_policy,
}


def add_trace_arguments(parser: argparse.ArgumentParser, many: bool = False) -> None:
    """The trace flags; ``many``: ``--trace`` may be repeated (a list, None when not given)."""
    # argparse would print the whole many-line usage above a one-line error
    parser.usage = "%(prog)s [options] (see --help)"
    g = parser.add_argument_group("trace")
    g.add_argument(
        "--trace",
        type=at.existing_file,
        action="append" if many else "store",
        help="trace file (default: bundled openb)" + ("; repeatable" if many else ""),
    )
    g.add_argument("--trace-format", choices=FORMATS, default="auto")
    g.add_argument(
        "--skip-malformed",
        action="store_true",
        help="skip and count malformed rows (default: the first one fails with file and line)",
    )
    g.add_argument("--start", type=at.nonnegative_float, help="window start, trace seconds")
    g.add_argument(
        "--days", type=at.positive_float, help="window length in days (bundled: last 7 days)"
    )
    g.add_argument("--time-compression", type=at.factor, default=1.0)
    g.add_argument("--arrival-multiplier", type=at.bounded(0, 1000, low_open=True), default=1.0)
    g.add_argument("--duration-scale", type=at.factor, default=1.0)
    g.add_argument("--jitter-seconds", type=at.nonnegative_float, default=300.0)


def add_world_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("pool and world")
    count = at.int_at_least
    g.add_argument("--cell-gpus", type=count(1, 1024), default=1, help="GPUs per cell")
    g.add_argument("--cell-memory-mib", type=count(1), default=24576, help="memory per GPU")
    g.add_argument("--cell-slots", type=count(1, 1024), default=10, help="HAMi slots per GPU")
    g.add_argument(
        "--hami-mode",
        choices=DRA_MODES,
        default="DevicePlugin",
        help="HAMi's accounting: DRA reads every ask through the ResourceClaim HAMi's webhook "
        "makes (memory percentages become MiB of --cell-memory-mib)",
    )
    g.add_argument("--max-cells", type=count(0, 10**6), default=1000, help="maxReplicas")
    g.add_argument("--min-cells", type=count(0, 10**6), default=0, help="minReplicas")
    g.add_argument(
        "--physical-gpus", type=count(0), help="GPUs available for cells (default: no limit)"
    )
    g.add_argument(
        "--boot-seconds",
        type=at.bounded(0, 86400, low_open=True),
        default=300.0,
        help="median boot time",
    )
    g.add_argument(
        "--boot-sigma", type=at.bounded(0, 5), default=0.25, help="lognormal sigma of boot time"
    )
    g.add_argument(
        "--boot-failure", type=at.bounded(0, 0.99), default=0.0, help="probability a boot fails"
    )
    g.add_argument(
        "--exec-lag-seconds",
        type=at.bounded(0, 86400),
        default=0.0,
        help="decision to execution (guest created, drain started), as measured on your cluster",
    )
    g.add_argument(
        "--bind-delay-seconds",
        type=at.bounded(0, 86400),
        default=0.0,
        help="a cell's boot end (node Ready) to the first pod bound on it, as on your cluster",
    )
    g.add_argument("--drain", choices=[m.value for m in DrainMode], default="wait-for-idle")
    g.add_argument(
        "--drain-timeout",
        type=at.bounded(-1, 10 * 86400),
        default=-1.0,
        help="wait-for-idle: abandon a drain after this many seconds (default -1: never)",
    )
    g.add_argument("--node-policy", choices=(BINPACK, SPREAD), default=BINPACK)
    g.add_argument("--gpu-policy", choices=(BINPACK, SPREAD), default=SPREAD)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--oracle-method", choices=(PACK, BOUND), default=PACK)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("output")
    g.add_argument("--format", choices=("table", "md"), default="table")
    g.add_argument("--json", type=at.output_file, help="also write the summaries as JSON")
    g.add_argument("--plot", type=at.output_file, help="also write a PNG of demand vs cells")
    g.add_argument("--no-progress", action="store_true")
    add_parallel_arguments(parser)


def add_parallel_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the simulations run (simulations/simulator/distributed.py); results are the same
    anywhere."""
    g = parser.add_argument_group("parallel execution")
    g.add_argument(
        "--jobs",
        type=at.int_at_least(1, 64),
        default=1,
        help="run simulations in N local processes",
    )
    g.add_argument(
        "--scheduler",
        type=scheduler_address,
        help="run them on this Dask distributed scheduler instead (tcp://host:port; "
        "needs gpucellpool[dask])",
    )


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


def trace_pods(args: argparse.Namespace) -> tuple[tuple[TracePod, ...], LoadResult]:
    """The window of the trace the flags select; ``TraceError`` (one line) on bad input."""
    loaded = load_trace(args.trace, args.trace_format)
    if not args.skip_malformed:
        require_well_formed(loaded, args.trace)
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
    pods = in_mode(rescale(loaded.pods, spec), args.hami_mode, args.cell_memory_mib)
    end = max((p.arrival_seconds + p.duration_seconds for p in pods), default=0.0)
    if end > HORIZON_SECONDS:
        raise TraceError(
            args.trace or "bundled trace",
            f"after rescaling the trace ends at {end:.4g} s, beyond the {HORIZON_SECONDS:.0f} s "
            "(10-year) horizon; lower --duration-scale",
        )
    return pods, loaded


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
        exec_lag_seconds=args.exec_lag_seconds,
        bind_delay_seconds=args.bind_delay_seconds,
    )


def emit(
    comparison: Comparison, args: argparse.Namespace, title: str, meta: dict[str, object]
) -> None:
    if args.format == "md" or not sys.stdout.isatty():
        print(f"{title}\n")
        print(markdown(comparison.summaries))
    else:
        from rich.console import Console  # noqa: PLC0415

        console = Console(width=min(100, shutil.get_terminal_size().columns))
        console.print(rich_table(comparison.summaries, title))
        gangs = gang_rich_table(comparison.summaries)
        if gangs is not None:
            console.print(gangs)
    if args.json:
        write_json(args.json, comparison.summaries, meta)
    if args.plot:
        try:
            plot_timelines(comparison.results, args.plot, title)
        except PlotUnavailable as error:
            print(f"plot skipped: {error}", file=sys.stderr)


def fail(message: str) -> int:
    """Print one ``gpucellpool: ...`` line to stderr; the usage-error exit code."""
    print(f"gpucellpool: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    if args.min_cells > args.max_cells:
        return fail(f"--min-cells {args.min_cells} is above --max-cells {args.max_cells}")
    try:
        pods, loaded = trace_pods(args)
    except TraceError as error:
        return fail(f"trace {error}")
    print(f"trace: {loaded.summary()}", file=sys.stderr)
    if not pods:
        print("no pods in the selected window", file=sys.stderr)
        return 1
    names = args.policy or list(POLICIES)
    config = sim_config(args, policy_config(args))
    try:
        comparison = compare(
            pods,
            {name: {**POLICIES, **EXTRA_POLICIES}[name] for name in names},
            config,
            oracle_method=args.oracle_method,
            show_progress=False if args.no_progress else None,
            jobs=args.jobs,
            scheduler=args.scheduler,
        )
    except ClusterUnavailable as error:
        return fail(str(error))
    span_days = max(p.arrival_seconds for p in pods) / DAY
    title = f"{len(pods)} pods over {span_days:.1f} days, {args.cell_gpus}-GPU cells"
    meta = {
        "pods": len(pods),
        "unhostable_pods": max(s.unschedulable for s in comparison.summaries),
        "span_days": span_days,
        "trace": str(args.trace or "bundled"),
    }
    try:
        emit(comparison, args, title, meta)
    except OSError as error:
        return fail(f"cannot write output: {error}")
    return 0
