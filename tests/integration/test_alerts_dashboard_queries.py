"""Every dashboard query parses as PromQL, checked by the real promtool.

Grafana variables are substituted with sample values (``$pool`` -> a regex, ``$__rate_interval``
-> 5m), each expression becomes a recording rule in a throwaway file, and ``promtool check
rules`` parses them all. Variable queries (``label_values(<selector>, label)``) are checked by
their selector. Metric names are checked against the catalogues in
tests/unit/test_metrics_references.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gpucellpool.operator import dashboards
from gpucellpool.operator.dashboards import expressions, substitute
from tests.integration.test_alerts import promtool  # noqa: F401  (fixture)

SAMPLE = {"$pool": "pool-a|pool-b", "$namespace": "team-a", "$node": "pool-a-0"}


def _queries() -> list[tuple[str, str]]:
    out = []
    for name, build in dashboards.DASHBOARDS.items():
        board = build()
        out += [(f"{name}: {title}", expr) for title, expr in expressions(board)]
        for var in board["templating"]["list"]:
            if "definition" in var:
                selector = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", var["definition"])
                out.append((f"{name}: variable {var['name']}", selector))
    return out


def _check(promtool: Path, tmp: Path, exprs: list[str]) -> subprocess.CompletedProcess[str]:  # noqa: F811
    records = [{"record": f"dashboard:query_{i}", "expr": substitute(e, SAMPLE)}
               for i, e in enumerate(exprs)]  # fmt: skip
    path = tmp / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": records}]}))
    return subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_every_dashboard_query_parses(promtool: Path, tmp_path: Path) -> None:  # noqa: F811
    queries = _queries()
    assert len(queries) > 30
    proc = _check(promtool, tmp_path, [expr for _, expr in queries])
    if proc.returncode != 0:  # name the offenders one by one
        bad = [t for t, e in queries if _check(promtool, tmp_path, [e]).returncode != 0]
        pytest.fail(f"promtool refused: {bad}\n{proc.stdout}{proc.stderr}")
    assert f"SUCCESS: {len(queries)} rules found" in proc.stdout


def test_promtool_refuses_a_broken_query(promtool: Path, tmp_path: Path) -> None:  # noqa: F811
    assert _check(promtool, tmp_path, ["sum by (pool (gpucellpool_cells)"]).returncode != 0
    assert _check(promtool, tmp_path, ['rate(x{pool=~"$pool"}[$__rate_interval])']).returncode == 0
