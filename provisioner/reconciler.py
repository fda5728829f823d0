"""One reconcile pass of one GPUCellPool: observe, decide (pure core), act, re-check, publish.

Why this module exists: this is the provisioner's shell. ``Reconciler.reconcile_once(key)`` is
the single entry point a watch-driven operator loop (or a test) calls; it keeps no state between
passes except a cache of workload-cluster clients, so a crash at any point is recovered by
simply calling it again: cells are rediscovered from live objects (the outer objects carry the
drain mark), creation is idempotent server-side apply of deterministic names, and dependents a
crash left behind are swept. Order of a pass:

1. read the pool; deletion -> ``pool_deletion`` (drain every cell, release the finalizer);
2. add the pool finalizer; connect to and probe the workload cluster (failure is state);
3. list the cells through the backend and run the cell state machine on each;
4. check the autoscaler's plan (``fsm.plan_check``: target, victims, physical bound; the
   rejections go to ``status.planRejections``) and plan membership (pure); a pool without
   autoscaling swaps or holds its victims in drain back-off (``drain_holds``);
   mark removals/replacements Draining on the outer object;
5. drive every draining cell one re-checked step at a time (the cells concurrently,
   ``drainer.drive_drains``); create new cells (concurrently, ``creator``);
6. sweep orphaned dependents and dead orphan Nodes; write status (rows, counts, conditions,
   physical and HAMi capacity, gathered by ``pass_summary``) through the subresource.

A pass that raises (anything but a lost 409 race) is counted on the pool's
``gpucell_reconcile_errors_total`` before the caller (the driver) sees it; failed capacity
reads and evictions are counted too, all through the ``metrics_port`` the shell is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpucellpool.api.clock import Clock
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.spec import Provisioner
from gpucellpool.api.status import CellPhase, CellStatus
from provisioner.backends.base import CellBackend, CellObjects, mark_draining
from provisioner.backends.clusterapi import ClusterAPIBackend
from provisioner.backends.swiftguest import SwiftGuestBackend
from provisioner.cached_reads import WorkloadReads
from provisioner.cells import observe_cell, sweep_orphan_nodes
from provisioner.creator import create_cells
from provisioner.drain_holds import hold_scale_down
from provisioner.drainer import drained_row, drive_drains
from provisioner.events import EventSink, KubeEventSink, announce_pass
from provisioner.fsm.drain import DrainCause
from provisioner.fsm.identity import POOL_FINALIZER
from provisioner.fsm.membership import MembershipLimits
from provisioner.fsm.rollout import template_hash
from provisioner.fsm.rows import tombstone
from provisioner.inventory import free_physical_gpus, read_capacity
from provisioner.kube import KINDS, Conflict, KubeApi, api_from_kubeconfig
from provisioner.metrics_port import NO_METRICS, ProvisionerMetrics, ProvisionerRecorder
from provisioner.outer_drain import HostSource, NodeGets, plan_for_pool
from provisioner.pass_summary import pass_summary
from provisioner.planning import (
    PlanInput,
    check_pool_plan,
    membership_limits,
    read_join_template,
    spend_release_guard,
    victims_running_pods,
)
from provisioner.planning import plan as plan_cells
from provisioner.pool_deletion import DeletionShell, delete_pool
from provisioner.rollout_shell import rollout_plan
from provisioner.rule_gate import PoolRules, RuleGate
from provisioner.status import (
    PassSummary,
    capacity_status,
    conditions,
    status_patch,
    write_status,
)
from provisioner.workload import ApiFactory, Reachability, WorkloadClients, WorkloadLive

BUSY_REQUEUE_S = 1.0
IDLE_REQUEUE_S = 30.0


@dataclass(frozen=True, slots=True)
class PoolKey:
    namespace: str
    name: str


OBSERVE_CONCURRENCY = 16  # cells observed at once in one pass


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    """``requeue_after_s``: when the pool wants to be looked at again; ``gone``: no pool."""

    requeue_after_s: float | None = None
    gone: bool = False
    ready: int = 0


class Reconciler:
    """The provisioner shell for every pool of one infrastructure cluster."""

    def __init__(
        self,
        infra: KubeApi,
        clock: Clock,
        workload_factory: ApiFactory = api_from_kubeconfig,
        backends: Mapping[Provisioner, CellBackend] | None = None,
        limits: MembershipLimits | None = None,
        events: EventSink | None = None,
        metrics: ProvisionerMetrics | None = None,
        rules: PoolRules | None = None,
        *,
        hosts: HostSource | None = None,
        workload_reads: WorkloadReads | None = None,
        workload_live: WorkloadLive | None = None,
    ) -> None:
        """``limits``: churn limits (in-flight cap, replacement backoff); defaults as the
        earlier implementation (2 in flight, 30 s doubling backoff, 5 failures per index).
        ``events``: where transitions are announced (default: Events in the pool's namespace).
        ``metrics``: where errors and evictions are counted (``OperatorMetrics``; default none).
        ``rules``: the admission rules re-run before anything is launched (``rule_gate``); the
        operator always passes them, None skips the re-check (tests of other parts).
        ``hosts``: where the cells' infrastructure Nodes are read (the operator's Node cache;
        default one GET per host per pass). ``workload_reads``: the operator's caches of each
        workload cluster, which answer the pass's gets there (``cached_reads``; default GETs).
        ``workload_live``: whether the operator's watch of a workload cluster is live, which
        stands in for most ``/version`` probes (``workload.PROBE_EVERY_S``; default: probe)."""
        self.gate = RuleGate(rules)
        self.infra = infra
        self.metrics: ProvisionerMetrics = metrics or NO_METRICS
        self.limits = limits or MembershipLimits()
        self.clock = clock
        self.events: EventSink = events or KubeEventSink(infra, clock)
        self.clients = WorkloadClients(
            infra, workload_factory, workload_reads, workload_live, clock.now
        )
        self.hosts: HostSource = hosts or NodeGets(infra)
        self.backends: Mapping[Provisioner, CellBackend] = backends or {
            Provisioner.SWIFT_GUEST: SwiftGuestBackend(infra),
            Provisioner.CLUSTER_API: ClusterAPIBackend(infra),
        }

    async def close(self) -> None:
        await self.clients.close()

    async def reconcile_once(self, key: PoolKey) -> ReconcileResult:
        """One pass. A write that lost an optimistic-concurrency race (409) ends the pass
        early; the next pass starts from fresh reads (every step is idempotent). The status
        write is a server-side apply of the provisioner's own fields (``write_status``): no
        precondition, so it does not lose a race to the autoscaler's status writes.
        Any other exception is counted as a reconcile error and re-raised. The recorder is
        taken once per pass: if leadership is lost meanwhile, its writes are dropped."""
        recorder = self.metrics.pool(key.namespace, key.name)
        try:
            return await self._pass(key, recorder)
        except Conflict:
            return ReconcileResult(requeue_after_s=BUSY_REQUEUE_S)
        except Exception:
            recorder.reconcile_error()
            raise

    async def _pass(self, key: PoolKey, recorder: ProvisionerRecorder) -> ReconcileResult:
        raw = await self.infra.get(KINDS["GPUCellPool"], key.namespace, key.name)
        if raw is None:
            return ReconcileResult(gone=True)
        pool = GPUCellPool.model_validate(raw)
        backend = self.backends[pool.spec.cell.provisioner]
        now = self.clock.now()
        if pool.metadata.deletion_timestamp is not None:
            shell = DeletionShell(self.infra, self.clients, self.events)
            link = await self._workload(pool)
            if await delete_pool(shell, pool, backend, link, now, recorder):
                return ReconcileResult(gone=True)
            return ReconcileResult(requeue_after_s=BUSY_REQUEUE_S)
        if breaches := await self.gate.breaches(raw):  # the webhook may have been bypassed
            await self.gate.refuse(self.infra, self.events, pool, breaches, now)
            return ReconcileResult(requeue_after_s=IDLE_REQUEUE_S)
        if POOL_FINALIZER not in pool.metadata.finalizers:
            finalizers = [*pool.metadata.finalizers, POOL_FINALIZER]
            patch = {
                "metadata": {
                    "resourceVersion": pool.metadata.resource_version,
                    "finalizers": finalizers,
                }
            }
            raw = await self.infra.patch(KINDS["GPUCellPool"], key.namespace, key.name, patch)
            pool = GPUCellPool.model_validate(raw)
        return await self._converge(pool, backend, now, recorder)

    async def _workload(self, pool: GPUCellPool) -> tuple[KubeApi | None, Reachability]:
        wc = pool.spec.workload_cluster
        link = await self.clients.connect(
            pool.metadata.namespace, wc.kubeconfig_secret_ref.name, wc.key
        )
        return (link.api if link.state.reachable else None), link.state

    async def _converge(
        self, pool: GPUCellPool, backend: CellBackend, now: float, recorder: ProvisionerRecorder
    ) -> ReconcileResult:
        workload, reach = await self._workload(pool)
        cells = await backend.list_cells(pool)
        prev = {r.name: r for r in pool.status.cells or []}
        rows = await self._observe(pool, backend, cells, prev, workload, now)
        outer = await plan_for_pool(self.hosts, pool, backend, cells, workload is not None)
        await self._mark(backend, cells, outer.drain, DrainCause.OUTER_NODE_DRAIN, now)
        join = await read_join_template(self.infra, pool)
        current_hash = template_hash(pool, join.digest)
        free = await free_physical_gpus(self.infra, pool, recorder)
        # An autoscaled pool's target and victims are the autoscaler's plan, checked here
        # against this pass's state (fsm.plan_check); other pools converge to their replicas.
        running = await victims_running_pods(pool, cells, rows, workload)
        checked = check_pool_plan(pool, cells, rows, free, now, running)
        desired = checked.target if checked is not None else pool.desired_floor()
        rollout = await rollout_plan(pool, cells, rows, current_hash, desired, workload, now)
        await self._mark(backend, cells, rollout.drain, DrainCause.ROLLING_UPDATE, now)
        plan = plan_cells(
            PlanInput(
                pool,
                cells,
                rows,
                prev,
                desired,
                current_hash,
                join,
                reachable=workload is not None,
                now=now,
                limits=membership_limits(pool, self.limits),
                creation_adjustment=rollout.creation_adjustment,
                free_gpus=free,
                checked=checked,
            )
        )
        if checked is None:  # the plan's held victims wait instead (no stand-in)
            plan = hold_scale_down(pool, cells, rows, plan, now)
        await self._mark(backend, cells, plan.remove, DrainCause.SCALE_DOWN, now)
        await self._mark(backend, cells, plan.replace, DrainCause.REPLACE_FAILED, now)
        leaving = [c for c in cells.values() if c.drain_cause]
        steps = await drive_drains(pool, leaving, backend, workload, now, recorder)
        for cell in leaving:  # the drains ran concurrently; rows in the cells' order
            previous = rows.get(cell.name) or prev.get(cell.name)
            rows[cell.name] = drained_row(pool, cell, previous, steps[cell.name], now)
        created = await create_cells(pool, backend, plan, join, current_hash, prev, now)
        await spend_release_guard(self.infra, self.events, pool, cells, plan)
        rows.update(created)
        await backend.sweep(pool, set(cells) | set(created))
        if workload is not None:
            await sweep_orphan_nodes(pool, workload, cells, now)
        hami = await read_capacity(workload, pool, rows.values(), desired, now, recorder)
        summary = pass_summary(
            reach, desired, plan, len(created), rollout, free, rows, hami=hami, outer=outer
        )
        summary = replace(summary, plan=checked)
        result = await self._publish(pool, rows, prev, summary, now)
        # A hold or a rejection that ends before the cadence does is looked at when it ends.
        return sooner(result, plan.requeue_after_s, checked.requeue_after_s if checked else None)

    async def _publish(
        self,
        pool: GPUCellPool,
        rows: dict[str, CellStatus],
        prev: dict[str, CellStatus],
        summary: PassSummary,
        now: float,
    ) -> ReconcileResult:
        """Keep Failed tombstones, compute conditions, write status; say when to come back."""
        for name, old in prev.items():
            if name not in rows and (kept := tombstone(old)) is not None:
                rows[name] = kept
        final = list(rows.values())
        conds = conditions(pool, final, summary, now)
        patch = status_patch(
            pool, final, conds, summary.desired, capacity_status(pool, final, summary)
        )
        written = await write_status(self.infra, pool, patch)
        await announce_pass(self.events, pool, prev, final, written)
        ready = sum(1 for r in final if r.phase is CellPhase.READY)
        busy = summary.created > 0 or ready != summary.desired
        busy = busy or any(r.phase is not CellPhase.READY for r in final)
        delay = BUSY_REQUEUE_S if busy else IDLE_REQUEUE_S
        return ReconcileResult(requeue_after_s=delay, ready=ready)

    async def _observe(
        self,
        pool: GPUCellPool,
        backend: CellBackend,
        cells: dict[str, CellObjects],
        prev: dict[str, CellStatus],
        workload: KubeApi | None,
        now: float,
    ) -> dict[str, CellStatus]:
        known = frozenset(c.uid for c in cells.values())
        live = [  # a draining cell's row is the drain's
            (name, cell)
            for name, cell in sorted(cells.items(), key=lambda kv: kv[1].index)
            if not cell.drain_cause
        ]
        # Cells are independent: their reads (Node, kubelet Lease) run concurrently, so a pass
        # costs about one round trip, not two per cell (scale-up latency grew with pool size).
        gate = asyncio.Semaphore(OBSERVE_CONCURRENCY)

        async def one(name: str, cell: CellObjects) -> CellStatus:
            async with gate:
                result = await observe_cell(
                    pool, backend, cell, prev.get(name), workload, known, now
                )
                return result.row

        observed = await asyncio.gather(*(one(name, cell) for name, cell in live))
        return {name: row for (name, _), row in zip(live, observed, strict=True)}

    async def _mark(
        self,
        backend: CellBackend,
        cells: dict[str, CellObjects],
        names: tuple[str, ...],
        cause: DrainCause,
        now: float,
    ) -> None:
        for name in names:
            cell = cells.get(name)
            if cell is not None:
                await mark_draining(backend.api, backend.outer_kind, cell, str(cause), now)


def sooner(result: ReconcileResult, *waits_s: float | None) -> ReconcileResult:
    """``result`` requeued at the earliest of its own delay and ``waits_s`` (None: no wait)."""
    known = [w for w in (result.requeue_after_s, *waits_s) if w is not None]
    if not known:
        return result
    return replace(result, requeue_after_s=max(min(known), 0.0))


__all__ = ["PoolKey", "ReconcileResult", "Reconciler", "membership_limits"]
