"""The demo's report: the simulator's metrics computed from the twin run, next to the simulator.

Why this module exists: a twin run is only convincing next to the offline prediction for the
same inputs. This replays the same compressed trace through ``simulate`` with the same pool
spec (``config.sim_config``), turns the twin's recording into a ``SimResult`` so the very same
``summarise`` / ``markdown`` / ``plot_timelines`` apply to both, and measures fidelity
(``simulations.simulator.fidelity``) over the simulator's horizon: from the replay's start until its
last pod ended (what the simulator accounts; the twin's scale-down tail after that is shown on the
plot but not compared). Reported times are trace time (compressed seconds x compression), so
the numbers read like ``gpucellpool simulate`` output.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simulations.demo.config import (
    SHAPE,
    DemoSpec,
    WorldTimings,
    sim_config,
    sim_policy,
    unhostable_count,
)
from simulations.demo.twin_measures import (
    binds_after_ready,
    boot_reaction,
    boots,
    cell_timeline,
    first_reaction,
    guest_boots,
    reaction,
    removal_step,
    summary,
    timeline,
    waits,
)
from simulations.demo.twin_run import TwinResult
from simulations.demo.utilisation import mean_utilisation
from simulations.simulator.baselines.oracle import oracle
from simulations.simulator.engine import Sample, ScalingPolicy, SimResult, simulate
from simulations.simulator.fidelity import (
    MAX_CELL_HOURS_ERROR,
    MIN_WITHIN_FRACTION,
    Fidelity,
    compare,
)
from simulations.simulator.report import (
    PlotUnavailable,
    PolicySummary,
    markdown,
    plot_timelines,
    summarise,
)
from simulations.simulator.traces import TracePod

TWIN = "gpucellpool on the twin"


@dataclass(frozen=True, slots=True)
class DemoReport:
    spec: DemoSpec
    fidelity: Fidelity  # against the simulator given the twin's measured timings
    fidelity_nominal: Fidelity  # against the simulator with the spec's nominal timings
    timings: WorldTimings
    results: tuple[SimResult, ...]  # oracle, simulator (measured), simulator (nominal), twin
    summaries: tuple[PolicySummary, ...]
    wall_seconds: float
    cpu_seconds: dict[str, float]
    twin_counts: dict[str, Any]
    timelines: dict[str, list[tuple[float, float]]]  # compressed seconds
    panels_total: int = 0
    panels_empty: tuple[str, ...] = ()  # "<dashboard: panel>: <query>" with no data
    # against the simulator given the measured timings without the execution lag (boots from
    # the decision, every decision applied at once): the model before engine.exec_lag
    fidelity_lag_free: Fidelity | None = None
    lags: tuple[float, ...] = ()  # the twin's decision -> execution lags, compressed seconds
    # a waiting pod's cell Ready -> the pod bound there, compressed seconds (Recorder)
    binds: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class TwinSide:
    """What the fidelity comparison takes from a twin run (times in compressed seconds)."""

    spec: DemoSpec
    pods: tuple[TracePod, ...]
    cells: tuple[tuple[float, float], ...]  # the twin's cell timeline (twin_measures.cell_timeline)
    end_seconds: float  # the replay's end


def cells_of(result: SimResult) -> list[tuple[float, float]]:
    """A simulator run's billed cells (ready + booting + draining) as a step function: its
    exact change points (``SimResult.cells``), else (a result built without them) the
    timeline's samples."""
    if result.cells:
        return [(t, float(n)) for t, n in result.cells]
    return [(s.time_seconds, float(s.ready + s.booting + s.draining)) for s in result.timeline]


def twin_result(run: TwinResult, horizon: float, fidelity: Fidelity) -> SimResult:
    """The twin run in the simulator's result shape (compressed seconds)."""
    rec = run.recorder
    counts = summary(rec)
    return SimResult(
        policy=TWIN,
        pods=len(run.pods),
        cost_cell_hours=fidelity.cell_hours_a,
        waits_seconds=waits(rec, run.end_seconds),
        unplaced=counts["pods_never_bound"],
        unschedulable=0,
        evictions=0,
        scale_up_cells=counts["guests_created"],
        scale_down_cells=counts["guests_deleted"],
        boot_failures=0,
        mean_utilisation=mean_utilisation(
            ((p.node, p.bound, p.ended, p.ask) for p in rec.pods.values() if p.bound is not None),
            [(s.time_seconds, s.ready) for s in rec.samples],
            SHAPE,
            horizon,
        ),
        end_seconds=horizon,
        events=len(rec.samples),
        decisions=0,
        reasons=(),
        timeline=timeline(rec),
        boot_seconds=run.spec.wall(run.spec.boot_seconds),
    )


def to_trace_time(result: SimResult, factor: float) -> SimResult:
    """``result`` with every time (and cell-hours) multiplied by ``factor``."""
    return replace(
        result,
        cost_cell_hours=result.cost_cell_hours * factor,
        waits_seconds=tuple(w * factor for w in result.waits_seconds),
        end_seconds=result.end_seconds * factor,
        boot_seconds=result.boot_seconds * factor,
        timeline=tuple(replace(s, time_seconds=s.time_seconds * factor) for s in result.timeline),
        cells=tuple((t * factor, n) for t, n in result.cells),
    )


