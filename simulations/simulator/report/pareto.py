"""The sweep's Pareto report: a Markdown table per trace, JSON, and a PNG of cost vs p95 wait.

Why this module exists: a sweep's result is read by a human choosing knobs (the table and the
plot) and by scripts or notebooks (the JSON); all three must show the same intervals and the
same front, judged by the rules in simulations/simulator/report/intervals.py, which the table's
legend repeats so the reader knows what "ahead" means.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from simulations.simulator.report.intervals import (
    AXES,
    METRICS,
    Interval,
    SeedStats,
    pareto_front,
    verdict,
)
from simulations.simulator.report.plot import PlotUnavailable

HEADERS = ("policy", "cell-hours", "x oracle", "wait p95", "p99", "max", "> 1 boot", "front")
LEGEND = (
    "Each figure: mean over the seeds [95 % confidence interval of the mean, Student's t]. "
    "A is *ahead of* B on a figure when A's interval lies wholly below B's (A.high < B.low), "
    "*behind* when wholly above, *tied* when they overlap. A point is on the *front* (*) when no "
    "other point is no worse on both cell-hours and p95 wait and ahead on one."
)


def by_trace(stats: Sequence[SeedStats]) -> dict[str, list[SeedStats]]:
    out: dict[str, list[SeedStats]] = {}
    for s in stats:
        out.setdefault(s.trace, []).append(s)
    return out


def _duration_unit(seconds: float) -> tuple[str, float]:
    if math.isnan(seconds) or seconds < 120:
        return "s", 1.0
    return ("min", 60.0) if seconds < 7200 else ("h", 3600.0)


def cell(metric: str, i: Interval) -> str:
    """``mean [low, high] unit`` in the metric's unit ("-" when nothing was measured)."""
    if math.isnan(i.mean):
        return "-"
    if metric == "cost_cell_hours":
        digits = 1 if i.mean < 100 else 0
        return f"{i.mean:,.{digits}f} [{i.low:,.{digits}f}, {i.high:,.{digits}f}]"
    if metric == "cost_ratio":
        return f"{i.mean:.2f} [{i.low:.2f}, {i.high:.2f}]"
    if metric == "waited_longer_than_boot":
        return f"{100 * i.mean:.1f} [{100 * i.low:.1f}, {100 * i.high:.1f}] %"
    unit, scale = _duration_unit(i.mean)
    digits = 0 if unit == "s" else 1
    lo, hi = i.low / scale, i.high / scale
    return f"{i.mean / scale:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}] {unit}"


def versus(point: SeedStats, reference: SeedStats) -> str:
    """``cost ahead, p95 tied`` (the point against the reference, on the intervals)."""
    return ", ".join(
        f"{'cost' if m == AXES[0] else 'p95'} {verdict(point[m], reference[m])}" for m in AXES
    )


def _table(points: Sequence[SeedStats], reference: SeedStats | None) -> list[str]:
    front = {id(p) for p in pareto_front(points)}
    headers = HEADERS + ((f"vs {reference.policy}",) if reference else ())
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for p in sorted(points, key=lambda p: (p[AXES[0]].mean, p[AXES[1]].mean)):
        cells = [p.policy, *(cell(m, p[m]) for m in METRICS), "*" if id(p) in front else ""]
        if reference is not None:
            cells.append("-" if p is reference else versus(p, reference))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report_markdown(stats: Sequence[SeedStats], reference: str | None = None) -> str:
    """One table per trace, every point, cheapest first; the legend says how it is judged."""
    parts = []
    for trace, points in by_trace(stats).items():
        seeds = points[0].seeds
        ref = next((p for p in points if p.policy == reference), None)
        title = f"### {trace}: {len(points)} points x {len(seeds)} seeds"
        span = f"{seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
        parts.append("\n".join([f"{title} (seeds {span})", "", *_table(points, ref), ""]))
    return "\n".join(parts) + "\n" + LEGEND + "\n"


def report_json(
    stats: Sequence[SeedStats], reference: str | None, meta: Mapping[str, object]
) -> dict[str, object]:
    traces: dict[str, object] = {}
    for trace, points in by_trace(stats).items():
        front = {id(p) for p in pareto_front(points)}
        ref = next((p for p in points if p.policy == reference), None)
        rows = []
        for p in points:
            row = p.as_dict() | {"on_front": id(p) in front}
            if ref is not None and p is not ref:
                row["versus_reference"] = {m: verdict(p[m], ref[m]) for m in AXES}
            rows.append(row)
        traces[trace] = rows
    return {"meta": dict(meta), "reference": reference, "judged": LEGEND, "traces": traces}


def plot_fronts(stats: Sequence[SeedStats], path: Path, dpi: int = 80) -> Path:
    """One panel per trace: x oracle vs p95 wait with 95 % error bars; the front joined."""
    try:
        import matplotlib  # noqa: PLC0415 (optional extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as error:
        raise PlotUnavailable(
            "the PNG needs matplotlib: pip install 'gpucellpool[plot]'"
        ) from error
    traces = by_trace(stats)
    fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4.5), squeeze=False)
    for ax, (trace, points) in zip(axes[0], traces.items(), strict=True):
        for p in points:
            x, y = p["cost_ratio"], p["wait_p95_seconds"]
            ours = p.policy.startswith("gpucellpool")
            ax.errorbar(
                x.mean,
                y.mean / 60,
                xerr=[[x.mean - x.low], [x.high - x.mean]],
                yerr=[[(y.mean - y.low) / 60], [(y.high - y.mean) / 60]],
                fmt="o" if ours else "s",
                color="#1f4e9c" if ours else "#c2571a",
                markersize=3 if ours else 5,
                elinewidth=0.6,
            )
            if not ours:
                ax.annotate(p.policy, (x.mean, y.mean / 60), fontsize=7, xytext=(4, 4),
                            textcoords="offset points")  # fmt: skip
        front = pareto_front(points)
        xs = [p["cost_ratio"].mean for p in front]
        ax.plot(xs, [p["wait_p95_seconds"].mean / 60 for p in front], "--", color="#555", lw=0.8)
        ax.set_title(f"{trace} ({len(points[0].seeds)} seeds)", fontsize=9)
        ax.set_xlabel("cost, x oracle")
        ax.set_ylabel("p95 wait, min")
        if all(p["wait_p95_seconds"].low > 0 for p in points):
            ax.set_yscale("log")  # minutes of ours next to hours of a laggard
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def write_report(
    folder: Path, stats: Sequence[SeedStats], reference: str | None, meta: Mapping[str, object]
) -> Iterator[str]:
    """sweep.md, sweep.json and sweep.png in ``folder`` (made if missing); yields what it did."""
    folder.mkdir(exist_ok=True)
    (folder / "sweep.md").write_text(report_markdown(stats, reference), encoding="utf-8")
    payload = report_json(stats, reference, meta)
    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    (folder / "sweep.json").write_text(text, encoding="utf-8")
    yield f"wrote {folder / 'sweep.md'} and {folder / 'sweep.json'}"
    try:
        yield f"wrote {plot_fronts(stats, folder / 'sweep.png')}"
    except PlotUnavailable as error:
        yield f"plot skipped: {error}"
