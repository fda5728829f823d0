"""The operator's Prometheus metrics: one catalogue of names, and a typed per-pool recorder.

Why this module exists: "why did it scale?" must have an answer in Grafana, and alerts and
dashboards can only be as good as the series behind them. The catalogue (``CATALOGUE``) is the
one place a metric's name, type, labels, unit and HELP text are written; the chart's alerts and
the generated dashboards are checked against it, so a panel cannot query a name the operator
never exports. The recorder (``OperatorMetrics`` / ``PoolMetrics``) is the small typed API the
control loop calls; it writes onto a registry passed in (never the global one), so tests and
several operators in one process do not collide.

Two families. ``gpucell_*`` keeps the original operator's names and meanings (reference §7.1)
so existing dashboards keep working, with its defects fixed: the reconcile-error counter is
really incremented; counters start at zero when a pool is first seen (so ``rate()`` sees the
first increment); a value that cannot be read is removed, never left stale (physical ``free``,
capacity); and a scaling decision is counted when it changes, not on every pass.
``gpucellpool_*`` adds the decision-quality series of the new control loop. Every per-pool
series carries ``namespace`` and ``pool``; ``forget`` drops a deleted pool's series and
``forget_all`` every pool's (a replica that lost leadership must not keep exporting the values
of its last term next to the new leader's). A forgotten pool's old recorder is retired: a write
through it (a pass that was running when leadership was lost) is dropped, never re-exported.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpucellpool import crdcheck
from gpucellpool.api.status import CellPhase

POOL_LABELS = ("namespace", "pool")
STARTUP_BUCKETS = (30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1800.0)
REMOVAL_REASONS = ("Drained", "Failed", "Other")  # gpucellpool_cells_removed_total{reason}
# gpucell_capacity_scrape_errors_total{reason}: HAMi capacity of Ready cells, the autoscaler's
# Prometheus usage read ("demand"), and the physical GPU ledger (SwiftGPUNodes / ResourceSlices;
# a reason the original did not have).
SCRAPE_REASONS = ("capacity", "demand", "inventory")
DECISION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Kind(enum.StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exported metric. ``labels`` are the extra labels after ``namespace``, ``pool``."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    per_pool: bool = True

    def sample_names(self) -> tuple[str, ...]:
        """The names that appear in the exposition (and therefore in PromQL)."""
        if self.kind is Kind.HISTOGRAM:
            return tuple(f"{self.name}_{s}" for s in ("bucket", "sum", "count"))
        return (self.name,)


G, C, H = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM
CATALOGUE: tuple[MetricSpec, ...] = (
    # --- the original operator's names (reference §7.1), defects fixed -----------------------
    MetricSpec("gpucell_cells_desired", G, "Desired cell count from the last scaling decision"),
    MetricSpec("gpucell_cells", G, "Cells by detailed phase (every phase written, 0 when empty)",
               ("phase",)),
    MetricSpec("gpucell_cell_startup_seconds", H, "Cell creation to first Ready, in seconds "
               "(same observations as gpucellpool_cell_startup_seconds)", (), STARTUP_BUCKETS),
    MetricSpec("gpucell_cell_transitions_total", C, "Cell phase changes", ("from", "to")),
    MetricSpec("gpucell_physical_gpus", G, "Whole physical GPUs by state (held by this pool, "
               "free for it); absent while unknown", ("state",)),
    MetricSpec("gpucell_capacity_gpu_devices", G, "GPU devices HAMi advertises on the pool's "
               "Ready cells"),
    MetricSpec("gpucell_capacity_gpu_memory_bytes", G, "HAMi GPU memory on the pool's cells, "
               "in bytes; absent while unknown", ("state",)),
    MetricSpec("gpucell_capacity_gpu_compute_percent", G, "HAMi GPU compute on the pool's "
               "cells, percent of one GPU per GPU; homogeneous pools only", ("state",)),
    MetricSpec("gpucell_workload_cluster_reachable", G, "1 when the workload apiserver answers"),
    MetricSpec("gpucell_capacity_scrape_errors_total", C, "Failed reads of HAMi capacity, "
               "Prometheus usage (demand) or the physical GPU inventory", ("reason",)),
    MetricSpec("gpucell_scale_decisions_total", C, "Scaling decisions that changed the outcome "
               "(reason or desired count), by reason and whether desired rose",
               ("reason", "scaled_up")),
    MetricSpec("gpucell_reconcile_errors_total", C, "Reconcile passes that ended in an error"),
    # --- the control loop's decision-quality series ------------------------------------------
    MetricSpec("gpucellpool_decision_latency_seconds", H, "Pending GPU pod first seen to the "
               "cell that serves it being requested, in seconds", (), DECISION_BUCKETS),
    MetricSpec("gpucellpool_scale_decisions_total", C, "Decisions that changed the outcome, by "
               "machine-readable reason", ("reason",)),
    MetricSpec("gpucellpool_desired_cells", G, "Cells the last decision wants"),
    MetricSpec("gpucellpool_min_cells", G, "Lower bound (minReplicas, or replicas)"),
    MetricSpec("gpucellpool_max_cells", G, "Upper bound (maxReplicas, or replicas)"),
    MetricSpec("gpucellpool_cells", G, "Cells by the policy's phase: Booting, Ready, Draining, "
               "Failed (every phase written)", ("phase",)),
    MetricSpec("gpucellpool_demand_cells", G, "Packed demand (allocated plus pending asks) in "
               "cells"),
    MetricSpec("gpucellpool_allocated_cells", G, "HAMi-allocated capacity expressed in cells"),
    MetricSpec("gpucellpool_pending_gpu_asks", G, "Pending GPU pods that count for this pool"),
    MetricSpec("gpucellpool_oldest_pending_ask_age_seconds", G, "Age of the oldest pending GPU "
               "pod that counts for this pool, in seconds (0 when none)"),
    MetricSpec("gpucellpool_unschedulable_pods", G, "Pending GPU pods no fresh cell of this "
               "pool could host"),
    MetricSpec("gpucellpool_utilization_ratio", G, "Allocated fraction of the pool's Ready "
               "capacity, max over memory, cores and slots (0-1); absent while unknown"),
    MetricSpec("gpucellpool_metrics_fresh", G, "1 when the HAMi metrics behind utilisation are "
               "fresh; 0 freezes scale-down"),
    MetricSpec("gpucellpool_metrics_age_seconds", G, "Age of the stalest HAMi sample used, in "
               "seconds"),
    MetricSpec("gpucellpool_cell_startup_seconds", H, "Cell creation to first Ready, in seconds",
               (), STARTUP_BUCKETS),
    MetricSpec("gpucellpool_expected_boot_seconds", G, "Boot time the policy plans with"),
    MetricSpec("gpucellpool_scale_down_stabilization_seconds", G, "Scale-down stabilisation "
               "window, in seconds"),
    MetricSpec("gpucellpool_last_scale_up_timestamp_seconds", G, "Unix time of the last "
               "increase of the desired count"),
    MetricSpec("gpucellpool_last_scale_down_timestamp_seconds", G, "Unix time of the last "
               "decrease of the desired count"),
    MetricSpec("gpucellpool_cells_created_total", C, "Cells requested from the provisioner"),
    MetricSpec("gpucellpool_cells_removed_total", C, "Cells removed, by cause", ("reason",)),
    MetricSpec("gpucellpool_evictions_total", C, "Pods evicted through the Eviction API while "
               "draining cells"),
    MetricSpec("gpucellpool_crd_drift_findings", G, "Differences between the served GPUCellPool "
               "CRD and this build's, by kind", ("kind",), per_pool=False),
)  # fmt: skip
BY_NAME: Mapping[str, MetricSpec] = {m.name: m for m in CATALOGUE}

# The policy's coarse phase of every detailed phase (gpucellpool_cells).
COARSE_PHASE: Mapping[CellPhase, str] = {
    **{p: "Booting" for p in CellPhase},
    CellPhase.READY: "Ready",
    CellPhase.DRAINING: "Draining",
    CellPhase.DELETING: "Draining",
    CellPhase.FAILED: "Failed",
}
COARSE_PHASES = ("Booting", "Ready", "Draining", "Failed")


def sample_names() -> frozenset[str]:
    """Every sample name the operator can expose (for checking dashboards and alerts)."""
    return frozenset(n for spec in CATALOGUE for n in spec.sample_names())


def _build(spec: MetricSpec, registry: CollectorRegistry) -> Gauge | Counter | Histogram:
    labels = (*POOL_LABELS, *spec.labels) if spec.per_pool else spec.labels
    if spec.kind is Kind.GAUGE:
        return Gauge(spec.name, spec.help, labels, registry=registry)
    if spec.kind is Kind.COUNTER:
        return Counter(spec.name, spec.help, labels, registry=registry)
    return Histogram(spec.name, spec.help, labels, buckets=spec.buckets, registry=registry)


def _drift_gauge(registry: CollectorRegistry) -> Gauge:
    """crdcheck's gauge (one definition), re-made if its per-registry cache went stale.

    crdcheck caches by ``id(registry)``; a new registry can reuse a collected one's id, and
    would then be handed a gauge registered elsewhere.
    """
    gauge = crdcheck.drift_gauge(registry)
    if not any(f.name == "gpucellpool_crd_drift_findings" for f in registry.collect()):
        crdcheck._GAUGES.pop(id(registry), None)
        gauge = crdcheck.drift_gauge(registry)
    return gauge


# The child a retired recorder hands out: every write is dropped.
_DISCARD = SimpleNamespace(**dict.fromkeys(("inc", "set", "observe"), lambda *_: None))


class OperatorMetrics:
    """All collectors of one operator process, on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.collectors: dict[str, Gauge | Counter | Histogram] = {}
        for spec in CATALOGUE:
            if spec.name == "gpucellpool_crd_drift_findings":
                self.collectors[spec.name] = _drift_gauge(registry)
            else:
                self.collectors[spec.name] = _build(spec, registry)
        self._pools: dict[tuple[str, str], PoolMetrics] = {}

    def pool(self, namespace: str, name: str) -> PoolMetrics:
        """The recorder of one pool (created, with counters at zero, on first use)."""
        key = (namespace, name)
        if key not in self._pools:
            self._pools[key] = PoolMetrics(self, namespace, name)
        return self._pools[key]

    def forget(self, namespace: str, name: str) -> None:
        """Remove every series of a deleted pool."""
        recorder = self._pools.pop((namespace, name), None)
        if recorder is not None:
            recorder.remove_all()

    def forget_all(self) -> None:
        """Remove every pool's series (call on losing leadership: a standby must not export
        stale values next to the new leader's). Cluster-wide series (CRD drift) stay."""
        for namespace, name in list(self._pools):
            self.forget(namespace, name)

    def record_crd_drift(self, counts: Mapping[str, int]) -> None:
        """Findings per kind of the last CRD drift check (kinds not given are set to 0)."""
        gauge = self.collectors["gpucellpool_crd_drift_findings"]
        assert isinstance(gauge, Gauge)
        for kind in crdcheck.FindingKind:
            gauge.labels(kind.value).set(counts.get(kind.value, 0))