def _clip(result: SimResult, end: float) -> SimResult:
    kept: list[Sample] = [s for s in result.timeline if s.time_seconds <= end]
    return replace(result, timeline=tuple(kept))


def measured_timings(run: TwinResult, lag: bool = True) -> WorldTimings:
    """The twin's timings; with ``lag`` the provisioner's execution lag apart from the boots
    and the bind delay after a boot (without: the model before either)."""
    rec = run.recorder
    timings = WorldTimings.measured(
        run.spec, boots(rec), rec.drains, reaction(rec), boot_reaction(rec), first_reaction(rec)
    )
    if not lag:
        return timings
    with_lag = timings.with_lag(guest_boots(rec), rec.lags, rec.cancels)
    return with_lag.with_binds(binds_after_ready(rec)).with_removal_step(
        removal_step(rec.cell_events)
    )


def simulate_against(
    twin: TwinSide, timings: WorldTimings, policy: ScalingPolicy
) -> tuple[SimResult, Fidelity]:
    """Simulate the twin run's inputs with ``timings`` and compare the cells over the
    simulator's horizon (the report's way; ``divergence`` replays a dump through it)."""
    result = simulate(twin.pods, policy, sim_config(twin.spec, timings))
    horizon = min(result.end_seconds, twin.end_seconds)
    return result, compare(twin.cells, cells_of(result), 0.0, horizon)


def _simulate(run: TwinResult, timings: WorldTimings, name: str) -> tuple[SimResult, Fidelity]:
    twin = TwinSide(run.spec, run.pods, tuple(cell_timeline(run.recorder)), run.end_seconds)
    return simulate_against(twin, timings, sim_policy(run.spec, name))


def build_report(run: TwinResult) -> DemoReport:
    """Simulate the same inputs (twin-measured and nominal timings), compare, summarise."""
    spec, timings = run.spec, measured_timings(run)
    simulated, fidelity = _simulate(run, timings, "simulator, twin's timings")
    nominal, fidelity_nominal = _simulate(run, WorldTimings.nominal(spec), "simulator, nominal")
    lag_free = measured_timings(run, lag=False)
    _, fidelity_lag_free = _simulate(run, lag_free, "simulator, no lag")
    twin = twin_result(run, fidelity.end_seconds, fidelity)
    reference = oracle(run.pods, SHAPE)
    results = tuple(
        to_trace_time(r, spec.compression)
        for r in (reference, simulated, nominal, _clip(twin, run.end_seconds))
    )
    boot = spec.boot_seconds
    unhostable = unhostable_count(spec)  # left out of both worlds: counted, not hidden
    summaries = tuple(
        replace(summarise(r, results[0].cost_cell_hours, boot), unschedulable=unhostable)
        for r in results
    )
    return DemoReport(
        spec=spec,
        fidelity=fidelity,
        fidelity_nominal=fidelity_nominal,
        fidelity_lag_free=fidelity_lag_free,
        lags=tuple(run.recorder.lags),
        binds=tuple(binds_after_ready(run.recorder)),
        timings=timings,
        results=results,
        summaries=summaries,
        wall_seconds=run.wall_seconds,
        cpu_seconds=dict(run.cpu_seconds),
        twin_counts=summary(run.recorder),
        panels_total=len(run.panels),
        panels_empty=tuple(f"{q.where}: `{q.expr}`" for q, n in run.panels.items() if n <= 0),
        timelines={
            "twin": cell_timeline(run.recorder),
            "simulator": cells_of(simulated),
            "simulator_nominal": cells_of(nominal),
        },
    )


def _verdict(f: Fidelity) -> str:
    return "PASS" if f.passes() else "FAIL"


def fidelity_lines(f: Fidelity, factor: float) -> list[str]:
    return [
        f"- within +/-1 cell: **{100 * f.within_fraction:.1f} %** of the time "
        f"(criterion >= {100 * MIN_WITHIN_FRACTION:g} %)",
        f"- cell-hours twin / simulator: **{f.cell_hours_ratio:.3f}** "
        f"({f.cell_hours_a * factor:.2f} / {f.cell_hours_b * factor:.2f}; "
        f"criterion within {100 * MAX_CELL_HOURS_ERROR:g} %)",
        f"- largest gap {f.max_gap_cells:g} cells over the simulator's horizon "
        f"({f.end_seconds * factor / 60:.0f} trace minutes): **{_verdict(f)}**",
    ]


def _timings_line(t: WorldTimings, factor: float) -> str:
    return (
        f"boot median {t.boot_seconds * factor:.0f} s (sigma {t.boot_sigma:.2f}), drain "
        f"{t.drain_seconds * factor:.0f} s, reaction {t.react_seconds * factor:.0f} s "
        f"({_boot_react(t, factor)} after a boot), "
        f"execution lag {t.exec_lag_seconds * factor:.0f} s, a cancelled boot's cell "
        f"{t.cancel_seconds * factor:.0f} s more, bind delay after a boot "
        f"{t.bind_delay_seconds * factor:.0f} s, a queued removal "
        f"{t.removal_step_seconds * factor:.1f} s after the one before"
    )


