"""Experiment: our policy's in-flight rule against the Cluster Autoscaler baseline, 5 seeds each.

Why this module exists: issue 14 asks for a default that is no more expensive than Cluster
Autoscaler and waits no longer at p95, judged on 95 % intervals over seeds (boot times are
random). This script measures candidate in-flight rules on the helios-earth development traces
and the bundled openb window, 1-GPU cells, default 300 s median boot, and prints one Markdown
table (mean and 95 % interval per figure). It is a script, not a test: run it under
``nice -n 19 .venv/bin/python -m tests.bench.policy_vs_ca --jobs 2``.

Variants are selected by swapping ``autoscaler.policy.limits.in_flight_limit`` inside the
worker process before the production ``decide`` runs, or by ``PolicyConfig`` fields
(``CONFIGS``: the hedged-boot fractions); everything else is the default policy. ``--history``
starts every window with the pool's boots already proven (``PolicyMemory.boots_proven``): a
window cut from a month starts after days of the same pool, whose memory annotation keeps the
proof; without it a window that opens on an empty pool pays the never-proven guard's first
wave (``maxCellsInFlight``). ``--gpus`` packs 1-GPU pods into 4- or 8-GPU cells.

For our policy the table also counts, per run, the acted cuts of the cell count (cancelled
boots, retired and drained cells), the flaps as ``GPUCellPoolScaleFlapping`` sees them (a cut
that removed cells which served, followed by a rise within 600 s: cells given up, then bought
again), the cuts that gave up hedged spares (reason ``SparesCancelled``: cancelled boots,
retired unused cells) and how many of those a rise followed within 600 s (boot minutes paid
twice), and the Ready cells that never ran a pod retired at once (``hedge``);
``hedge-0.75-idle`` is the hedge before that retirement (such cells waited out the idle
window), for a side-by-side comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.policy import limits
from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape, CellState, Observation, PolicyMemory
from simulations.simulator.baselines import PEERS
from simulations.simulator.baselines.oracle import BOUND, oracle
from simulations.simulator.engine import ProductionPolicy, SimConfig, simulate
from simulations.simulator.engine.sim import BootModel
from simulations.simulator.report import summarise
from simulations.simulator.traces import RescaleSpec, load_bundled, rescale
from simulations.simulator.traces.generic import load_generic
from simulations.simulator.traces.model import TracePod

ROOT = Path(__file__).resolve().parents[2]
HELIOS = ROOT.parent / "shared" / "traces" / "helios-earth"
DAY = 86400.0
T_975_DF4 = 2.776  # Student t, 95 % two-sided, 4 degrees of freedom (5 seeds)

ORIGINAL_IN_FLIGHT = limits.in_flight_limit
VARIANTS: dict[str, Callable[..., int | None]] = {
    # maxCellsInFlight as a fixed cap (the default before issue 14)
    "fixed": lambda configured, ready, failed, before=False: configured,
    # slow start: the cap grows to the Ready cell count (doubles per successful wave)
    "slow-start": lambda configured, ready, failed, before=False: (
        configured if failed else max(configured, ready)
    ),
    # the cap until a cell is Ready now, and on a failure (no memory: a pool at zero is cold)
    "proven-now": lambda configured, ready, failed, before=False: (
        configured if failed or not ready else None
    ),
    # no in-flight limit at all
    "no-cap": lambda configured, ready, failed, before=False: None,
    # the default since issue 14: the cap until a cell has been Ready (remembered through zero
    # cells), and while one is Failed
    "proven": ORIGINAL_IN_FLIGHT,
}
# name: PolicyConfig fields over the defaults (in-flight rule: the default's)
CONFIGS: dict[str, dict[str, Any]] = {
    "hedge-0": {"boot_hedge_fraction": 0.0},  # no spare boots (the default before)
    "hedge-0.25": {"boot_hedge_fraction": 0.25},
    "hedge-0.5": {"boot_hedge_fraction": 0.5},
    "hedge-0.75": {"boot_hedge_fraction": 0.75},
    "hedge-1": {"boot_hedge_fraction": 1.0},
    # the hedge before unused Ready cells retired at once (they idled out the window)
    "hedge-0.75-idle": {"boot_hedge_fraction": 0.75},
    # spares for waves of any size (the default starts them for waves of 3 cells or more)
    "hedge-0.75-min1": {"boot_hedge_fraction": 0.75, "boot_hedge_min_wave": 1},
    "hedge-0.5-min1": {"boot_hedge_fraction": 0.5, "boot_hedge_min_wave": 1},
    # openb's fractional pods: an empty cell kept, or the forecast's pre-warm, on top
    "hedge-0.75-min1-h1": {
        "boot_hedge_fraction": 0.75,
        "boot_hedge_min_wave": 1,
        "headroom_cells": 1,
    },
    "hedge-0.75-min1-prewarm": {
        "boot_hedge_fraction": 0.75,
        "boot_hedge_min_wave": 1,
        "prewarm": True,
    },
    "hedge-0-h1": {"boot_hedge_fraction": 0.0, "headroom_cells": 1},
    # only empty cells are scale-down candidates (Cluster Autoscaler's view of a 1-GPU cell
    # running a fractional HAMi pod: a whole used GPU)
    "hedge-0.75-min1-t0": {
        "boot_hedge_fraction": 0.75,
        "boot_hedge_min_wave": 1,
        "utilization_threshold": 0.01,
    },
}
IDLE_BETS = frozenset({"hedge-0.75-idle"})

# name: (loader, window start day, window days). Helios (May 2020): two days around each
# virtual cluster's largest bursts; openb: its last days (a negative start counts from the end).
# Short windows because the shared 2-core machine gives a niced job a few % of a core.
TRACES: dict[str, tuple[str, float, float]] = {
    "vcMod": ("helios", 20.0, 2.0),
    "vcSoL": ("helios", 3.0, 2.0),
    "vc8Sj": ("helios", 8.0, 2.0),
    "vc6YE": ("helios", 10.0, 1.5),
    "openb": ("openb", -3.0, 3.0),
}
# ``--long``: the windows issue 14 names (7 days of each helios cluster from May 8, the last
# 14 days of openb), affordable since the engine skips idle ticks.
LONG_TRACES: dict[str, tuple[str, float, float]] = {
    "vcMod": ("helios", 7.0, 7.0),
    "vcSoL": ("helios", 7.0, 7.0),
    "vc8Sj": ("helios", 7.0, 7.0),
    "vc6YE": ("helios", 7.0, 7.0),
    "openb": ("openb", -14.0, 14.0),
}


def trace(name: str, long: bool = False) -> tuple[TracePod, ...]:
    """The window of ``name``, every pod clipped to end by the window's end (the helios
    conversion lets pods alive at the end of May run to its last minute, which would make a
    2-day window simulate weeks)."""
    kind, start_day, days = (LONG_TRACES if long else TRACES)[name]
    if kind == "openb":
        pods = load_bundled().pods
        start = max(p.arrival_seconds for p in pods) + start_day * DAY
    else:
        pods = load_generic(HELIOS / f"{name}.csv.gz").pods
        start = start_day * DAY
    end = start + days * DAY
    window = rescale(pods, RescaleSpec(start_seconds=start, end_seconds=end))
    span = end - start
    return tuple(
        replace(p, duration_seconds=min(p.duration_seconds, span - p.arrival_seconds))
        for p in window
        if p.arrival_seconds < span
    )


class Measured(ProductionPolicy):
    """The production policy, optionally with ``history`` (its first decision sees a memory with
    boots proven: the pool ran before the window, and its memory annotation kept the proof) and
    ``idle_bets`` (the hedge before unused Ready cells retired at once: the memory of unused
    cells is wiped before each call, so such a cell waits out the idle window). Records each
    acted change of the cell count, (time, delta), for the flap count."""

    def __init__(
        self, overrides: dict[str, Any], history: bool = False, idle_bets: bool = False
    ) -> None:
        super().__init__(overrides=overrides)
        self.started = not history
        self.idle_bets = idle_bets
        self.changes: list[tuple[float, int]] = []
        self.cancels: list[float] = []  # times of cuts that gave up spares (SparesCancelled)
        self.retired = 0  # Ready cells that never ran a pod, retired at once

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        if not self.started:
            self.started = True
            memory = replace(memory, boots_proven=True)
        if self.idle_bets:
            memory = replace(memory, never_used=frozenset())
        decision = super().decide(observation, memory, config, now)
        current = sum(c.state in LIVE for c in observation.cells)
        if decision.act and decision.desired_replicas != current:
            self.changes.append((now, decision.desired_replicas - current))
            if decision.reason is Reason.SPARES_CANCELLED:
                self.cancels.append(now)
            ready = {c.name for c in observation.cells if c.state == CellState.READY}
            bets = ready & memory.never_used
            self.retired += sum(1 for v in decision.victims if v in bets)
        return decision


LIVE = (CellState.READY, CellState.BOOTING)
FLAP_SECONDS = 600.0  # GPUCellPoolScaleFlapping's window: one scale-down stabilisation window


def flaps(
    changes: list[tuple[float, int]],
    window: float = FLAP_SECONDS,
    only: frozenset[float] | None = None,
    but: frozenset[float] = frozenset(),
) -> int:
    """Cuts of the cell count followed by a rise within ``window``: cells given up and then
    bought again. ``only``: count just the cuts at these times; ``but``: not these."""
    rises = [t for t, d in changes if d > 0]
    return sum(
        1
        for t, d in changes
        if d < 0
        and (only is None or t in only)
        and t not in but
        and any(t < r <= t + window for r in rises)
    )


def run_one(
    trace_name: str,
    policy: str,
    seed: int,
    long: bool = False,
    history: bool = False,
    gpus: int = 1,
) -> dict[str, Any]:
    """One simulation; module-level so worker processes can run it."""
    pods = trace(trace_name, long)
    config = SimConfig(
        policy_config=PolicyConfig(max_replicas=1000, shape=CellShape(gpus=gpus)),
        boot=BootModel(median_seconds=300.0),
        tail_seconds=3600.0,
        seed=seed,
    )
    ours: Measured | None = None
    if policy == "cluster-autoscaler":
        result = simulate(pods, PEERS[policy](), config)
    elif policy in CONFIGS:
        ours = Measured(CONFIGS[policy], history, idle_bets=policy in IDLE_BETS)
        result = simulate(pods, ours, config)
    else:
        limits.in_flight_limit = VARIANTS[policy]
        try:
            ours = Measured({}, history)
            result = simulate(pods, ours, config)
        finally:
            limits.in_flight_limit = ORIGINAL_IN_FLIGHT
    reference = oracle(pods, config.policy_config.shape, method=BOUND).cost_cell_hours
    s = summarise(result, reference, 300.0)
    return {
        "trace": trace_name,
        "gpus": gpus,
        "history": history,
        "policy": policy,
        "seed": seed,
        "cost_cell_hours": s.cost_cell_hours,
        "x_oracle": s.cost_ratio,
        "p95": s.wait_p95_seconds,
        "p99": s.wait_p99_seconds,
        "max": s.wait_max_seconds,
        "over_boot": s.waited_longer_than_boot,
        "pods": s.pods,
        # the GPUCellPoolScaleFlapping semantics: a scale-down of cells that served, then a rise
        "flaps": flaps(ours.changes, but=frozenset(ours.cancels)) if ours is not None else None,
        # spares given up (cancelled boots, retired unused cells), then a rise within 600 s
        "rebought": flaps(ours.changes, only=frozenset(ours.cancels)) if ours else None,
        "cancels": len(ours.cancels) if ours is not None else None,
        "cuts": sum(1 for _, d in ours.changes if d < 0) if ours is not None else None,
        "retired": ours.retired if ours is not None else None,
    }


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % interval (Student t over the seeds)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, T_975_DF4 * statistics.stdev(values) / math.sqrt(len(values))


def _label(row: dict[str, Any]) -> str:
    """The table's trace column: the trace, its cell size when not 1 GPU, and the proof the
    pool starts with (``--history``)."""
    gpus = int(row.get("gpus", 1))
    label = row["trace"] if gpus == 1 else f"{row['trace']} {gpus}-GPU cells"
    return label + (" (history)" if row.get("history") else "")


def table(rows: list[dict[str, Any]]) -> str:
    def order(key: tuple[str, str]) -> tuple[int, str, str]:
        return (list(TRACES).index(key[0].split()[0]), key[0], key[1])

    keys = sorted({(_label(r), r["policy"]) for r in rows}, key=order)
    out = [
        "| trace | policy | seeds | cell-hours | x oracle | p95 s | p99 s | max s | > 1 boot "
        "| cuts | flaps | spares cancelled | then re-bought | retired |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tr, pol in keys:
        group = [r for r in rows if _label(r) == tr and r["policy"] == pol]
        cells = []
        for field, fmt in (
            ("cost_cell_hours", "{:,.0f} ± {:,.0f}"),
            ("x_oracle", "{:.3f} ± {:.3f}"),
            ("p95", "{:.0f} ± {:.0f}"),
            ("p99", "{:.0f} ± {:.0f}"),
            ("max", "{:.0f} ± {:.0f}"),
            ("over_boot", "{:.1%} ± {:.1%}"),
        ):
            cells.append(fmt.format(*interval([float(r[field]) for r in group])))
        # rows from before a field was counted show none
        for field in ("cuts", "flaps", "cancels", "rebought", "retired"):
            counted = [float(r[field]) for r in group if r.get(field) is not None]
            cells.append("{:.0f} ± {:.0f}".format(*interval(counted)) if counted else "-")
        out.append(f"| {tr} | {pol} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--policies", default="fixed,proven,cluster-autoscaler")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("policy_vs_ca.jsonl"))
    parser.add_argument("--table-only", action="store_true", help="summarise --out, run nothing")
    parser.add_argument("--long", action="store_true", help="7-day helios, 14-day openb windows")
    parser.add_argument("--history", action="store_true", help="boots proven at the start")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per cell")
    args = parser.parse_args(argv)
    rows = (
        [json.loads(line) for line in args.out.read_text().splitlines()]
        if args.out.exists()
        else []
    )
    if not args.table_only:
        done = {
            (r["trace"], r["policy"], r["seed"], r.get("history", False), r.get("gpus", 1))
            for r in rows
        }
        todo = [
            (t, p, s)
            for s in range(args.seeds)
            for t in args.traces.split(",")
            for p in args.policies.split(",")
            if (t, p, s, args.history, args.gpus) not in done
        ]
        with ProcessPoolExecutor(max_workers=args.jobs) as pool, args.out.open("a") as sink:
            futures = [
                pool.submit(run_one, *task, args.long, args.history, args.gpus) for task in todo
            ]
            for future in as_completed(futures):
                row = future.result()
                rows.append(row)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                print(row["trace"], row["policy"], row["seed"], round(row["p95"]), file=sys.stderr)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
