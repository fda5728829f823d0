"""The ports of the autoscaling loop: what it needs from the world, as Protocols.

Why this module exists: the loop (``autoscaler.loop``) is tested with in-memory fakes and run
with Kubernetes adapters (``gpucellpool.operator.adapters``); both sides implement exactly these
small interfaces, and neither imports the other's machinery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from autoscaler.pod_index import PodIndex
from autoscaler.policy.types import GPUUsage, MetricsHealth
from autoscaler.signals.hami_activity import ActivityReading
from gpucellpool.api.clock import Clock
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellPhase

JSON = dict[str, Any]
__all__ = ["Clock"]  # the one Clock protocol (gpucellpool.api.clock), named here for the loop


@dataclass(frozen=True, slots=True)
class WorkloadSnapshot:
    """What the workload cluster's caches hold right now."""

    synced: bool
    pods: Sequence[JSON] = ()
    nodes: Sequence[JSON] = ()
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    error: str = ""
    pod_index: PodIndex | None = None
    """``pods`` already indexed (shared by the cluster's pools); None: the loop indexes."""
    claims: Sequence[JSON] = ()
    """ResourceClaims (watched while a pool of the cluster uses HAMi's DRA mode)."""
    slices: Sequence[JSON] = ()
    """ResourceSlices (likewise)."""
    nodes_by_name: Mapping[str, JSON] | None = None
    """``nodes`` by name when the caches hold them so (a copy, not rebuilt per pool); None:
    the loop maps them."""


class WorkloadView(Protocol):
    def cluster_of(self, pool: GPUCellPool) -> object:
        """A hashable key of the pool's workload cluster (pools sharing it share the key)."""
        ...

    def identity(self, cluster: object) -> object:
        """Which workload cluster a ``cluster_of`` key reaches: equal for keys (Secrets) that
        reach the same cluster once that is known, the key itself until then. Pools are judged
        together (the expander, gangs) by this."""
        ...

    def snapshot(self, pool: GPUCellPool) -> WorkloadSnapshot: ...


class UsageSource(Protocol):
    async def usage(
        self, pool: GPUCellPool, nodes: Sequence[str]
    ) -> tuple[Mapping[str, tuple[GPUUsage, ...]] | None, MetricsHealth]:
        """Per-node GPU usage (None: use pod annotations) and its health."""
        ...


class ActivitySource(Protocol):
    async def activity(
        self, pool: GPUCellPool, nodes: Sequence[str], pods: Sequence[str]
    ) -> ActivityReading:
        """Measured use of ``nodes`` and of the pods ``namespace/name`` (HAMi monitor)."""
        ...


class PoolWriter(Protocol):
    async def apply_status(self, body: JSON) -> None: ...

    async def event(self, pool: GPUCellPool, reason: str, note: str, warning: bool) -> None: ...


class PoolRecorder(Protocol):
    """The slice of ``gpucellpool.operator.metrics.PoolMetrics`` the loop uses."""

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
    ) -> bool: ...

    def record_reachable(self, reachable: bool) -> None: ...

    def record_measured_use(
        self, available: bool, ratio: float | None, idle_pods: int | None, idle_cells: int | None
    ) -> None: ...

    def record_utilization(
        self, ratio: float | None, *, fresh: bool, age_seconds: float
    ) -> None: ...

    def observe_decision_latency(self, seconds: float) -> None: ...

    def record_pending(self, first_seen: Mapping[tuple[str, ...], float]) -> None: ...

    def record_limits(
        self, *, min_cells: int, max_cells: int, boot_seconds: float, stabilization_seconds: float
    ) -> None: ...

    def record_cells(self, counts: Mapping[CellPhase, int]) -> None: ...

    def scrape_error(self, reason: str) -> None: ...


class MetricsPort(Protocol):
    def pool(self, namespace: str, name: str) -> PoolRecorder: ...

    def observe_stage(self, stage: str, seconds: float) -> None:
        """An event-driven decision's stage (wait, decide, write_slot, write), all pools."""
        ...

    def forget(self, namespace: str, name: str) -> None: ...
