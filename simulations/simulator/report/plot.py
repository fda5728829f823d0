"""A PNG of demand (cells the pods need) against the cells each policy ran, over time.

Why this module exists: a table says how much a policy paid; the plot shows *why* (late
scale-up, slow scale-down, churn). matplotlib is an optional extra (``gpucellpool[plot]``);
without it ``plot_timelines`` raises ``PlotUnavailable`` with an install hint.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from simulations.simulator.engine.metrics import SimResult


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


TIME_UNITS = (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0), ("seconds", 1.0))


def time_unit(span_seconds: float) -> tuple[str, float]:
    """The largest unit the span covers at least twice (an hour's run in minutes, not days)."""
    for name, seconds in TIME_UNITS:
        if span_seconds >= 2 * seconds:
            return name, seconds
    return TIME_UNITS[-1]


def plot_timelines(
    results: Sequence[SimResult], path: Path | str, title: str = "", dpi: int = 80
) -> Path:
    """Write one panel per policy: demand in cells vs Ready and Ready + Booting cells."""
    try:
        import matplotlib  # noqa: PLC0415 (optional extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError as error:
        raise PlotUnavailable(
            "the PNG needs matplotlib: pip install 'gpucellpool[plot]'"
        ) from error
    fig, axes = plt.subplots(
        len(results), 1, figsize=(9, 1.9 * len(results) + 0.6), sharex=True, squeeze=False
    )
    span = max((s.time_seconds for r in results for s in r.timeline), default=0.0)
    unit, unit_seconds = time_unit(span)
    for ax, result in zip(axes[:, 0], results, strict=True):
        days = [s.time_seconds / unit_seconds for s in result.timeline]
        demand = [s.demand_cells for s in result.timeline]
        ready = [s.ready for s in result.timeline]
        provisioned = [s.ready + s.booting + s.draining for s in result.timeline]
        ax.fill_between(days, provisioned, step="post", color="#f2b27a", label="billed cells")
        ax.step(days, ready, where="post", color="#c2571a", linewidth=0.9, label="ready")
        ax.step(days, demand, where="post", color="#1f4e9c", linewidth=0.9, label="demand")
        ax.set_ylabel("cells")
        ax.set_title(f"{result.policy}: {result.cost_cell_hours:,.0f} cell-hours", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper left", fontsize=7, ncols=3)
    axes[-1, 0].set_xlabel(unit)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return out