def _boot_react(t: WorldTimings, factor: float) -> str:
    after = t.react_seconds if t.boot_react_seconds is None else t.boot_react_seconds
    return f"{after * factor:.0f} s"


def _bind_lines(binds: tuple[float, ...], factor: float) -> list[str]:
    """How long after its cell's boot ended a waiting pod was bound in the twin (the median
    is the simulator's bind delay, ``WorldTimings.with_binds``)."""
    if not binds:
        return []
    median = statistics.median(binds)
    return [
        f"- a pod waiting for a booting cell was bound {median * factor:.0f} s after the boot "
        f"ended in the twin (median of {len(binds)}, {min(binds) * factor:.0f}-"
        f"{max(binds) * factor:.0f} s); the simulator's cells take pods that long after Ready"
    ]


def _lag_free_lines(report: DemoReport) -> list[str]:
    f = report.fidelity_lag_free
    if f is None:
        return []
    head = (
        "The same without the execution lag and the bind delay (boots from the decision, "
        "applied at once, pods placed at a boot's end):"
    )
    return [head, "", *fidelity_lines(f, report.spec.compression), ""]


def markdown_report(report: DemoReport) -> str:
    spec, k = report.spec, report.spec.compression
    trace = str(spec.trace) if spec.trace else "bundled openb (Alibaba GPU 2023)"
    cpu = ", ".join(f"{name} {v:.0f} s" for name, v in report.cpu_seconds.items())
    nominal = WorldTimings.nominal(spec)
    return "\n".join(
        [
            "# gpucellpool demo: the real operator on the twin",
            "",
            f"- trace: {trace}, {spec.hours:g} h from day {spec.start_seconds / 86400:.2f}, "
            f"thinned x{spec.multiplier:g}: {report.results[1].pods} pods",
            f"- compressed x{k:g} (1 wall second = {k:g} trace seconds) in both worlds: boot "
            f"{spec.boot_seconds:g} s, scale-down window {spec.scale_down_window_seconds:g} s, "
            f"delay after scale-up {spec.scale_down_delay_seconds:g} s, tick "
            f"{spec.tick_seconds:g} s",
            f"- the twin's measured world: {_timings_line(report.timings, k)} "
            f"(nominal: {_timings_line(nominal, k)})",
            *_bind_lines(report.binds, k),
            "- times and cell-hours are trace time",
            "",
            markdown(report.summaries),
            "## Fidelity: twin vs `gpucellpool simulate` (same trace, same pool spec)",
            "",
            "Simulator given the twin's measured world (each cell's boot time, a wave's in its "
            "cells' name order, the median drain, the median reaction, the median execution "
            "lag, a cancelled boot's time to its guest gone and the median bind delay after "
            "a boot), as a user passes the boot time measured on their cluster:",
            "",
            *fidelity_lines(report.fidelity, k),
            "",
            *_lag_free_lines(report),
            "Simulator with the nominal timings:",
            "",
            *fidelity_lines(report.fidelity_nominal, k),
            "",
            "## Dashboards",
            "",
            f"{report.panels_total - len(report.panels_empty)} of {report.panels_total} Grafana "
            "queries have data from the twin's Prometheus over the run"
            + ("; without data:" if report.panels_empty else "."),
            "",
            *(f"- no data: {where}" for where in report.panels_empty),
            "",
            f"Wall time {report.wall_seconds:.0f} s; CPU: {cpu}.",
            "",
        ]
    )


def write_report(report: DemoReport, out: Path) -> list[Path]:
    """report.md, report.json and demand-vs-cells.png (when matplotlib is there) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.md", out / "report.json"]
    written[0].write_text(markdown_report(report), encoding="utf-8")
    payload = {
        "spec": {k: str(v) if isinstance(v, Path) else v for k, v in vars_of(report.spec).items()},
        "policies": [s.as_dict() for s in report.summaries],
        "fidelity": report.fidelity.as_dict(),
        "fidelity_nominal": report.fidelity_nominal.as_dict(),
        "timings_measured_compressed_seconds": vars_of(report.timings),
        "wall_seconds": report.wall_seconds,
        "cpu_seconds": report.cpu_seconds,
        "twin": report.twin_counts,
        "timelines_compressed_seconds": report.timelines,
    }
    written[1].write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    try:
        title = f"demand vs cells: simulator and twin ({report.spec.hours:g} h of trace)"
        shown = (report.results[1], report.results[3])
        written.append(plot_timelines(shown, out / "demand-vs-cells.png", title))
    except PlotUnavailable as error:
        written[0].write_text(markdown_report(report) + f"\nplot skipped: {error}\n")
    return written


def vars_of(value: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict (slots dataclasses have no ``__dict__``)."""
    return {name: getattr(value, name) for name in value.__dataclass_fields__}
