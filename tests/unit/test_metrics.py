"""The operator metrics: catalogue matches the exposition, recorder semantics, original defects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.policy.decision import Reason
from gpucellpool.api.metric_catalogue import (
    BY_NAME,
    CATALOGUE,
    COARSE_PHASES,
    SPARES_CANCELLED,
    Kind,
    sample_names,
)
from gpucellpool.api.status import CellPhase
from gpucellpool.operator import crdcheck
from gpucellpool.operator.metrics import OperatorMetrics, PoolMetrics, exposed_names, label_sets


def _value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def _decide(pool: PoolMetrics, reason: str, desired: int, now: float = 0.0) -> bool:
    return pool.record_decision(
        reason=reason,
        desired=desired,
        demand_cells=1.5,
        allocated_cells=1.0,
        pending_asks=2,
        unschedulable=0,
        oldest_pending_age_seconds=12.0,
        now=now,
    )


def _exercise(pool: PoolMetrics) -> None:
    """Touch every recorder method once."""
    pool.record_limits(min_cells=0, max_cells=4, boot_seconds=300, stabilization_seconds=600)
    _decide(pool, "Idle", 0)
    _decide(pool, "ScaledUp", 1, now=2)
    _decide(pool, "ScaledDown", 0, now=5)
    pool.observe_decision_latency(0.4)
    pool.record_pending({("ml", "job-1", "1", "4096", "", "30"): 1_700_000_000.0})
    pool.record_cells({CellPhase.READY: 1, CellPhase.JOINING: 1})
    pool.cell_transition("Booting", "Joining")
    pool.cell_created()
    pool.cell_ready(200)
    pool.cell_removed("ScaleDown")
    pool.evicted(2)
    pool.record_utilization(0.5, fresh=True, age_seconds=3)
    pool.record_measured_use(True, 0.4, 2, 1)
    pool.record_reachable(True)
    pool.record_physical(held=1, free=3)
    pool.record_capacity(
        devices=1,
        memory_bytes={"total": 8.0, "allocated": 2.0, "available": 6.0},
        compute_percent={"total": 100.0, "allocated": 30.0, "available": 70.0},
    )
    pool.scrape_error("demand")
    pool.reconcile_error()


def test_catalogue_names_are_unique_prefixed_and_units_in_names() -> None:
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names))
    for spec in CATALOGUE:
        assert re.fullmatch(r"gpucell(pool)?_[a-z0-9_]+", spec.name), spec.name
        assert spec.help and not spec.help[0].islower(), spec.name
        assert (spec.kind is Kind.COUNTER) == spec.name.endswith("_total"), spec.name
        if spec.kind is Kind.HISTOGRAM:
            assert spec.name.endswith("_seconds") and spec.buckets
    # the brief's series are all there
    for name in (
        "gpucellpool_decision_latency_seconds",
        "gpucellpool_scale_decisions_total",
        "gpucellpool_desired_cells",
        "gpucellpool_cells",
        "gpucellpool_demand_cells",
        "gpucellpool_pending_gpu_asks",
        "gpucellpool_unschedulable_pods",
        "gpucellpool_utilization_ratio",
        "gpucellpool_metrics_fresh",
        "gpucellpool_cell_startup_seconds",
        "gpucellpool_cells_created_total",
        "gpucellpool_cells_removed_total",
        "gpucellpool_evictions_total",
        "gpucellpool_crd_drift_findings",
    ):
        assert name in BY_NAME


def test_every_catalogued_metric_is_exposed_with_pool_labels_and_nothing_else() -> None:
    reg = CollectorRegistry()
    metrics = OperatorMetrics(reg)
    _exercise(metrics.pool("ns-a", "p1"))
    metrics.record_crd_drift({"FieldMissing": 2})
    metrics.observe_stage("write", 0.1)
    assert set(exposed_names(reg)) == sample_names()
    for spec in CATALOGUE:
        for labels in label_sets(reg, spec.sample_names()):
            labels.pop("le", None)
            expected = (("namespace", "pool") if spec.per_pool else ()) + spec.labels
            assert set(labels) == set(expected), spec.name
    text = generate_latest(reg).decode()
    for spec in CATALOGUE:
        assert f"# HELP {spec.name.removesuffix('_total')} " in text or spec.name in text


def test_two_registries_do_not_collide() -> None:
    a, b = CollectorRegistry(), CollectorRegistry()
    OperatorMetrics(a).pool("n", "p").reconcile_error()
    OperatorMetrics(b)
    assert _value(a, "gpucell_reconcile_errors_total", namespace="n", pool="p") == 1
    assert _value(b, "gpucell_reconcile_errors_total", namespace="n", pool="p") is None


def test_counters_start_at_zero_so_rate_sees_the_first_error() -> None:
    """Original defect: reconcile_errors_total never incremented; a counter born at 1 hides it."""
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("n", "p")
    assert _value(reg, "gpucell_reconcile_errors_total", namespace="n", pool="p") == 0
    assert _value(reg, "gpucellpool_cells_created_total", namespace="n", pool="p") == 0
    pool.reconcile_error()
    assert _value(reg, "gpucell_reconcile_errors_total", namespace="n", pool="p") == 1


def test_decisions_are_counted_on_change_not_every_pass() -> None:
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("n", "p")
    assert _decide(pool, "Idle", 1) is True
    assert _decide(pool, "Idle", 1) is False
    assert _decide(pool, "Idle", 1) is False
    assert _decide(pool, "ScaledUp", 3, now=100) is True
    got = _value(reg, "gpucellpool_scale_decisions_total", namespace="n", pool="p", reason="Idle")
    assert got == 1
    up = {"namespace": "n", "pool": "p", "reason": "ScaledUp", "scaled_up": "true"}
    assert reg.get_sample_value("gpucell_scale_decisions_total", up) == 1
    assert (
        _value(reg, "gpucellpool_last_scale_up_timestamp_seconds", namespace="n", pool="p") == 100
    )
    assert (
        _value(reg, "gpucellpool_last_scale_down_timestamp_seconds", namespace="n", pool="p")
        is None
    )
    _decide(pool, "ScaledDown", 2, now=160)
    assert (
        _value(reg, "gpucellpool_last_scale_down_timestamp_seconds", namespace="n", pool="p") == 160
    )
    assert _value(reg, "gpucellpool_desired_cells", namespace="n", pool="p") == 2
    assert _value(reg, "gpucell_cells_desired", namespace="n", pool="p") == 2


def test_every_phase_written_and_coarse_phases_sum_up() -> None:
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("n", "p")
    pool.record_cells({CellPhase.READY: 2, CellPhase.JOINING: 1, CellPhase.PENDING: 1,
                       CellPhase.DELETING: 1})  # fmt: skip
    for phase in CellPhase:
        assert _value(reg, "gpucell_cells", namespace="n", pool="p", phase=phase.value) is not None
    coarse = {p: _value(reg, "gpucellpool_cells", namespace="n", pool="p", phase=p)
              for p in COARSE_PHASES}  # fmt: skip
    assert coarse == {"Booting": 2, "Ready": 2, "Draining": 1, "Failed": 0}


@pytest.mark.parametrize("method", ["physical", "capacity", "utilization"])
def test_unknown_values_are_removed_not_left_stale(method: str) -> None:
    """Original defect: physical free and capacity kept their last value when unknown."""
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("n", "p")
    _exercise(pool)
    if method == "physical":
        pool.record_physical(held=1, free=None)
        assert _value(reg, "gpucell_physical_gpus", namespace="n", pool="p", state="free") is None
        assert _value(reg, "gpucell_physical_gpus", namespace="n", pool="p", state="held") == 1
    elif method == "capacity":
        pool.record_capacity(devices=None, memory_bytes=None, compute_percent=None)
        for name in ("gpucell_capacity_gpu_memory_bytes", "gpucell_capacity_gpu_devices"):
            assert not label_sets(reg, [name])
    else:
        pool.record_utilization(None, fresh=False, age_seconds=400)
        assert _value(reg, "gpucellpool_utilization_ratio", namespace="n", pool="p") is None
        assert _value(reg, "gpucellpool_metrics_fresh", namespace="n", pool="p") == 0


def test_forget_drops_exactly_one_pools_series() -> None:
    reg = CollectorRegistry()
    metrics = OperatorMetrics(reg)
    _exercise(metrics.pool("ns", "gone"))
    _exercise(metrics.pool("ns", "kept"))
    _exercise(metrics.pool("other", "gone"))
    metrics.forget("ns", "gone")
    metrics.forget("ns", "never-existed")
    seen = {(s.get("namespace"), s.get("pool")) for s in label_sets(reg, sample_names())}
    assert ("ns", "gone") not in seen
    assert {("ns", "kept"), ("other", "gone")} <= seen
    # a forgotten pool that comes back starts from zero
    metrics.pool("ns", "gone")
    assert _value(reg, "gpucell_reconcile_errors_total", namespace="ns", pool="gone") == 0


def test_crd_drift_uses_crdchecks_gauge_and_zeroes_absent_kinds() -> None:
    reg = CollectorRegistry()
    metrics = OperatorMetrics(reg)
    assert metrics.collectors["gpucellpool_crd_drift_findings"] is crdcheck.drift_gauge(reg)
    metrics.record_crd_drift({"FieldMissing": 3})
    assert _value(reg, "gpucellpool_crd_drift_findings", kind="FieldMissing") == 3
    assert _value(reg, "gpucellpool_crd_drift_findings", kind="EnumWidened") == 0


def test_startup_is_observed_in_both_families() -> None:
    reg = CollectorRegistry()
    OperatorMetrics(reg).pool("n", "p").cell_ready(250)
    for name in ("gpucell_cell_startup_seconds", "gpucellpool_cell_startup_seconds"):
        assert _value(reg, f"{name}_bucket", namespace="n", pool="p", le="300.0") == 1
        assert _value(reg, f"{name}_bucket", namespace="n", pool="p", le="180.0") == 0


def test_every_metric_is_documented() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    missing = [spec.name for spec in CATALOGUE if f"`{spec.name}`" not in docs]
    assert not missing, f"not in docs/observability.md: {missing}"


def test_scaled_up_label_says_whether_desired_rose() -> None:
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("n", "p")
    _decide(pool, "Idle", 2)
    _decide(pool, "Headroom", 2)  # a reason that usually scales up, here without change
    _decide(pool, "BelowMinReplicas", 3)
    labels = {"namespace": "n", "pool": "p"}
    get = reg.get_sample_value
    assert get("gpucell_scale_decisions_total", {**labels, "reason": "Headroom",
                                                 "scaled_up": "false"}) == 1  # fmt: skip
    assert get("gpucell_scale_decisions_total", {**labels, "reason": "BelowMinReplicas",
                                                 "scaled_up": "true"}) == 1  # fmt: skip


def test_forget_all_leaves_only_cluster_wide_series() -> None:
    reg = CollectorRegistry()
    metrics = OperatorMetrics(reg)
    _exercise(metrics.pool("a", "p"))
    _exercise(metrics.pool("b", "q"))
    metrics.record_crd_drift({})
    metrics.forget_all()
    remaining = {s.get("pool") for s in label_sets(reg, sample_names())}
    assert remaining == {None}  # the CRD drift gauge only


def test_a_deposed_leader_exports_no_pool_series_even_from_a_pass_in_flight() -> None:
    """Leadership lost: ``forget_all`` drops every pool's series; a recorder taken before
    (a reconcile pass still running) is retired, so its late writes do not bring them back,
    and the next term starts the pool's counters from zero."""
    reg = CollectorRegistry()
    metrics = OperatorMetrics(reg)
    in_flight = metrics.pool("n", "p")
    _exercise(in_flight)
    metrics.forget_all()
    in_flight.reconcile_error()
    in_flight.evicted()
    in_flight.record_physical(held=2, free=1)
    _decide(in_flight, "ScaledUp", 3)
    assert {s.get("pool") for s in label_sets(reg, sample_names())} <= {None}
    metrics.pool("n", "p")  # leading again
    assert _value(reg, "gpucell_reconcile_errors_total", namespace="n", pool="p") == 0


