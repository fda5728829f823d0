"""The operator's Prometheus metrics: one catalogue of names, and a typed per-pool recorder.

Why this module exists: "why did it scale?" must have an answer in Grafana, and alerts and
dashboards can only be as good as the series behind them. The names, types and HELP texts are
in ``gpucellpool.api.metric_catalogue``. The recorder here (``OperatorMetrics`` / ``PoolMetrics``)
is the small typed API the control loop and the provisioner call; it writes onto a registry
passed in (never the global one), so tests and several operators in one process do not collide.

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

from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpucellpool.api.metric_catalogue import (
    CATALOGUE,
    COARSE_PHASE,
    COARSE_PHASES,
    PENDING_SERIES_CAP,
    POOL_LABELS,
    REMOVAL_REASONS,
    SCRAPE_REASONS,
    SPARES_CANCELLED,
    Kind,
    MetricSpec,
)
from gpucellpool.api.status import CellPhase
from gpucellpool.operator import crdcheck


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

    def observe_stage(self, stage: str, seconds: float) -> None:
        """One stage of an event-driven decision (``DECISION_STAGES``), all pools together."""
        histogram = self.collectors["gpucellpool_decision_stage_seconds"]
        assert isinstance(histogram, Histogram)
        histogram.labels(stage).observe(max(0.0, seconds))

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
        elif previous is not None and desired < previous[1] and reason != SPARES_CANCELLED:
            # spares that never ran a pod, given up, are not a scale-down of cells that served
            self._set("gpucellpool_last_scale_down_timestamp_seconds", now)
        return True

    def record_pending(self, first_seen: Mapping[tuple[str, ...], float]) -> None:
        """The pool's pending pods: ``PENDING_LABELS`` values -> unix time first seen pending.

        Exactly these series remain (a pod no longer given is removed); past
        ``PENDING_SERIES_CAP`` the pods seen last are left out, so the longest waits stay.
        """
        name = "gpucellpool_pending_pod_first_seen_timestamp_seconds"
        oldest = sorted(first_seen.items(), key=lambda item: (item[1], item[0]))
        kept = dict(oldest[:PENDING_SERIES_CAP])
        base = len(self._base)
        for made, labels in list(self._made):
            if made == name and labels[base:] not in kept:
                self._drop(name, *labels[base:])
        for labels, seconds in kept.items():
            self._set(name, seconds, *labels)

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

    def record_measured_use(
        self, available: bool, ratio: float | None, idle_pods: int | None, idle_cells: int | None
    ) -> None:
        """Measured use (HAMi monitor); unknown values remove their series (never 0)."""
        self._set("gpucellpool_metrics_available", 1 if available else 0)
        for name, value in (
            ("gpucellpool_measured_utilization_ratio", ratio),
            ("gpucellpool_idle_pods", idle_pods),
            ("gpucellpool_idle_cells", idle_cells),
        ):
            if value is None:
                self._drop(name)
            else:
                self._set(name, value)

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
