"""The catalogue of the operator's Prometheus metrics: every name, type, label set and HELP.

Why this module exists: a metric's name, type, labels, unit and HELP text are written in one
place (``CATALOGUE``). The recorder (``gpucellpool.operator.metrics``) builds its collectors from
it, and the chart's alerts and the generated dashboards are checked against it, so a panel cannot
query a name the operator never exports. It holds data only: no registry, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from gpucellpool.api.status import CellPhase

POOL_LABELS = ("namespace", "pool")
STARTUP_BUCKETS = (30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1800.0)
REMOVAL_REASONS = ("Drained", "Failed", "Other")  # gpucellpool_cells_removed_total{reason}
# The decision reason for giving up hedged spare cells that never ran a pod (the policy's
# Reason.SPARES_CANCELLED): the desired count falls, but no cell that served is removed, so it
# does not move gpucellpool_last_scale_down_timestamp_seconds (GPUCellPoolScaleFlapping).
SPARES_CANCELLED = "SparesCancelled"
# gpucell_capacity_scrape_errors_total{reason}: HAMi capacity of Ready cells, the autoscaler's
# Prometheus usage read ("demand"), and the physical GPU ledger (SwiftGPUNodes / ResourceSlices;
# a reason the original did not have).
SCRAPE_REASONS = ("capacity", "demand", "inventory")
DECISION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# gpucellpool_decision_stage_seconds{stage}: an event-driven decision's path, in order.
DECISION_STAGES = ("wait", "decide", "write_slot", "write")
# gpucellpool_pending_pod_first_seen_timestamp_seconds: one series per pending pod (the pod and
# its ask as labels), so bounded by the pods waiting; past this many per pool the newest go
# unexported (the oldest waits are the demand a recording must not lose).
PENDING_SERIES_CAP = 2000
PENDING_LABELS = ("pod_namespace", "pod", "gpus", "memory_mib", "memory_percent", "cores_percent")


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
    MetricSpec("gpucellpool_pending_pod_first_seen_timestamp_seconds", G, "Unix time the "
               "operator first saw each pending GPU pod that counts for this pool, labelled with "
               "the pod and its per-GPU ask (memory_mib or memory_percent empty when not asked); "
               "gone once the pod stops pending; at most 2,000 per pool, the oldest kept",
               PENDING_LABELS),
    MetricSpec("gpucellpool_unschedulable_pods", G, "Pending GPU pods no fresh cell of this "
               "pool could host"),
    MetricSpec("gpucellpool_utilization_ratio", G, "Allocated fraction of the pool's Ready "
               "capacity, max over memory, cores and slots (0-1); absent while unknown"),
    MetricSpec("gpucellpool_metrics_fresh", G, "1 when the HAMi metrics behind utilisation are "
               "fresh; 0 freezes scale-down"),
    MetricSpec("gpucellpool_metrics_age_seconds", G, "Age of the stalest HAMi sample used, in "
               "seconds"),
    MetricSpec("gpucellpool_measured_utilization_ratio", G, "Measured GPU use of the pool's "
               "Ready cells: mean of HAMi's hami_host_gpu_utilization_ratio over their GPUs (0-1); "
               "absent while unmeasured or not fresh"),
    MetricSpec("gpucellpool_idle_pods", G, "GPU pods on Ready cells that launched no kernel "
               "within usageIdleWindow (HAMi monitor); absent while not fresh"),
    MetricSpec("gpucellpool_idle_cells", G, "Ready cells whose every pod is idle (scale-down "
               "candidates with scaleDownOn Usage); absent while not fresh"),
    MetricSpec("gpucellpool_metrics_available", G, "1 when the MetricsAvailable condition is "
               "True (allocation and measured use fresh); 0 freezes usage-driven scale-down"),
    MetricSpec("gpucellpool_cell_startup_seconds", H, "Cell creation to first Ready, in seconds",
               (), STARTUP_BUCKETS),
    MetricSpec("gpucellpool_expected_boot_seconds", G, "Boot time the policy plans with"),
    MetricSpec("gpucellpool_scale_down_stabilization_seconds", G, "Scale-down stabilisation "
               "window, in seconds"),
    MetricSpec("gpucellpool_last_scale_up_timestamp_seconds", G, "Unix time of the last "
               "increase of the desired count"),
    MetricSpec("gpucellpool_last_scale_down_timestamp_seconds", G, "Unix time of the last "
               "decrease of the desired count that removed cells which served (not spare boots "
               "given up: reason SparesCancelled)"),
    MetricSpec("gpucellpool_cells_created_total", C, "Cells requested from the provisioner"),
    MetricSpec("gpucellpool_cells_removed_total", C, "Cells removed, by cause", ("reason",)),
    MetricSpec("gpucellpool_evictions_total", C, "Pods evicted through the Eviction API while "
               "draining cells"),
    MetricSpec("gpucellpool_crd_drift_findings", G, "Differences between the served GPUCellPool "
               "CRD and this build's, by kind", ("kind",), per_pool=False),
    MetricSpec("gpucellpool_decision_stage_seconds", H, "Where an event-driven decision's time "
               "goes, all pools together, by stage: wait (a burst's first wake-up to the decision "
               "starting: debounce and queueing), decide (observe and decide), write_slot (waiting "
               "for a status write slot), write (the status apply sent to answered)", ("stage",),
               STAGE_BUCKETS, per_pool=False),
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