def test_scrape_error_reasons_start_at_zero_including_the_physical_inventory() -> None:
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("n", "p")
    for reason in ("capacity", "demand", "inventory"):
        assert _value(reg, "gpucell_capacity_scrape_errors_total", namespace="n", pool="p",
                      reason=reason) == 0  # fmt: skip
    pool.scrape_error("inventory")
    assert _value(reg, "gpucell_capacity_scrape_errors_total", namespace="n", pool="p",
                  reason="inventory") == 1  # fmt: skip


def test_giving_up_spares_is_not_a_scale_down_for_the_flapping_alert() -> None:
    """Hedged spare boots cancelled (reason SparesCancelled) lower the desired count but remove
    no cell that served: GPUCellPoolScaleFlapping compares the last scale-up with the last
    scale-down of cells that served, so only those move its timestamp."""
    assert Reason.SPARES_CANCELLED.value == SPARES_CANCELLED
    reg = CollectorRegistry()
    pool = OperatorMetrics(reg).pool("n", "p")
    _decide(pool, "ScaledUp", 10, now=100)
    assert _decide(pool, SPARES_CANCELLED, 7, now=200) is True
    down = "gpucellpool_last_scale_down_timestamp_seconds"
    assert _value(reg, down, namespace="n", pool="p") is None
    assert _value(reg, "gpucellpool_desired_cells", namespace="n", pool="p") == 7
    spares = {"namespace": "n", "pool": "p", "reason": SPARES_CANCELLED}
    assert reg.get_sample_value("gpucellpool_scale_decisions_total", spares) == 1
    _decide(pool, "ScaledDown", 6, now=900)
    assert _value(reg, down, namespace="n", pool="p") == 900
