"""The sweep: intervals over seeds and the rules judged on them, the knob grid, the oracle once
per (trace, seed), identical results in-process and in local processes, the report files, and
bad flags refused at parse time with one line."""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import GPUAsk
from gpucellpool.cli import main
from simulations.simulator.distributed import ClusterUnavailable, executor
from simulations.simulator.engine import SimConfig
from simulations.simulator.engine.sim import BootModel
from simulations.simulator.report.intervals import (
    Interval,
    SeedStats,
    ahead,
    dominates,
    interval,
    no_worse,
    over_seeds,
    pareto_front,
    t_quantile,
    verdict,
)
from simulations.simulator.report.pareto import cell, report_json, report_markdown, write_report
from simulations.simulator.report.summary import PolicySummary
from simulations.simulator.sweep import Point, Sweep, run_sweep, work
from simulations.simulator.traces import TracePod

WHOLE = GPUAsk(gpu_count=1, cores_percent=100)


def test_the_interval_is_the_t_interval_of_the_mean() -> None:
    got = interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, 4) * s / sqrt(n)
    assert got.mean == 3.0 and got.n == 5
    assert got.low == pytest.approx(3.0 - half) and got.high == pytest.approx(3.0 + half)
    assert interval([7.0]) == Interval(7.0, 7.0, 7.0, 1)  # one seed: no spread known
    assert interval([4.0, 4.0, 4.0]) == Interval(4.0, 4.0, 4.0, 3)
    assert math.isnan(interval([1.0, float("nan")]).mean)
    with pytest.raises(ValueError):
        interval([])


def test_t_quantiles_past_the_table_are_close() -> None:
    assert t_quantile(4) == 2.776
    assert t_quantile(60) == pytest.approx(2.000, abs=0.003)
    assert t_quantile(120) == pytest.approx(1.980, abs=0.003)
    with pytest.raises(ValueError):
        t_quantile(0)


def iv(low: float, high: float) -> Interval:
    return Interval((low + high) / 2, low, high, 5)


def test_ahead_behind_and_tied_are_judged_on_the_interval_ends() -> None:
    assert ahead(iv(1, 2), iv(2.5, 3)) and verdict(iv(1, 2), iv(2.5, 3)) == "ahead"
    assert verdict(iv(2.5, 3), iv(1, 2)) == "behind"
    assert not ahead(iv(1, 2.6), iv(2.5, 3)) and verdict(iv(1, 2.6), iv(2.5, 3)) == "tied"
    assert no_worse(iv(2, 3), iv(1, 2)) and not no_worse(iv(2.1, 3), iv(1, 2))


def stats(name: str, cost: tuple[float, float], p95: tuple[float, float]) -> SeedStats:
    return SeedStats(
        name, "t", (0, 1), {"cost_cell_hours": iv(*cost), "wait_p95_seconds": iv(*p95)}
    )


def test_dominates_needs_ahead_on_one_axis_and_no_worse_on_the_other() -> None:
    a = stats("a", (10, 11), (100, 200))
    cheaper_tied_wait = stats("b", (8, 9), (150, 250))
    cheaper_longer_wait = stats("c", (8, 9), (201, 300))
    assert dominates(cheaper_tied_wait, a) and not dominates(a, cheaper_tied_wait)
    assert not dominates(cheaper_longer_wait, a) and not dominates(a, cheaper_longer_wait)
    assert not dominates(a, a)
    overlapping = stats("d", (10.5, 12), (150, 210))  # tied on both: neither dominates
    front = pareto_front([a, cheaper_tied_wait, cheaper_longer_wait, overlapping])
    assert [p.policy for p in front] == ["b", "c"]  # equal mean cost: shorter wait first


def summary(policy: str, cost: float, p95: float, share: float = 0.0) -> PolicySummary:
    return PolicySummary(policy, cost, cost / 10, 0, p95, p95, p95, share, 0, 0, 0, 0.5, 1, 0, 0)


