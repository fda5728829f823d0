"""Reports: per-policy figures, the comparison table (rich / Markdown / JSON), Pareto, plots."""

from simulations.simulator.report.plot import PlotUnavailable, plot_timelines
from simulations.simulator.report.render import markdown, rich_table, write_json
from simulations.simulator.report.summary import (
    PolicySummary,
    dominated_by,
    dominates,
    pareto_front,
    summarise,
)

__all__ = [
    "PlotUnavailable",
    "PolicySummary",
    "dominated_by",
    "dominates",
    "markdown",
    "pareto_front",
    "plot_timelines",
    "rich_table",
    "summarise",
    "write_json",
]
