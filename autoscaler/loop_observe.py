"""What one pool looks like now: the ``Observation`` the loop hands to ``decide``.

Why this module exists: the loop (``autoscaler.loop``) schedules decisions; what a decision sees
is a separate job with its own inputs. ``PoolObserver.observe`` reads the workload caches'
snapshot (the pool's own unbound pods, found through the label index; their share against the
rival pools of the same workload cluster), the Prometheus usage of the cells HAMi can report
(one bounded read, a failure counted as a scrape error) and the HAMi monitor's measured use
(``autoscaler.loop_measure``), and assembles them with the pure helpers of
``autoscaler.observe``. Its only memory is the pool's ``PoolState`` (first-seen times, parsed
pods, the share, the measured use) and the rivals board; no Kubernetes client, no clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.loop_measure import measure
from autoscaler.loop_ports import (
    ActivitySource,
    MetricsPort,
    UsageSource,
    WorkloadSnapshot,
    WorkloadView,
)
from autoscaler.loop_publish import requested_target, victims_in_force
from autoscaler.loop_state import PoolState
from autoscaler.observe import (
    CellInputs,
    cell_nodes,
    cells_for_pool,
    free_gpus_for_new_cells,
    nodes_to_read,
    observation,
    refused_victims,
    with_requested,
)
from autoscaler.pod_index import PodIndex, demand_candidates, index_pods
from autoscaler.policy.config import pool_shape
from autoscaler.policy.expander import PoolShare
from autoscaler.policy.pool_demand import (
    claim_inputs,
    counts_as_demand,
    pending_for_pool,
    remember_first_seen,
)
from autoscaler.policy.types import (
    CellState,
    CellView,
    GPUUsage,
    MetricsHealth,
    Observation,
    PendingPod,
)
from autoscaler.sharing import RivalBoard, share_pending
from gpucellpool.api.pool import GPUCellPool

JSON = dict[str, Any]
log = logging.getLogger(__name__)
# gpucell_capacity_scrape_errors_total's reason for a failed Prometheus usage read.
DEMAND_READ = "demand"


@dataclass
class PoolObserver:
    """Builds each pool's ``Observation``. ``is_leader`` gates the scrape-error count (a
    follower observes too, but only the leader's metrics are served)."""

    workload: WorkloadView
    usage: UsageSource | None
    activity: ActivitySource | None
    metrics: MetricsPort | None
    usage_timeout_s: float
    is_leader: Callable[[], bool]
    rivals: RivalBoard = field(default_factory=RivalBoard)  # the expander's options

    async def observe(self, state: PoolState, snap: WorkloadSnapshot, now: float) -> Observation:
        pool = state.pool
        if not snap.synced:
            # As below: the cells asked for count before their rows exist, or the hold this
            # observation leads to would publish the count before our own scale-up.
            cells = _as_requested(state, cells_for_pool(pool, _empty_inputs(pool), now)[0], now)
            stale = MetricsHealth(False, 0.0, snap.error or "workload caches not synced")
            state.share = PoolShare()
            return observation((), cells, (), stale, False)
        index = snap.pod_index or index_pods(snap.pods)
        shape = pool_shape(pool).shape
        claims, claim_use = claim_inputs(pool, snap.claims, snap.slices, shape.gpus)
        nodes = snap.nodes_by_name
        if nodes is None:
            nodes = {str((n.get("metadata") or {}).get("name")): n for n in snap.nodes}
        pending = self._pending(state, snap, index, claims, now, cell_nodes(pool, nodes))
        names, prom_usage, health = await self._read_usage(pool, nodes, now)
        asked = frozenset(names) if prom_usage is not None else None
        state.pod_changes.see(index.by_node, names, now)
        state.pod_changes.forget_except(names)
        superseded = state.pod_changes.superseded(names, now, health.age_seconds)
        inputs = CellInputs(shape, nodes, index.by_node, prom_usage, asked, claim_use, superseded)
        cells, unknown = cells_for_pool(pool, inputs, now)
        cells = _as_requested(state, cells, now)
        leaving = {c.name for c in cells if c.state is CellState.DRAINING}
        unknown = [name for name in unknown if name not in leaving]  # going: no need to know
        use = await measure(self.activity, pool, names, index.by_node, health, self.usage_timeout_s)
        state.measured = use
        free = free_gpus_for_new_cells(pool, cells, shape.gpus)  # the plan's physical bound
        obs = observation(pending, cells, unknown, health, True, free)
        return replace(obs, idle_cells=use.idle_for_policy(pool), protected=refused_victims(pool))

    def _pending(
        self,
        state: PoolState,
        snap: WorkloadSnapshot,
        index: PodIndex,
        claims: Mapping[str, JSON] | None,
        now: float,
        on_cells: frozenset[str],
    ) -> tuple[PendingPod, ...]:
        """The pool's pending pods, after its share against the rival pools (``state.share``)."""
        pool = state.pool
        selection, ns_labels = pool.spec.autoscaling.demand, snap.namespace_labels
        # The pool's own unbound pods, found once (through the label index when its selection
        # has matchLabels); everything below looks only at these.
        mine = [
            p
            for p in demand_candidates(index, selection.pod_selector)
            if counts_as_demand(p, selection, ns_labels.get(_meta(p, "namespace")))
        ]
        state.first_seen = remember_first_seen(
            state.first_seen, [_meta(p, "uid") for p in mine], now
        )
        parsed = {u: v for u, v in state.parsed.items() if u in state.first_seen}  # still here
        state.parsed = parsed
        seen = state.first_seen
        pending, bad = pending_for_pool(pool, mine, ns_labels, seen, claims, parsed, now, on_cells)
        for name, error in bad:
            log.info("pending pod skipped: %s", error, extra={"pod": name})
        # One pending pod, one pool: the others of this cluster compute the same answer.
        rivals = self.rivals.rivals(self.workload.cluster_of(pool), self.workload.identity)
        state.share = share_pending(pool, pending, mine, ns_labels, rivals)
        return state.share.kept

    async def _read_usage(
        self, pool: GPUCellPool, nodes: Mapping[str, JSON], now: float
    ) -> tuple[list[str], Mapping[str, tuple[GPUUsage, ...]] | None, MetricsHealth]:
        """The Nodes asked about, their Prometheus usage (None: pods' annotations only) and its
        health; a failed read is counted as a scrape error."""
        if self.usage is None or pool.spec.autoscaling.prometheus is None:
            return [], None, MetricsHealth(True, 0.0, "HAMi pod annotations")
        # Only cells HAMi can report: a booting cell has no Node (or no HAMi registration)
        # yet and a drained cell's Node is gone, so their missing series are expected.
        grace = pool.spec.autoscaling.prometheus.stale_after.seconds
        names = nodes_to_read(pool, nodes, now, grace)
        try:
            async with asyncio.timeout(self.usage_timeout_s):
                usage, health = await self.usage.usage(pool, names)
        except TimeoutError:
            usage = {}
            health = MetricsHealth(False, 0.0, "Prometheus read timed out", read_failed=True)
        if health.read_failed and self.metrics is not None and self.is_leader():
            meta = pool.metadata
            self.metrics.pool(meta.namespace, meta.name).scrape_error(DEMAND_READ)
        return names, usage, health


def _meta(obj: JSON, field_name: str) -> str:
    return str((obj.get("metadata") or {}).get(field_name, ""))


def _empty_inputs(pool: GPUCellPool) -> CellInputs:
    return CellInputs(pool_shape(pool).shape, {}, {}, None)


def _as_requested(
    state: PoolState, cells: tuple[CellView, ...], now: float
) -> tuple[CellView, ...]:
    """``cells`` with the ones our target asked for (since our last scale-up) counted before
    their rows exist and the victims in force Draining (``observe.with_requested``)."""
    since = state.memory.last_scale_up_at if state.memory else None
    return with_requested(cells, requested_target(state), since or now, victims_in_force(state))
