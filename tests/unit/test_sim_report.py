"""Reports: percentiles and ratios, Pareto/dominance, Markdown/JSON/PNG output, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucellpool.cli import main
from simulations.simulator.engine.metrics import Sample, SimResult
from simulations.simulator.report import (
    dominated_by,
    markdown,
    pareto_front,
    plot_timelines,
    summarise,
    write_json,
)


def result(policy: str, cost: float, waits: tuple[float, ...]) -> SimResult:
    timeline = tuple(Sample(t * 600.0, 2, 2, 1, 0, 3) for t in range(10))
    return SimResult(
        policy, len(waits), cost, waits, 0, 0, 1, 3, 2, 0, 0.5, 100.0, 10, 5, (), timeline, 300.0
    )


def test_summary_figures() -> None:
    waits = tuple(float(w) for w in range(101))  # 0..100 s
    s = summarise(result("p", 200.0, waits), oracle_cost=100.0, boot_seconds=90.0)
    assert s.cost_ratio == 2.0
    assert (s.wait_p50_seconds, s.wait_p95_seconds, s.wait_max_seconds) == (50.0, 95.0, 100.0)
    assert s.waited_longer_than_boot == pytest.approx(10 / 101)


def test_pareto_and_dominance() -> None:
    a = summarise(result("cheap-slow", 100.0, (0.0, 600.0)), 50.0, 300.0)
    b = summarise(result("dear-fast", 200.0, (0.0, 10.0)), 50.0, 300.0)
    c = summarise(result("dominated", 250.0, (0.0, 700.0)), 50.0, 300.0)
    assert [s.policy for s in pareto_front([a, b, c])] == ["cheap-slow", "dear-fast"]
    assert dominated_by(c, [a, b, c]) == ["cheap-slow", "dear-fast"]
    assert dominated_by(a, [a, b, c]) == []


def test_markdown_json_and_png(tmp_path: Path) -> None:
    summaries = [summarise(result("p", 123.4, (0.0, 200.0)), 100.0, 300.0)]
    table = markdown(summaries)
    assert table.splitlines()[0].startswith("| policy | cell-hours")
    assert "| p | 123 | 1.23 |" in table
    write_json(tmp_path / "o.json", summaries, {"pods": 2})
    payload = json.loads((tmp_path / "o.json").read_text())
    assert payload["meta"] == {"pods": 2} and payload["policies"][0]["cost_ratio"] == 1.234
    png = plot_timelines([result("p", 1.0, (0.0,))], tmp_path / "o.png", "t")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_simulate_cli_on_a_small_generic_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    rows = [
        f"{i * 400},{900 + 50 * i},1,,{30 + 10 * (i % 7)},{30 + 10 * (i % 7)}" for i in range(30)
    ]
    header = "arrival_seconds,duration_seconds,gpu_count,memory_mib,memory_percent,cores_percent"
    trace.write_text(header + "\n" + "\n".join(rows) + "\n")
    out = tmp_path / "o.json"
    code = main(["simulate", "--trace", str(trace), "--format", "md", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    for name in ("oracle", "gpucellpool", "cluster-autoscaler", "hpa-keda", "original-gpucellpool"):
        assert f"| {name} |" in printed
    policies = json.loads(out.read_text())["policies"]
    assert policies[0]["policy"] == "oracle" and len(policies) == 5
    assert all(p["cost_cell_hours"] >= policies[0]["cost_cell_hours"] for p in policies)


def test_sweep_cli_prints_points_and_the_pareto_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    rows = [
        f"{i * 300},{1200 + 40 * i},1,,{20 + 10 * (i % 5)},{20 + 10 * (i % 5)}" for i in range(20)
    ]
    header = "arrival_seconds,duration_seconds,gpu_count,memory_mib,memory_percent,cores_percent"
    trace.write_text(header + "\n" + "\n".join(rows) + "\n")
    argv = ["sweep", "--trace", str(trace), "--window", "300", "--threshold", "0.5"]
    argv += ["--headroom", "0,1", "--prewarm", "off", "--in-flight", "2", "--seeds", "2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "2 points x 2 seeds" in printed and "| front |" in printed
    assert "gpucellpool w=300s u=0.5 h=1 prewarm=off inflight=2" in printed
