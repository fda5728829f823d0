"""Reports: per-policy figures, the comparison table (rich / Markdown / JSON), Pareto, plots."""

from simulations.report.plot import PlotUnavailable, plot_timelines
from simulations.report.render import markdown, rich_table, write_json
from simulations.report.summary import (
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
