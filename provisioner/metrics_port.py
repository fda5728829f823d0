"""What the provisioner counts: a ``ProvisionerMetrics`` port and a null implementation.

Why this module exists: three of the operator's counters are about things only the provisioner
sees - a reconcile pass that failed (``gpucell_reconcile_errors_total``), a capacity read that
failed (``gpucell_capacity_scrape_errors_total``), a pod evicted while draining
(``gpucellpool_evictions_total``). The shell records them through this small Protocol, which
``gpucellpool.operator.metrics.OperatorMetrics`` satisfies as it is, so the provisioner never
imports ``prometheus_client`` and tests (or a run without metrics) pass ``NO_METRICS``.
"""

from __future__ import annotations

from typing import Protocol

SCRAPE_CAPACITY = "capacity"
"""``scrape_error`` reason: HAMi capacity of the Ready cells (a Node or its pods unreadable)."""
SCRAPE_INVENTORY = "inventory"
"""``scrape_error`` reason: the physical GPU ledger (SwiftGPUNodes, ResourceSlices/Claims)."""


class ProvisionerRecorder(Protocol):
    """The slice of ``gpucellpool.operator.metrics.PoolMetrics`` the provisioner writes."""

    def reconcile_error(self) -> None: ...

    def scrape_error(self, reason: str) -> None: ...

    def evicted(self, pods: int = 1) -> None: ...


class ProvisionerMetrics(Protocol):
    def pool(self, namespace: str, name: str) -> ProvisionerRecorder: ...


class _NullRecorder:
    def reconcile_error(self) -> None:
        return None

    def scrape_error(self, reason: str) -> None:
        return None

    def evicted(self, pods: int = 1) -> None:
        return None


class NullMetrics:
    """Counts nothing (tests, tools, a reconciler built without a registry)."""

    def pool(self, namespace: str, name: str) -> ProvisionerRecorder:
        return NULL_RECORDER


NULL_RECORDER: ProvisionerRecorder = _NullRecorder()
NO_METRICS: ProvisionerMetrics = NullMetrics()
