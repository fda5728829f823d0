"""``gpucellpool demo``: the real operator on the twin, a compressed trace, a live progress line.

Why this module exists: the fastest way to see what gpucellpool does is to watch it do it. One
command starts two real apiservers, the simulated KubeSwift/kubelet/HAMi, a real Prometheus and
``gpucellpool run``, replays a few hours of the bundled GPU trace in a few minutes, prints one
updating line, and writes a report (the simulator's metrics for the run, and how closely the
offline simulator predicted it) and a PNG of demand vs cells.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from simulations.simulator import argtypes as at

if TYPE_CHECKING:  # the twin's imports wait until a run (a bad flag is refused at once)
    from simulations.demo.config import DemoSpec
    from simulations.demo.twin_records import Snapshot


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = "%(prog)s [options] (see --help)"
    parser.add_argument(
        "--minutes",
        type=at.bounded(0, 24 * 60, low_open=True),
        default=3.0,
        help="wall minutes the trace slice plays in (default: 3)",
    )
    parser.add_argument(
        "--speed",
        type=at.bounded(0, 10000, low_open=True),
        help="trace seconds per wall second (overrides --minutes; 60 plays an hour a minute)",
    )
    parser.add_argument(
        "--trace", type=at.existing_file, help="trace file (default: the bundled openb)"
    )
    parser.add_argument("--start", type=at.nonnegative_float, help="slice start, trace seconds")
    parser.add_argument(
        "--hours",
        type=at.bounded(0, 24 * 7, low_open=True),
        help="slice length (default: 1 hour)",
    )
    parser.add_argument(
        "--multiplier",
        type=at.bounded(0, 100, low_open=True),
        help="arrival multiplier (< 1 thins)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("demo-out"), help="report directory (default: demo-out)"
    )


def spec_from(args: argparse.Namespace) -> DemoSpec:
    from simulations.demo.config import DEFAULT_HOURS, HOUR, DemoSpec  # noqa: PLC0415

    hours = DEFAULT_HOURS if args.hours is None else args.hours
    spec = DemoSpec(trace=args.trace, hours=hours)
    if args.start is not None:
        spec = replace(spec, start_seconds=args.start)
    elif args.trace is not None:
        spec = replace(spec, start_seconds=0.0)
    if args.multiplier is not None:
        spec = replace(spec, multiplier=args.multiplier)
    speed = args.speed or spec.hours * HOUR / (args.minutes * 60.0)
    return replace(spec, compression=speed)


def progress_line(snap: Snapshot, total_pods: int, compression: float) -> str:
    """One line: trace time, pods, cells, desired."""
    trace_min = snap.time_seconds * compression / 60.0
    booting = max(0, snap.cells - snap.ready - snap.draining)
    return (
        f"trace {trace_min:6.1f} min | pods {snap.pods_created}/{total_pods} created, "
        f"{snap.pods_pending} pending, {snap.pods_running} running | demand {snap.demand_cells}"
        f" cells | cells {snap.ready} ready, {booting} booting, {snap.draining} draining"
        f" | desired {snap.desired}"
    )


def printer(stream: TextIO, compression: float):  # type: ignore[no-untyped-def]
    """A progress callback rewriting one terminal line (a line per 5 s when not a TTY)."""
    tty = stream.isatty()
    last = [-5.0]

    def show(snap: Snapshot, total: int) -> None:
        line = progress_line(snap, total, compression)
        if tty:
            stream.write("\r\x1b[2K" + line)
            stream.flush()
        elif snap.time_seconds - last[0] >= 5.0:
            last[0] = snap.time_seconds
            print(line, file=stream, flush=True)

    return show


def _one_line(error: BaseException) -> str:
    """An error as one line: its last three lines joined (a log tail ends with the cause)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " | ".join(lines[-3:]) or type(error).__name__


def run(args: argparse.Namespace) -> int:
    from simulations.demo.report import build_report, markdown_report, write_report  # noqa: PLC0415
    from simulations.demo.twin_run import run_twin  # noqa: PLC0415
    from simulations.simulator.traces.model import TraceError  # noqa: PLC0415

    spec = spec_from(args)
    out = args.out.resolve()  # every path below (kubeconfigs included) is absolute
    print(
        f"gpucellpool demo: {spec.hours:g} h of trace at x{spec.compression:.0f} "
        f"(~{spec.horizon_seconds / 60:.1f} min); starting apiservers, twin, Prometheus, "
        "operator ...",
        file=sys.stderr,
    )
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    show = printer(sys.stderr, spec.compression)
    try:
        run_result = asyncio.run(run_twin(spec, workdir=work, progress=show))
    except TraceError as error:
        print(f"gpucellpool demo: trace {error}", file=sys.stderr)
        return 2
    except Exception as error:  # the CLI boundary: one line and the logs' place, no traceback
        print(
            f"\ngpucellpool demo: failed: {type(error).__name__}: {_one_line(error)} "
            f"(logs in {work})",
            file=sys.stderr,
        )
        return 1
    # a success keeps the logs, not the etcd and Prometheus data (a failure keeps all of it)
    for data in (work / "harness", work / "prometheus" / "data"):
        shutil.rmtree(data, ignore_errors=True)
    print(file=sys.stderr)
    report = build_report(run_result)
    written = write_report(report, out)
    print(markdown_report(report))
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0