def test_over_seeds_cuts_intervals_at_zero_and_needs_one_run_per_seed() -> None:
    runs = [summary("x", 10, 0), summary("x", 10, 0), summary("x", 10, 30)]
    got = over_seeds("x", "t", (0, 1, 2), runs)
    assert got["wait_p95_seconds"].low == 0.0 and got["wait_p95_seconds"].mean == 10.0
    assert got["cost_cell_hours"] == Interval(10.0, 10.0, 10.0, 3)
    with pytest.raises(ValueError):
        over_seeds("x", "t", (0, 1), runs)


def test_points_label_and_apply_only_the_swept_knobs() -> None:
    base = PolicyConfig()
    point = Point((("window", 300.0), ("prewarm", True), ("in_flight", 8)))
    assert point.label() == "gpucellpool w=300s prewarm=on inflight=8"
    tuned = point.apply(base)
    assert tuned.scale_down.stabilization_window_seconds == 300.0
    assert tuned.prewarm and tuned.max_cells_in_flight == 8
    assert tuned.utilization_threshold == base.utilization_threshold
    assert Point().label() == "gpucellpool (defaults)" and Point().apply(base) == base
    hedged = Point((("hedge", 0.75), ("hedge_min_wave", 1)))
    assert hedged.label() == "gpucellpool hedge=0.75 minwave=1"
    tuned = hedged.apply(base)
    assert (tuned.boot_hedge_fraction, tuned.boot_hedge_min_wave) == (0.75, 1)
    fraction, wave = base.boot_hedge_fraction, base.boot_hedge_min_wave
    assert replace(tuned, boot_hedge_fraction=fraction, boot_hedge_min_wave=wave) == base
    per_cell = Point((("hedge", 0.75), ("hedge_per_pod", False)))
    assert per_cell.label() == "gpucellpool hedge=0.75 perpod=off"
    assert not per_cell.apply(base).boot_hedge_per_pod and base.boot_hedge_per_pod


def _pods(n: int, gap_seconds: float) -> tuple[TracePod, ...]:
    return tuple(TracePod(f"p{i}", gap_seconds * i, 1500.0, WHOLE) for i in range(n))


def _plan() -> Sweep:
    configs = {s: SimConfig(boot=BootModel(sigma=0.6), seed=s) for s in (0, 1, 2)}
    # "a": every seed the same pods (one oracle); "b": each seed its own (three oracles)
    traces = {
        "a": {s: _pods(12, 45.0) for s in configs},
        "b": {s: _pods(6, 400.0 + s) for s in configs},
    }
    points = (Point((("in_flight", 1),)), Point((("in_flight", 4),)))
    return Sweep(traces, configs, points, ("cluster-autoscaler",), "pack")


