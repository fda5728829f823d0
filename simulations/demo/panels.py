"""Does every Grafana panel show something after a twin run? Ask the twin's Prometheus.

Why this module exists: a dashboard query that parses can still draw an empty panel, because
the operator or HAMi never exports the series or exports it under other labels. After a demo
run the twin's real Prometheus holds what a user's would, so each query of
``gpucellpool.operator.dashboards`` (panel targets and variable selectors) is run over the run's
time range with the Grafana variables filled in as a user viewing the demo pool would pick them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from gpucellpool.operator import dashboards
from simulations.demo.prometheus import Prometheus

RATE_INTERVAL = "30s"  # Grafana's $__rate_interval for a 1 s scrape on a few-minute range


@dataclass(frozen=True, slots=True)
class PanelQuery:
    where: str  # "<dashboard file>: <panel title or variable>"
    expr: str  # as written in the dashboard
    promql: str  # with the variables filled in


def fill(expr: str, namespace: str, pool: str) -> str:
    """The Grafana variables as a user looking at ``namespace/pool`` would set them."""
    values = {
        "$__rate_interval": RATE_INTERVAL,
        "$__interval": "2s",
        "$__range": "1h",
        "$namespace": namespace,  # DNS names: nothing to escape in a regex but "."
        "$pool": pool,
        "$node": f"{pool}-[0-9]+",  # the cell-node variable's choices
    }
    for var, value in values.items():
        expr = expr.replace(var, value)
    return expr


def panel_queries(namespace: str, pool: str) -> Iterator[PanelQuery]:
    for name, build in dashboards.DASHBOARDS.items():
        board = build()
        for title, expr in dashboards.expressions(board):
            yield PanelQuery(f"{name}: {title}", expr, fill(expr, namespace, pool))
        for var in board["templating"]["list"]:
            if "definition" in var:
                selector = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", var["definition"])
                where = f"{name}: variable {var['name']}"
                yield PanelQuery(where, selector, fill(selector, namespace, pool))


async def series_counts(
    prometheus: Prometheus, namespace: str, pool: str, since_s: float = 3600.0
) -> dict[PanelQuery, int]:
    """Per query, how many series have data over the last ``since_s`` seconds (-1: error)."""
    end = time.time()
    counts: dict[PanelQuery, int] = {}
    for q in panel_queries(namespace, pool):
        try:
            counts[q] = len(await prometheus.query_range(q.promql, end - since_s, end))
        except (RuntimeError, httpx.HTTPError):
            counts[q] = -1
    return counts
