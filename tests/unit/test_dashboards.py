"""Generated Grafana dashboards: no drift, sane layout, the panels the pool owner needs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpucellpool.operator import dashboards
from gpucellpool.operator.dashboards import expressions, metric_names, substitute

BOARDS = {name: build() for name, build in dashboards.DASHBOARDS.items()}


def test_checked_in_files_match_the_generator() -> None:
    assert dashboards.drifted() == [], "run: python -m gpucellpool.operator.dashboards"


def test_drift_check_notices_a_hand_edit(tmp_path: Path) -> None:
    assert dashboards.main(["--out", str(tmp_path)]) == 0
    assert dashboards.main(["--check", "--out", str(tmp_path)]) == 0
    path = tmp_path / "gpucellpool-overview.json"
    path.write_text(path.read_text().replace("Demand vs cells", "Demand"))
    assert dashboards.main(["--check", "--out", str(tmp_path)]) == 1
    (tmp_path / "gpucellpool-hami.json").unlink()
    assert set(dashboards.drifted(tmp_path)) == set(dashboards.DASHBOARDS)


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_layout_and_identity(name: str) -> None:
    board = BOARDS[name]
    assert board["uid"] == name.removesuffix(".json")
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for item in board["panels"]:
        pos = item["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, item["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{item['title']} overlaps another panel"
                cells.add((x, y))
        for target in item.get("targets", ()):
            assert target["datasource"]["uid"] == "${datasource}"
    json.dumps(board)  # serialisable


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_variable_used_is_defined(name: str) -> None:
    board = BOARDS[name]
    defined = {v["name"] for v in board["templating"]["list"]} | {"__rate_interval"}
    text = json.dumps([item.get("targets", []) for item in board["panels"]])
    text += json.dumps(board["templating"])
    used = set(re.findall(r"\$\{?(\w+)", text))
    assert used <= defined


def _titles(name: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for title, expr in expressions(BOARDS[name]):
        out.setdefault(title, []).append(expr)
    return out


def test_overview_has_the_panels_a_pool_owner_needs() -> None:
    panels = _titles("gpucellpool-overview.json")
    demand = " ".join(panels["Demand vs cells"])
    for needle in ("gpucellpool_demand_cells", "gpucellpool_allocated_cells",
                   'phase="Ready"', 'phase="Booting"', "gpucellpool_desired_cells"):  # fmt: skip
        assert needle in demand
    assert "gpucellpool_pending_gpu_asks" in " ".join(panels["Pending GPU asks"])
    assert "by (reason)" in panels["Decisions by reason"][0]
    assert any("cell_startup_seconds" in e for e in panels["Cell startup (creation → Ready)"])
    churn = " ".join(panels["Churn: cells created and removed"])
    assert "cells_created_total" in churn and "cells_removed_total" in churn
    assert "utilization_ratio" in panels["Utilisation (max of memory, cores, slots)"][0]


def test_hami_dashboard_uses_hami_series_current_and_legacy() -> None:
    names = set().union(*(metric_names(e) for _, e in expressions(BOARDS["gpucellpool-hami.json"])))
    assert {"hami_gpu_memory_allocated_bytes", "hami_gpu_shared_count",
            "hami_host_gpu_utilization_ratio", "GPUDeviceMemoryAllocated"} <= names  # fmt: skip


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up == 0", {"up"}),
        ('sum by (le) (rate(a_bucket{x="b{c}"}[5m])) > 1e3', {"a_bucket"}),
        ("a and on (namespace, pool) b offset 5m or vector(0)", {"a", "b"}),
        ("time() - ts < 3600", {"ts"}),
        ('x{y=~"$pool"} / ignoring (z) group_left (w) y2', {"x", "y2"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_substitute_leaves_no_grafana_variables() -> None:
    out = substitute('rate(x{pool=~"$pool", n=~"${namespace}"}[$__rate_interval])')
    assert "$" not in out and "[5m]" in out
