"""Grafana dashboards for gpucellpool, generated from code
(``python -m gpucellpool.operator.dashboards``).

Why this module exists: a dashboard is only useful if every panel queries a series that exists.
Writing the JSON by hand drifts from the metrics; generating it lets tests parse every
expression with promtool and check every metric name against ``gpucellpool.api.metric_catalogue``
and the HAMi catalogue. The chart ships the generated files (``charts/gpucellpool/dashboards/``) as
Grafana sidecar ConfigMaps; ``--check`` fails when they differ from what this code renders.

Two dashboards: "GPUCellPool — overview" answers "did the pool follow demand, and why?"
(demand and allocation expressed in cells against Ready, booting and desired cells; decisions
by reason; latency; churn; utilisation). "GPUCellPool — HAMi" shows the HAMi scheduler and
monitor series of the pool's cells, whose Node names are ``<pool>-<index>``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
OUT_DIR = Path(__file__).resolve().parents[2] / "charts" / "gpucellpool" / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
POOL = 'namespace=~"$namespace", pool=~"$pool"'
CELLS = 'node=~"($pool)-[0-9]+"'  # a cell's Node is named <pool>-<index>
NODE = 'node=~"$node"'


def _target(expr: str, legend: str, ref: int) -> JSON:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(65 + ref)}


def panel(
    title: str,
    targets: Sequence[tuple[str, str]],
    *,
    unit: str = "short",
    kind: str = "timeseries",
    description: str = "",
    width: int = 12,
) -> JSON:
    """One panel; ``targets`` are (PromQL, legend) pairs. Positions are set by ``_layout``."""
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom"}}
        if kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"]}},
        "targets": [_target(expr, legend, i) for i, (expr, legend) in enumerate(targets)],
        "gridPos": {"h": 8, "w": width, "x": 0, "y": 0},
    }


def row(title: str) -> JSON:
    return {"type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0}}  # fmt: skip


def _layout(items: Sequence[JSON]) -> list[JSON]:
    """Left-to-right, top-to-bottom placement; a row starts a new line."""
    out, x, y, line_h = [], 0, 0, 0
    for pid, item in enumerate(items, start=1):
        pos = dict(item["gridPos"])
        if item["type"] == "row" or x + pos["w"] > 24:
            x, y, line_h = 0, y + line_h, 0
        pos.update(x=x, y=y)
        x, line_h = x + pos["w"], max(line_h, pos["h"])
        if item["type"] == "row":
            x, y, line_h = 0, y + pos["h"], 0
        out.append({**item, "id": pid, "gridPos": pos})
    return out


def _query_var(name: str, label: str, query: str, *, multi: bool = True) -> JSON:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "multi": multi,
        "includeAll": multi,
        "allValue": ".*",
        "current": {},
        "sort": 1,
    }


def _datasource_var() -> JSON:
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}}  # fmt: skip


def dashboard(uid: str, title: str, variables: Sequence[JSON], items: Sequence[JSON]) -> JSON:
    return {
        "uid": uid,
        "title": title,
        "tags": ["gpucellpool"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [_datasource_var(), *variables]},
        "annotations": {"list": []},
        "panels": _layout(items),
    }


def _pool_vars() -> list[JSON]:
    return [
        _query_var("namespace", "Namespace", "label_values(gpucellpool_desired_cells, namespace)"),
        _query_var(
            "pool",
            "Pool",
            'label_values(gpucellpool_desired_cells{namespace=~"$namespace"}, pool)',
        ),
    ]


def _by_pool(metric: str, extra: str = "") -> str:
    sel = f"{POOL}, {extra}" if extra else POOL
    return f"sum by (namespace, pool) ({metric}{{{sel}}})"


def _quantiles(metric: str, window: str) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by (le, pool) "
            f"(rate({metric}_bucket{{{POOL}}}[{window}])))",
            f"{{{{pool}}}} p{int(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


def _demand_panels() -> list[JSON]:
    return [
        row("Demand vs cells"),
        panel("Demand vs cells", [
            (_by_pool("gpucellpool_demand_cells"), "{{pool}} demand (cells)"),
            (_by_pool("gpucellpool_allocated_cells"), "{{pool}} allocated (cells)"),
            (_by_pool("gpucellpool_cells", 'phase="Ready"'), "{{pool}} Ready"),
            (_by_pool("gpucellpool_cells", 'phase="Booting"'), "{{pool}} booting"),
            (_by_pool("gpucellpool_desired_cells"), "{{pool}} desired"),
            (_by_pool("gpucellpool_max_cells"), "{{pool}} max"),
        ], description="Packed demand (allocated plus pending asks) and HAMi-allocated capacity, "
           "in cells, against Ready and booting cells and the autoscaler's target.", width=24),
        panel("Pending GPU asks", [
            (_by_pool("gpucellpool_pending_gpu_asks"), "{{pool}} pending (counts for pool)"),
            (_by_pool("gpucellpool_unschedulable_pods"), "{{pool}} unschedulable"),
        ], description="Unschedulable pods are ones no fresh cell of the pool could host."),
        panel("Oldest pending ask vs boot time", [
            (_by_pool("gpucellpool_oldest_pending_ask_age_seconds"), "{{pool}} oldest ask"),
            (_by_pool("gpucellpool_expected_boot_seconds"), "{{pool}} expected boot"),
        ], unit="s", description="An ask older than one boot time while below max alerts "
           "(GPUCellPoolPendingNotServed)."),
    ]  # fmt: skip


def _decision_panels() -> list[JSON]:
    rate = "$__rate_interval"
    return [
        row("Decisions"),
        panel("Decisions by reason", [
            (f"sum by (reason) (increase(gpucellpool_scale_decisions_total{{{POOL}}}[{rate}]))",
             "{{reason}}"),
        ], description="Decisions that changed the outcome (reason or desired count)."),
        panel("Decision latency (pending pod seen → cell requested)",
              _quantiles("gpucellpool_decision_latency_seconds", "15m"), unit="s"),
        panel("Decision stages (mean, all pools)", [
            (f"sum by (stage) (rate(gpucellpool_decision_stage_seconds_sum[{rate}])) / "
             f"sum by (stage) (rate(gpucellpool_decision_stage_seconds_count[{rate}]))",
             "{{stage}}"),
        ], unit="s", description="wait: wake-up to decision start (debounce, queueing); decide; "
           "write_slot: queued for a status write slot; write: the apply's round trip."),
        panel("HAMi metrics fresh", [(_by_pool("gpucellpool_metrics_fresh"), "{{pool}}")],
              kind="stat", width=6, description="0 freezes scale-down (GPUCellPoolMetricsStale)."),
        panel("Workload cluster reachable",
              [(_by_pool("gpucell_workload_cluster_reachable"), "{{pool}}")], kind="stat", width=6),
        panel("HAMi metrics age", [(_by_pool("gpucellpool_metrics_age_seconds"), "{{pool}}")],
              unit="s", width=12),
    ]  # fmt: skip


def _cell_panels() -> list[JSON]:
    rate = "$__rate_interval"
    return [
        row("Cells and churn"),
        panel("Cells by phase", [
            (f"sum by (phase) (gpucellpool_cells{{{POOL}}})", "{{phase}}"),
        ]),
        panel("Cell startup (creation → Ready)",
              _quantiles("gpucellpool_cell_startup_seconds", "6h"), unit="s"),
        panel("Churn: cells created and removed", [
            (f"sum by (pool) (increase(gpucellpool_cells_created_total{{{POOL}}}[{rate}]))",
             "{{pool}} created"),
            (f"sum by (pool, reason) "
             f"(increase(gpucellpool_cells_removed_total{{{POOL}}}[{rate}]))",
             "{{pool}} removed ({{reason}})"),
            (f"sum by (pool) (increase(gpucellpool_evictions_total{{{POOL}}}[{rate}]))",
             "{{pool}} pods evicted"),
        ]),
        panel("Cell phase transitions", [
            (f"sum by (from, to) (increase(gpucell_cell_transitions_total{{{POOL}}}[1h]))",
             "{{from}} → {{to}}"),
        ]),
    ]  # fmt: skip


def _capacity_panels() -> list[JSON]:
    rate = "$__rate_interval"
    return [
        row("Capacity, utilisation and errors"),
        panel("Utilisation (max of memory, cores, slots)",
              [(_by_pool("gpucellpool_utilization_ratio"), "{{pool}}")], unit="percentunit"),
        panel("Measured GPU use vs allocation", [
            (_by_pool("gpucellpool_measured_utilization_ratio"), "{{pool}} measured"),
            (_by_pool("gpucellpool_utilization_ratio"), "{{pool}} allocated"),
        ], unit="percentunit", description="Measured: mean hami_host_gpu_utilization_ratio of "
              "the Ready cells' GPUs. A wide gap is allocated capacity nobody computes on."),
        panel("Idle pods and cells (no kernel within usageIdleWindow)", [
            (_by_pool("gpucellpool_idle_pods"), "{{pool}} idle pods"),
            (_by_pool("gpucellpool_idle_cells"), "{{pool}} idle cells"),
            (_by_pool("gpucellpool_metrics_available"), "{{pool}} MetricsAvailable"),
        ], description="Idle cells are drained when scaleDownOn is Usage; MetricsAvailable 0 "
              "freezes that."),
        panel("Whole GPUs by state", [
            (f"sum by (pool, state) (gpucell_physical_gpus{{{POOL}}})", "{{pool}} {{state}}"),
        ]),
        panel("HAMi GPU memory", [
            (f"sum by (pool, state) (gpucell_capacity_gpu_memory_bytes{{{POOL}}})",
             "{{pool}} {{state}}"),
        ], unit="bytes"),
        panel("Errors", [
            (f"sum by (pool, reason) "
             f"(rate(gpucell_capacity_scrape_errors_total{{{POOL}}}[{rate}]))",
             "{{pool}} read errors ({{reason}})"),
            (f"sum by (pool) (rate(gpucell_reconcile_errors_total{{{POOL}}}[{rate}]))",
             "{{pool}} reconcile errors"),
            ("sum by (kind) (gpucellpool_crd_drift_findings)", "CRD drift: {{kind}}"),
        ], unit="ops"),
    ]  # fmt: skip


def overview() -> JSON:
    items = [*_demand_panels(), *_decision_panels(), *_cell_panels(), *_capacity_panels()]
    return dashboard("gpucellpool-overview", "GPUCellPool — overview", _pool_vars(), items)


def _hami_panels() -> list[JSON]:
    return [
        row("HAMi allocation (scheduler)"),
        panel("GPU memory allocated / limit", [
            (f"sum by (node) (hami_gpu_memory_allocated_bytes{{{NODE}}}) / "
             f"sum by (node) (hami_gpu_memory_limit_bytes{{{NODE}}})", "{{node}}"),
        ], unit="percentunit"),
        panel("GPU cores allocated / limit", [
            (f"sum by (node) (hami_gpu_core_allocated_ratio{{{NODE}}}) / "
             f"sum by (node) (hami_gpu_core_limit_ratio{{{NODE}}})", "{{node}}"),
        ], unit="percentunit"),
        panel("Slots used (container-device allocations)", [
            (f"sum by (node) (hami_gpu_shared_count{{{NODE}}})", "{{node}}"),
        ]),
        panel("Memory allocated per pod (top 10)", [
            (f"topk(10, sum by (namespace, pod) (hami_vgpu_memory_allocated_bytes{{{NODE}}}))",
             "{{namespace}}/{{pod}}"),
        ], unit="bytes"),
        row("HAMi real use (vGPU monitor)"),
        panel("Host GPU utilisation", [
            (f"avg by (node) (hami_host_gpu_utilization_ratio{{{NODE}}})", "{{node}}"),
        ], unit="percent"),
        panel("Host GPU memory used", [
            (f"sum by (node) (hami_host_gpu_memory_used_bytes{{{NODE}}})", "{{node}}"),
        ], unit="bytes"),
        panel("Idle containers (no kernel for 10 minutes)", [
            ("count(hami_container_last_kernel_elapsed_seconds > 600) or vector(0)", "idle"),
        ], description="Containers holding a vGPU without launching a kernel: scale-down "
           "candidates if they could be moved or stopped."),
        panel("Allocated memory, HAMi <= 2.8 (legacy names)", [
            ('sum by (nodeid) (GPUDeviceMemoryAllocated{nodeid=~"$node"}) / '
             'sum by (nodeid) (GPUDeviceMemoryLimit{nodeid=~"$node"})', "{{nodeid}}"),
        ], unit="percentunit"),
    ]  # fmt: skip


def hami() -> JSON:
    pools = _query_var("pool", "Pool", "label_values(gpucellpool_desired_cells, pool)")
    nodes = f"label_values(hami_gpu_memory_limit_bytes{{{CELLS}}}, node)"
    variables = [pools, _query_var("node", "Cell node", nodes)]
    return dashboard("gpucellpool-hami", "GPUCellPool — HAMi", variables, _hami_panels())


DASHBOARDS = {"gpucellpool-overview.json": overview, "gpucellpool-hami.json": hami}


def render() -> dict[str, str]:
    """File name -> JSON text (stable: sorted keys, trailing newline)."""
    return {name: json.dumps(build(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            for name, build in DASHBOARDS.items()}  # fmt: skip


def expressions(board: JSON) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every target in a dashboard."""
    for item in board["panels"]:
        for target in item.get("targets", ()):
            yield item["title"], target["expr"]


GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h"}


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Replace Grafana variables with sample values so promtool can parse the expression."""
    for var, value in {**GRAFANA_VARS, **(values or {})}.items():
        expr = expr.replace(var, value)
    return re.sub(r"\$\{?(\w+)\}?", "x", expr)


_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def metric_names(expr: str) -> frozenset[str]:
    """Metric names a PromQL expression selects (a lexical scan; promtool checks syntax).

    Strings, label matchers, ranges and grouping clauses are removed first; what is left
    that is an identifier not followed by ``(`` and not a keyword is a metric name.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = _GROUPING.sub("", text)
    found = re.findall(r"(?<![\w.$])([A-Za-z_:][\w:]*)\b(?!\s*\()", text)
    return frozenset(n for n in found if n.lower() not in _KEYWORDS)


def drifted(directory: Path = OUT_DIR) -> list[str]:
    """Files in ``directory`` that differ from (or are missing versus) the rendered ones."""
    out = []
    for name, text in render().items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            out.append(name)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucellpool.operator.dashboards")
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    if args.check:
        stale = drifted(args.out)
        for name in stale:
            print(
                f"stale: {args.out / name} (run python -m gpucellpool.operator.dashboards)",
                file=sys.stderr,
            )
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (args.out / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
