"""Bad trace files, bad flags and the reports a newcomer reads: one-line errors, counted
unhostable pods, one duration parser, a 100-column table, a moving progress bar, plot units,
and the twin row's utilisation."""

from __future__ import annotations

import argparse
import gzip
import math
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from rich.console import Console

from autoscaler.policy.types import GPUAsk
from simulations.demo.config import SHAPE
from simulations.demo.utilisation import mean_utilisation, ready_cell_seconds
from simulations.simulator import argtypes as at
from simulations.simulator.engine import ProductionPolicy, SimConfig, simulate
from simulations.simulator.record import step_seconds
from simulations.simulator.report.compare import compare
from simulations.simulator.report.plot import time_unit
from simulations.simulator.report.render import markdown, rich_table, write_json
from simulations.simulator.report.summary import PolicySummary, summarise
from simulations.simulator.traces import TracePod, synthetic
from simulations.simulator.traces.detect import load_trace, require_well_formed
from simulations.simulator.traces.model import HORIZON_SECONDS, TraceError

GENERIC = "arrival_seconds,duration_seconds,gpu_count\n"
OPENB = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def _write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.mark.parametrize(
    ("name", "data", "line", "reason"),
    [
        ("bin.csv", GENERIC.encode() + b"0,1\x00,1\n", 2, "binary"),
        ("latin.csv", GENERIC.encode() + b"0,10,1\n\xe9t\xe9,1,1\n", 3, "not UTF-8"),
        ("bad.gz", b"not gzip at all", None, "cannot read"),
    ],
)
def test_unreadable_files_are_one_trace_error_naming_file_and_line(
    tmp_path: Path, name: str, data: bytes, line: int | None, reason: str
) -> None:
    path = _write(tmp_path, name, data)
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert caught.value.line == line
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"{path}:" if line is None else f"{path}:{line}:")
    assert "\n" not in str(caught.value)


def test_missing_file_and_directory_are_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="is a directory"):
        load_trace(tmp_path)


def test_a_trace_error_in_a_worker_process_reaches_the_parent_as_itself(tmp_path: Path) -> None:
    # A trace loaded in a pool worker (policy_vs_ca, ``simulate --jobs``) crosses the process
    # boundary pickled; rebuilt from its message alone it raised TypeError in the pool's reader
    # thread and the parent saw only BrokenProcessPool.
    missing = tmp_path / "nope.csv"
    with ProcessPoolExecutor(max_workers=1) as pool:
        future = pool.submit(load_trace, missing)
        with pytest.raises(TraceError, match="no such file") as caught:
            future.result(timeout=120)
    assert caught.value.path == str(missing)
    assert caught.value.line is None
    at_line = pickle.loads(pickle.dumps(TraceError(missing, "bad row", 7)))
    assert (at_line.path, at_line.reason, at_line.line) == (str(missing), "bad row", 7)
    assert str(at_line) == f"{missing}:7: bad row"


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("huge.csv", GENERIC + "0,10,1\n0,10," + "9" * 140_000 + "\n", "field larger"),
        ("inf.csv", OPENB + "p1,1,1,1,1000,,,,0,inf,\n", "not a finite number"),
        ("nan.csv", GENERIC + "nan,10,1\n", "must be a number >= 0"),
        ("neg.csv", GENERIC + "0,-5,1\n", "must be a number >= 0"),
        ("far.csv", GENERIC + "1e300,10,1\n", "horizon"),
        ("long.csv", GENERIC + "0,1e300,1\n", "horizon"),
        ("openb-far.csv", OPENB + "p1,1,1,1,1000,,,,0,400000000,\n", "horizon"),
        ("huge.jsonl", '{"arrival_seconds": 0, "key": "' + "k" * 140_000 + '"}\n', "longer"),
    ],
)
def test_malformed_rows_fail_by_default_with_file_line_and_reason(
    tmp_path: Path, name: str, text: str, reason: str
) -> None:
    path = _write(tmp_path, name, text)
    loaded = load_trace(path)
    assert loaded.malformed, "the bad row must be reported, not dropped"
    assert reason in loaded.malformed[0].reason
    with pytest.raises(TraceError) as caught:
        require_well_formed(loaded, path)
    assert str(caught.value).startswith(f"{path}:{loaded.malformed[0].line}: ")
    assert "--skip-malformed" in str(caught.value)


