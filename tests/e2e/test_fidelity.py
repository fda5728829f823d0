"""One policy, two worlds: the twin run against ``gpucellpool simulate`` on the same trace.

What this proves, on one short compressed slice of the bundled openb trace replayed through
the real operator (``gpucellpool run`` subprocess) on the twin (real apiservers, simulated
KubeSwift/kubelet/HAMi, a real Prometheus): the cell-count timeline is within +/-1 cell of the
simulator's for at least 98 % of the time and the cell-hours are within 2 % (issue 13's
acceptance, ``simulations.simulator.fidelity.criterion()``), the simulator being given the world the
twin measured (each cell's boot time, drain and reaction; ``simulations.demo.report``); and after
the run every Grafana dashboard query returns data from the twin's Prometheus. One run
(module-scoped) serves both tests.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_asyncio

from simulations.demo import DemoSpec, TwinResult, build_report, run_twin
from simulations.demo.config import HOUR
from simulations.demo.report import DemoReport, markdown_report
from simulations.harness import Harness
from simulations.harness.binaries import BinaryError, ensure
from simulations.simulator.fidelity import MAX_CELL_HOURS_ERROR, MIN_WITHIN_FRACTION

# 30 trace minutes from a busy afternoon, thinned to ~10 cells, at x20: 90 s of replay.
SPEC = replace(DemoSpec(), start_seconds=148 * 86400 + 15 * HOUR, hours=0.5, multiplier=0.4,
               compression=20.0)  # fmt: skip


def _prometheus_or_skip() -> None:
    try:
        ensure(["prometheus"])
    except BinaryError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"prometheus unavailable in CI: {exc}")
        pytest.skip(f"prometheus unavailable: {exc}")


pytestmark = pytest.mark.e2e


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def twin(harness: Harness, tmp_path_factory: pytest.TempPathFactory) -> TwinResult:
    _prometheus_or_skip()
    workdir: Path = tmp_path_factory.mktemp("twin")
    return await run_twin(SPEC, harness=harness, workdir=workdir, to_zero=False)


@pytest.fixture(scope="module")
def report(twin: TwinResult) -> DemoReport:
    return build_report(twin)


def test_twin_follows_the_simulator(report: DemoReport) -> None:
    print("\n" + markdown_report(report))
    f = report.fidelity
    assert report.results[-1].unplaced == 0, "every replayed pod got a cell"
    assert f.within_fraction >= MIN_WITHIN_FRACTION, f.as_dict()
    assert abs(f.cell_hours_ratio - 1.0) <= MAX_CELL_HOURS_ERROR, f.as_dict()


def test_every_dashboard_query_has_data_after_the_run(twin: TwinResult) -> None:
    assert len(twin.panels) > 30
    empty = [q for q, n in twin.panels.items() if n <= 0]
    assert not empty, "\n".join(f"{q.where}: {q.promql}" for q in empty)