class Recording:
    """An in-process executor that keeps what it was asked to run."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def share(self, value: object) -> object:
        return value

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple[object, ...]]) -> list[Any]:
        self.calls += calls
        return [fn(*args) for args in calls]


@pytest.fixture(scope="module")
def swept() -> tuple[Recording, list[SeedStats]]:
    recording = Recording()
    return recording, run_sweep(_plan(), recording)


def test_the_oracle_runs_once_per_distinct_window_not_per_point_or_seed(
    swept: tuple[Recording, list[SeedStats]],
) -> None:
    recording, got = swept
    oracle_calls = [c for c in recording.calls if c[2] == "pack"]
    assert [c[0] for c in oracle_calls] == [_pods(12, 45.0)] + [
        _pods(6, 400.0 + s) for s in (0, 1, 2)
    ]
    assert len(recording.calls) == 4 + 2 * 3 * (2 + 1)  # oracles + traces x seeds x runs
    assert [(s.trace, s.policy) for s in got] == [
        (t, p)
        for t in ("a", "b")
        for p in ("gpucellpool inflight=1", "gpucellpool inflight=4", "cluster-autoscaler")
    ]
    # each run's cost ratio is against the oracle of its own trace and seed
    plan = _plan()
    ratios = []
    for seed in (0, 1, 2):
        oracle_cost = work(plan.traces["a"][seed], plan.configs[seed], "pack")
        first = work(plan.traces["a"][seed], plan.configs[seed], plan.points[0])
        assert isinstance(oracle_cost, float) and isinstance(first, PolicySummary)
        ratios.append(first.cost_cell_hours / oracle_cost)
    assert got[0]["cost_ratio"].mean == pytest.approx(sum(ratios) / 3)
    assert got[0]["cost_ratio"].n == 3 and got[0].seeds == (0, 1, 2)


def test_local_processes_give_exactly_the_in_process_results(
    swept: tuple[Recording, list[SeedStats]],
) -> None:
    plan = _plan()
    serial = swept[1]
    with executor(jobs=2) as pool:
        assert pool.name == "2 local processes"
        parallel = run_sweep(plan, pool)
    assert parallel == serial  # no NaN here: every figure was measured
    spread = [s["wait_p95_seconds"] for s in serial]
    assert any(i.high > i.low for i in spread)  # the seeds really differ


def test_an_unreachable_scheduler_is_one_clear_error() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    expected = f"cannot reach the Dask scheduler at {address}"
    with (
        pytest.raises(ClusterUnavailable, match=expected),
        executor(scheduler=address, connect_timeout_seconds=1.0),
    ):
        pass


def test_the_report_files_show_intervals_front_and_verdicts(
    swept: tuple[Recording, list[SeedStats]], tmp_path: Path
) -> None:
    got = swept[1]
    text = report_markdown(got, "cluster-autoscaler")
    assert "### a: 3 points x 3 seeds (seeds 0..2)" in text
    assert "vs cluster-autoscaler" in text and "A.high < B.low" in text
    assert text.count(" * |") + text.count("| * |") >= 2  # a front per trace
    lines = list(write_report(tmp_path / "out", got, "cluster-autoscaler", {"runs": 24}))
    assert any("sweep.png" in line for line in lines)
    payload = json.loads((tmp_path / "out" / "sweep.json").read_text())
    rows = payload["traces"]["a"]
    assert {r["policy"] for r in rows if r["on_front"]}
    ours = next(r for r in rows if r["policy"] == "gpucellpool inflight=1")
    assert set(ours["versus_reference"]) == {"cost_cell_hours", "wait_p95_seconds"}
    assert ours["wait_p95_seconds"]["n"] == 3
    assert (tmp_path / "out" / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cells_are_in_the_figures_unit() -> None:
    assert cell("wait_p95_seconds", Interval(300.0, 240.0, 360.0, 5)) == "5.0 [4.0, 6.0] min"
    assert cell("waited_longer_than_boot", Interval(0.1, 0.05, 0.15, 5)) == "10.0 [5.0, 15.0] %"
    assert cell("cost_ratio", Interval(1.1, 1.05, 1.2, 5)) == "1.10 [1.05, 1.20]"
    assert cell("wait_max_seconds", Interval(float("nan"), float("nan"), float("nan"), 5)) == "-"
    assert report_json([], None, {})["traces"] == {}


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--scheduler", "localhost:8786"], "is not a scheduler address like tcp://"),
        (["--scheduler", "tcp://127.0.0.1:99999"], "port 99999 is out of range"),
        (["--seeds", "0"], "'0' must be between 1 and 1000"),
        (["--in-flight", "0"], "'0' must be between 1 and 1000"),
        (["--hedge", "0.5,11"], "'11'"),
        (["--hedge-min-wave", "0"], "'0' must be between 1 and 1000"),
        (["--hedge-per-pod", "maybe"], "'maybe' is not on/off"),
        (["--report-dir", "{file}"], "exists and is not a directory"),
        (["--reference", "gpucellpool"], "invalid choice: 'gpucellpool'"),
    ],
)
def test_bad_sweep_flags_are_refused_at_parse_time_in_one_line(
    args: list[str], expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "f.txt"
    file.write_text("x")
    argv = ["sweep", *(a.replace("{file}", str(file)) for a in args)]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and expect in err[-1]


def test_simulate_refuses_a_bad_scheduler_address(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--scheduler", "http://127.0.0.1:8786"])
    assert "is not a scheduler address" in capsys.readouterr().err
