"""Alerts and dashboards query only series that exist: ours (gpucellpool.api.metric_catalogue) or
HAMi's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from autoscaler.signals.hami_metrics import CATALOGUE as HAMI
from gpucellpool.api import metric_catalogue as metrics
from gpucellpool.operator import dashboards
from gpucellpool.operator.dashboards import expressions, metric_names
from simulations.simulator import record

RULES = Path(__file__).resolve().parents[2] / "charts/gpucellpool/files/prometheus-rules.yaml"
HAMI_NAMES = {n for e in HAMI for n in (e.current, e.legacy) if n}
PROMETHEUS_OWN = {"up"}
KNOWN = metrics.sample_names() | HAMI_NAMES


def _rules() -> list[dict[str, str]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("name", sorted(dashboards.DASHBOARDS))
def test_dashboard_queries_reference_catalogued_metrics(name: str) -> None:
    board = dashboards.DASHBOARDS[name]()
    queries = [*expressions(board)]
    queries += [
        (v["name"], v["definition"]) for v in board["templating"]["list"] if "definition" in v
    ]
    for title, expr in queries:
        unknown = metric_names(re.sub(r"label_values\((.*),\s*\w+\)$", r"\1", expr)) - KNOWN
        assert not unknown, f"{name} / {title}: {sorted(unknown)}"


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r["alert"])
def test_alert_rules_reference_catalogued_metrics(rule: dict[str, str]) -> None:
    unknown = metric_names(rule["expr"]) - KNOWN - PROMETHEUS_OWN
    assert not unknown, f"{rule['alert']}: {sorted(unknown)}"


def test_the_check_would_catch_a_typo() -> None:
    assert metric_names("gpucellpool_desired_cell") - KNOWN == {"gpucellpool_desired_cell"}


def test_every_pool_series_is_shown_or_alerted_on() -> None:
    """A metric nobody looks at is dead weight: each is on a panel, in an alert, read by the
    trace recorder, or exempt."""
    used = set().union(*(metric_names(e) for b in dashboards.DASHBOARDS.values()
                         for _, e in expressions(b())))  # fmt: skip
    used |= set().union(*(metric_names(r["expr"]) for r in _rules()))
    used |= metric_names(record.pending_query())  # read by ``gpucellpool trace record``
    exempt = {  # kept for the original's dashboards; our panels use the gpucellpool_* twin
        "gpucell_cell_startup_seconds", "gpucell_scale_decisions_total",
        "gpucellpool_min_cells", "gpucell_capacity_gpu_compute_percent",
    }  # fmt: skip
    for spec in metrics.CATALOGUE:
        if spec.name in exempt:
            continue
        assert set(spec.sample_names()) & used, f"{spec.name} is on no panel and in no alert"