def test_skipping_malformed_rows_keeps_the_good_ones_and_counts_the_rest(tmp_path: Path) -> None:
    path = _write(tmp_path, "mix.csv.gz", gzip.compress((GENERIC + "0,10,1\n1e300,1,1\n").encode()))
    loaded = load_trace(path)
    assert len(loaded.pods) == 1
    assert "1 malformed (line 3:" in loaded.summary()


def test_the_horizon_is_ten_years_and_a_row_at_it_is_kept(tmp_path: Path) -> None:
    assert HORIZON_SECONDS == 10 * 365 * 86400
    edge = _write(tmp_path, "edge.csv", GENERIC + f"{HORIZON_SECONDS - 10:.0f},10,1\n")
    assert len(load_trace(edge).pods) == 1


def test_step_seconds_uses_the_one_duration_parser() -> None:
    assert step_seconds("1m30s") == 90.0
    assert step_seconds("15s") == 15.0
    assert step_seconds("2") == 2.0
    for bad in ("0", "-5s", "nan", "1x"):
        with pytest.raises(argparse.ArgumentTypeError):
            step_seconds(bad)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (at.positive_float, "0"),
        (at.positive_float, "inf"),
        (at.nonnegative_float, "-1"),
        (at.factor, "1e7"),
        (at.int_at_least(1, 64), "65"),
        (at.int_at_least(1), "1.5"),
        (at.bounded(0, 1, low_open=True), "0"),
        (at.comma_list(at.bounded(0, 1)), " , "),
        (at.comma_list(at.bounded(0, 1)), "0.5,nan"),
    ],
)
def test_flag_types_refuse_bad_values(parse: object, text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse(text)  # type: ignore[operator]


def test_output_file_needs_an_existing_folder(tmp_path: Path) -> None:
    assert at.output_file(str(tmp_path / "x.json")) == tmp_path / "x.json"
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
        at.output_file(str(tmp_path / "no" / "x.json"))
    with pytest.raises(argparse.ArgumentTypeError, match="directory"):
        at.output_file(str(tmp_path))


def test_unhostable_pods_are_counted_shown_and_never_a_zero_wait(tmp_path: Path) -> None:
    pods = (TracePod("big", 0.0, 100.0, GPUAsk(gpu_count=10**8)),)
    comparison = compare(pods, {"gpucellpool": ProductionPolicy}, SimConfig(), show_progress=False)
    ours = comparison.summary("gpucellpool")
    assert ours.unschedulable == 1
    assert math.isnan(ours.wait_p95_seconds)  # nothing waited: no figure, not "0 s"
    text = markdown(comparison.summaries)
    assert "1 unhostable pods" in text
    assert "0 s" not in text
    out = tmp_path / "r.json"
    write_json(out, comparison.summaries, {"unhostable_pods": 1})
    loaded = out.read_text()
    assert '"unschedulable": 1' in loaded
    assert "NaN" not in loaded  # null, valid JSON


def _summary(policy: str) -> PolicySummary:
    return PolicySummary(
        policy, 123456.0, 1.23, 5000, 7000, 7100, 9000, 0.12, 12345, 12345, 123, 0.87, 100, 0, 3
    )


def test_terminal_table_fits_100_columns_without_cutting_a_policy_name() -> None:
    names = ["oracle", "gpucellpool-legacy-windows", "cluster-autoscaler", "hpa-keda"]
    console = Console(width=100, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(rich_table([_summary(n) for n in names], "7064 pods over 7.0 days"))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    for name in names:
        assert name in text, f"{name} cut"
    assert "…" not in text
    assert "3 unhostable pods" in text
    assert "x orc: times the oracle's" in text  # the legend of the short headers


@pytest.mark.parametrize(
    ("span", "unit"),
    [(30.0, "seconds"), (3600.0, "minutes"), (6 * 3600.0, "hours"), (7 * 86400.0, "days")],
)
def test_plot_time_unit_fits_the_span(span: float, unit: str) -> None:
    assert time_unit(span)[0] == unit


def test_progress_moves_during_a_short_run_not_only_at_its_end() -> None:
    pods = synthetic(pods=200, days=0.5, seed=3)
    seen: list[float] = []
    simulate(pods, ProductionPolicy(), SimConfig(tail_seconds=3600.0), seen.append)
    assert len([f for f in seen if 0 < f < 1]) >= 5, seen[:10]
    assert seen == sorted(seen)
    assert seen[-1] == 1.0


def test_parallel_runs_give_the_same_figures_as_serial_ones() -> None:
    pods = synthetic(pods=60, days=0.2, seed=4)
    policies = {"gpucellpool": ProductionPolicy}
    config = SimConfig(tail_seconds=3600.0)
    serial = compare(pods, policies, config, show_progress=False, jobs=1)
    parallel = compare(pods, policies, config, show_progress=True, jobs=2)
    assert serial.summaries == parallel.summaries


def test_twin_utilisation_integrates_bound_pods_over_ready_cells() -> None:
    half = GPUAsk(memory_percent=50, cores_percent=50)
    # one Ready cell for 100 s, half used for the first 50 s -> 25 % mean
    ready = [(0.0, 1)]
    assert ready_cell_seconds(ready, 100.0) == 100.0
    assert mean_utilisation([("c1", 0.0, 50.0, half)], ready, SHAPE, 100.0) == pytest.approx(0.25)
    # a pod still running at the end counts to the end; no Ready cell -> 0, never a crash
    assert mean_utilisation([("c1", 0.0, None, half)], ready, SHAPE, 100.0) == pytest.approx(0.5)
    assert mean_utilisation([("c1", 0.0, None, half)], [], SHAPE, 100.0) == 0.0


def test_summarise_of_a_simulated_run_keeps_finite_waits() -> None:
    result = simulate(synthetic(pods=50, days=0.2, seed=1), ProductionPolicy(), SimConfig())
    summary = summarise(result, result.cost_cell_hours, 300.0)
    assert math.isfinite(summary.wait_p95_seconds)


def test_kubeconfig_paths_are_absolute_even_from_relative_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml  # noqa: PLC0415

    from simulations.harness.endpoint import write_kubeconfig  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pki").mkdir()
    path = write_kubeconfig(
        Path("kubeconfig"),
        context="c",
        url="https://127.0.0.1:1",
        ca=Path("pki/ca.crt"),
        cert=Path("pki/admin.crt"),
        key=Path("pki/admin.key"),
    )
    config = yaml.safe_load(path.read_text())
    user = config["users"][0]["user"]
    refs = [config["clusters"][0]["cluster"]["certificate-authority"], *user.values()]
    assert refs == [str(tmp_path / "pki" / n) for n in ("ca.crt", "admin.crt", "admin.key")]


def test_a_failing_kubectl_shows_the_tail_of_its_stderr_in_one_line() -> None:
    from simulations.harness.endpoint import KubectlError  # noqa: PLC0415

    stderr = "W0101 noise\nerror: open pki/admin.crt: no such file or directory\n"
    error = KubectlError(1, ["/bin/kubectl", "apply", "-f", "x"], output="", stderr=stderr)
    text = str(error)
    assert text.startswith("kubectl apply -f failed (exit 1): ")
    assert "open pki/admin.crt: no such file or directory" in text
    assert "\n" not in text


def test_demo_errors_become_one_line_ending_with_the_cause() -> None:
    from simulations.demo.cli import _one_line  # noqa: PLC0415

    error = RuntimeError(
        "kube-apiserver exited during start; log /x/apiserver.log:\n"
        + "\n".join(f"line {i}" for i in range(30))
        + "\nE: bind: address already in use"
    )
    text = _one_line(error)
    assert "\n" not in text
    assert text.endswith("E: bind: address already in use")
    assert text.count(" | ") == 2


def test_parallel_runs_report_progress_for_every_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib  # noqa: PLC0415

    from simulations.simulator.report import compare as compare_module  # noqa: PLC0415

    seen: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def recording_bar(_enabled: bool | None = None):  # type: ignore[no-untyped-def]
        yield lambda name: seen.setdefault(name, []).append

    monkeypatch.setattr(compare_module, "progress_bar", recording_bar)
    pods = synthetic(pods=120, days=0.3, seed=5)
    policies = {"one": ProductionPolicy, "two": ProductionPolicy}
    compare(pods, policies, SimConfig(tail_seconds=3600.0), show_progress=True, jobs=2)
    assert set(seen) == set(policies)
    for name, fractions in seen.items():
        assert any(0 < f < 1 for f in fractions), (name, fractions)


def test_the_demo_counts_the_pods_its_one_gpu_cells_cannot_host(tmp_path: Path) -> None:
    from dataclasses import replace  # noqa: PLC0415

    from simulations.demo.config import DemoSpec, compressed_pods, unhostable_count  # noqa: PLC0415

    trace = _write(tmp_path, "t.csv", GENERIC + "0,600,1\n60,600,2\n120,600,1\n")
    spec = replace(
        DemoSpec(trace=trace, hours=1.0), start_seconds=0.0, compression=60.0, multiplier=1.0
    )
    assert len(compressed_pods(spec)) == 2
    assert unhostable_count(spec) == 1
