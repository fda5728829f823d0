"""Fidelity benchmark: the demo's slice on the twin against ``gpucellpool simulate``.

Runs ``run_twin`` on the demo's slice extended to two busy hours of the bundled openb trace and
prints and records both cell timelines' numbers: the share of time within +/-1 cell, each
side's cell-hours and their ratio, against the simulator given the twin's measured timings and
against the nominal ones, plus wall time, CPU and the machine's load (the twin's latencies, and
so its fidelity at a given compression, depend on it). The result goes to the ``fidelity`` block
of docs/benchmarks.md through ``bench_doc.write_block``, replaced in place; other blocks are
left alone.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from simulations.demo import DemoSpec, build_report, run_twin
from simulations.demo.report import DemoReport, markdown_report
from simulations.harness import Harness
from simulations.simulator.fidelity import Fidelity, criterion
from tests.bench.bench_doc import load_note, write_block

pytestmark = pytest.mark.bench
# The demo's slice, two hours instead of one. FIDELITY_COMPRESSION sets the compression (the
# demo's x20 by default; docs/autoscaling.md, session 19, for x10).
SPEC = replace(
    DemoSpec(), hours=2.0, compression=float(os.environ.get("FIDELITY_COMPRESSION", "20"))
)
KEY = "fidelity"


def _row(name: str, f: Fidelity, k: float) -> str:
    return (
        f"| {name} | {100 * f.within_fraction:.1f} % | {f.cell_hours_a * k:.1f} | "
        f"{f.cell_hours_b * k:.1f} | {f.cell_hours_ratio:.3f} | {f.max_gap_cells:g} | "
        f"{'pass' if f.passes() else 'FAIL'} |"
    )


def _lag_free_row(report: DemoReport) -> list[str]:
    """The model before the execution lag: boots from the decision, decisions applied at once."""
    f = report.fidelity_lag_free
    k = report.spec.compression
    label = "the same without the execution lag and the bind delay"
    return [] if f is None else [_row(label, f, k)]


def _lag_range(report: DemoReport) -> str:
    lags = sorted(report.lags)
    return f", {lags[0]:.1f}-{lags[-1]:.1f} s" if lags else ""


def section(report: DemoReport) -> str:
    spec, k = report.spec, report.spec.compression
    cpu = ", ".join(f"{n} {v:.0f} s" for n, v in report.cpu_seconds.items())
    return "\n".join(
        [
            "## Fidelity: the twin against the simulator (`tests/bench/test_fidelity_bench.py`)",
            "",
            f"The demo's slice: {spec.hours:g} h of the bundled openb trace from day "
            f"{spec.start_seconds / 86400:.2f}, thinned x{spec.multiplier:g}, "
            f"{report.results[1].pods} pods, compressed x{k:g} in both worlds; the real operator "
            "(`gpucellpool run`) on the twin vs `simulate` with the same pool spec. Cell-hours "
            f"in trace time over the simulator's horizon; criterion {criterion()}.",
            "",
            "| simulator given | within +/-1 cell | twin cell-hours | simulator cell-hours | "
            "ratio | largest gap | verdict |",
            "|---|---|---|---|---|---|---|",
            _row("the twin's measured timings", report.fidelity, k),
            *_lag_free_row(report),
            _row("the nominal timings", report.fidelity_nominal, k),
            "",
            f"Twin's measured boot median {report.timings.boot_seconds * k:.0f} s trace from "
            f"the guest's creation (nominal {spec.boot_seconds:g} s), execution lag (decision "
            f"to guest created or drain started, median of {len(report.lags)}) "
            f"{report.timings.exec_lag_seconds * k:.0f} s trace "
            f"({report.timings.exec_lag_seconds:.1f} s wall{_lag_range(report)}), bind delay "
            f"after a boot {report.timings.bind_delay_seconds * k:.0f} s trace; "
            f"wall time {report.wall_seconds:.0f} s; CPU "
            f"{cpu}; {load_note()}.",
        ]
    )


@pytest.mark.timeout(3600)
async def test_fidelity_on_the_demo_slice(harness: Harness, tmp_path: Path) -> None:
    run = await run_twin(SPEC, harness=harness, workdir=tmp_path)
    report = build_report(run)
    print("\n" + markdown_report(report))
    write_block(KEY, section(report))
    assert report.results[-1].pods > 0