class PoolMetrics:
    """Typed writes for one pool; remembers every child it made so ``forget`` is exact."""

    def __init__(self, owner: OperatorMetrics, namespace: str, name: str) -> None:
        self._owner, self._base = owner, (namespace, name)
        self._made: set[tuple[str, tuple[str, ...]]] = set()
        self._last_outcome: tuple[str, int] | None = None
        self._retired = False
        for counter in ("gpucell_reconcile_errors_total", "gpucellpool_cells_created_total",
                        "gpucellpool_evictions_total"):  # fmt: skip
            self._child(counter)
        for reason in SCRAPE_REASONS:
            self._child("gpucell_capacity_scrape_errors_total", reason)
        for reason in REMOVAL_REASONS:
            self._child("gpucellpool_cells_removed_total", reason)

    # -- plumbing ---------------------------------------------------------------------------

    def _child(self, name: str, *extra: str) -> Any:
        if self._retired:
            return _DISCARD
        labels = (*self._base, *extra)
        self._made.add((name, labels))
        return self._owner.collectors[name].labels(*labels)

    def _set(self, name: str, value: float, *extra: str) -> None:
        self._child(name, *extra).set(value)

    def _drop(self, name: str, *extra: str) -> None:
        labels = (*self._base, *extra)
        if (name, labels) in self._made:
            self._made.discard((name, labels))
            self._owner.collectors[name].remove(*labels)

    def remove_all(self) -> None:
        """Remove every series this recorder made and retire it (later writes are dropped)."""
        for name, labels in sorted(self._made):
            self._owner.collectors[name].remove(*labels)
        self._made.clear()
        self._retired = True

    # -- configuration ----------------------------------------------------------------------

    def record_limits(
        self, *, min_cells: int, max_cells: int, boot_seconds: float, stabilization_seconds: float
    ) -> None:
        """The bounds and timings the policy works with (alerts compare against them)."""
        self._set("gpucellpool_min_cells", min_cells)
        self._set("gpucellpool_max_cells", max_cells)
        self._set("gpucellpool_expected_boot_seconds", boot_seconds)
        self._set("gpucellpool_scale_down_stabilization_seconds", stabilization_seconds)

    # -- decisions --------------------------------------------------------------------------

    def record_decision(
        self,
        *,
        reason: str,
        desired: int,
        demand_cells: float,
        allocated_cells: float,
        pending_asks: int,
        unschedulable: int,
        oldest_pending_age_seconds: float,
        now: float,
    ) -> bool:
        """One pass's decision. Counted only when reason or desired changed; returns that."""
        previous = self._last_outcome
        for name in ("gpucell_cells_desired", "gpucellpool_desired_cells"):
            self._set(name, desired)
        self._set("gpucellpool_demand_cells", demand_cells)
        self._set("gpucellpool_allocated_cells", allocated_cells)
        self._set("gpucellpool_pending_gpu_asks", pending_asks)
        self._set("gpucellpool_unschedulable_pods", unschedulable)
        self._set("gpucellpool_oldest_pending_ask_age_seconds", oldest_pending_age_seconds)
        self._last_outcome = (reason, desired)
        if previous == self._last_outcome:
            return False
        scaled_up = previous is not None and desired > previous[1]  # what happened, not the name
        self._child("gpucellpool_scale_decisions_total", reason).inc()
        self._child("gpucell_scale_decisions_total", reason, str(scaled_up).lower()).inc()
        if previous is not None and desired > previous[1]:
            self._set("gpucellpool_last_scale_up_timestamp_seconds", now)
        elif previous is not None and desired < previous[1]:
            self._set("gpucellpool_last_scale_down_timestamp_seconds", now)
        return True

    def observe_decision_latency(self, seconds: float) -> None:
        """A pending pod's wait from first seen to the cell serving it being requested."""
        self._child("gpucellpool_decision_latency_seconds").observe(max(0.0, seconds))

    # -- cells ------------------------------------------------------------------------------

    def record_cells(self, counts: Mapping[CellPhase, int]) -> None:
        """Cells per detailed phase; every phase is written (0 when empty), both families."""
        coarse = dict.fromkeys(COARSE_PHASES, 0)
        for phase in CellPhase:
            n = counts.get(phase, 0)
            self._set("gpucell_cells", n, phase.value)
            coarse[COARSE_PHASE[phase]] += n
        for phase_name, n in coarse.items():
            self._set("gpucellpool_cells", n, phase_name)

    def cell_transition(self, from_phase: str, to_phase: str) -> None:
        self._child("gpucell_cell_transitions_total", from_phase, to_phase).inc()

    def cell_created(self) -> None:
        self._child("gpucellpool_cells_created_total").inc()

    def cell_ready(self, startup_seconds: float) -> None:
        """First Ready of a cell, ``startup_seconds`` after its creation."""
        for name in ("gpucell_cell_startup_seconds", "gpucellpool_cell_startup_seconds"):
            self._child(name).observe(max(0.0, startup_seconds))

    def cell_removed(self, reason: str) -> None:
        """A cell is gone; ``reason``: one of ``REMOVAL_REASONS`` (see status_metrics)."""
        self._child("gpucellpool_cells_removed_total", reason).inc()

    def evicted(self, pods: int = 1) -> None:
        self._child("gpucellpool_evictions_total").inc(pods)

    # -- signals ----------------------------------------------------------------------------

    def record_utilization(self, ratio: float | None, *, fresh: bool, age_seconds: float) -> None:
        """Utilisation and its freshness; an unknown ratio removes the series (never 0)."""
        self._set("gpucellpool_metrics_fresh", 1 if fresh else 0)
        self._set("gpucellpool_metrics_age_seconds", max(0.0, age_seconds))
        if ratio is None:
            self._drop("gpucellpool_utilization_ratio")
        else:
            self._set("gpucellpool_utilization_ratio", ratio)

    def record_reachable(self, reachable: bool) -> None:
        self._set("gpucell_workload_cluster_reachable", 1 if reachable else 0)

    def record_physical(self, *, held: int, free: int | None) -> None:
        """Whole GPUs held by the pool and free for it; ``free`` None (unknown) is removed."""
        self._set("gpucell_physical_gpus", held, "held")
        if free is None:
            self._drop("gpucell_physical_gpus", "free")
        else:
            self._set("gpucell_physical_gpus", free, "free")

    def record_capacity(
        self,
        *,
        devices: int | None,
        memory_bytes: Mapping[str, float] | None,
        compute_percent: Mapping[str, float] | None,
    ) -> None:
        """HAMi capacity by state (total/allocated/available); None removes, never stale."""
        if devices is None:
            self._drop("gpucell_capacity_gpu_devices")
        else:
            self._set("gpucell_capacity_gpu_devices", devices)
        self._states("gpucell_capacity_gpu_memory_bytes", memory_bytes)
        self._states("gpucell_capacity_gpu_compute_percent", compute_percent)

    def _states(self, name: str, values: Mapping[str, float] | None) -> None:
        for state in ("total", "allocated", "available"):
            if values is None or state not in values:
                self._drop(name, state)
            else:
                self._set(name, values[state], state)

    # -- errors -----------------------------------------------------------------------------

    def scrape_error(self, reason: str) -> None:
        """A failed read; ``reason`` is one of ``SCRAPE_REASONS``."""
        self._child("gpucell_capacity_scrape_errors_total", reason).inc()

    def reconcile_error(self) -> None:
        self._child("gpucell_reconcile_errors_total").inc()


def label_sets(registry: CollectorRegistry, names: Iterable[str]) -> list[dict[str, str]]:
    """The label sets of every sample of ``names`` in ``registry`` (tests and debugging)."""
    wanted = set(names)
    return [
        dict(sample.labels)
        for family in registry.collect()
        for sample in family.samples
        if sample.name in wanted
    ]


def exposed_names(registry: CollectorRegistry) -> Sequence[str]:
    """Sample names currently exposed by ``registry`` (without ``_created``)."""
    return sorted(
        {s.name for f in registry.collect() for s in f.samples if not s.name.endswith("_created")}
    )
