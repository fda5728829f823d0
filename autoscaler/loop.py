"""The autoscaling control loop: one asyncio task per pool, woken by watch events.

Why this module exists: it is the shell around the pure ``decide``. Per pool one task waits for
a wake-up (a watch event on the pool's workload cluster or on the pool itself) or the periodic
tick, debounces (a burst of pod creations becomes one decision), builds the ``Observation``
from the caches (``autoscaler.observe``), calls ``decide`` and publishes the outcome
(``autoscaler.explain``) through the ``PoolWriter`` port: status, the ScalingActive condition, an
Event when the reason changes, metrics, and the policy memory. A pool's failure is logged and
counted and never touches another pool's task. Time comes only from the injected ``Clock``
(whose ``sleep`` a test can drive virtually); nothing here imports a Kubernetes client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoscaler.explain import (
    MEMORY_ANNOTATION,
    Outcome,
    carry_victims,
    decode_memory,
    drifted,
    encode_memory,
    note,
    outcome,
    status_apply_body,
)
from autoscaler.loop_ports import (
    Clock,
    MetricsPort,
    PoolWriter,
    UsageSource,
    WorkloadSnapshot,
    WorkloadView,
)
from autoscaler.observe import (
    CellInputs,
    cells_for_pool,
    counts_as_demand,
    index_pods,
    nodes_to_read,
    observation,
    pending_for_pool,
    remember_first_seen,
    utilisation,
    with_requested,
)
from autoscaler.policy.config import policy_config_from_spec
from autoscaler.policy.decide import decide
from autoscaler.policy.types import (
    CellState,
    Decision,
    MetricsHealth,
    Observation,
    PolicyMemory,
    Reason,
)
from gpucellpool.api.pool import GPUCellPool

__all__ = ["Autoscaler", "LoopSettings", "WorkloadSnapshot"]

JSON = dict[str, Any]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoopSettings:
    debounce_s: float = 0.15
    """Quiet time that ends a burst of watch events (one decision for the whole burst)."""
    max_debounce_s: float = 1.0
    """Upper bound of the trailing debounce, so a steady stream of events cannot starve."""
    tick_s: float = 10.0
    """Time-based rules (stabilisation, delays) need a decision even when nothing changes."""
    memory_persist_s: float = 30.0
    """How often unchanged memory is written back; a restart loses at most this much."""
    usage_timeout_s: float = 5.0
    """Bound on a Prometheus read inside a decision."""


@dataclass(slots=True)
class PoolState:
    pool: GPUCellPool
    raw_status: JSON
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    memory: PolicyMemory | None = None
    first_seen: dict[str, float] = field(default_factory=dict)
    published: Outcome | None = None
    event_reason: str | None = None  # the reason of the last Event posted
    latency_reported: set[str] = field(default_factory=set)  # pods whose wait was observed
    memory_written_at: float = float("-inf")
    decisions: int = 0
    errors: int = 0
    last_decision: Decision | None = None


def _key(pool: GPUCellPool) -> tuple[str, str]:
    return pool.metadata.namespace, pool.metadata.name


def _relevant(pool: GPUCellPool, raw: JSON) -> tuple[Any, ...]:
    """What, when changed on the pool object, should trigger a decision (not our own writes)."""
    status = raw.get("status") or {}
    cells = [(c.get("name"), c.get("phase")) for c in status.get("cells") or []]
    return pool.metadata.generation, tuple(cells), pool.metadata.deletion_timestamp is not None


class Autoscaler:
    """Every pool's decision task. ``is_leader`` gates every write."""

    def __init__(
        self,
        workload: WorkloadView,
        writer: PoolWriter,
        clock: Clock,
        metrics: MetricsPort | None = None,
        usage: UsageSource | None = None,
        settings: LoopSettings | None = None,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.workload = workload
        self.writer = writer
        self.clock = clock
        self.metrics = metrics
        self.usage = usage
        self.settings = settings or LoopSettings()
        self.is_leader = is_leader
        self.pools: dict[tuple[str, str], PoolState] = {}

    # -- inputs from the watches ----------------------------------------------------------

    def pool_event(self, kind: str, raw: JSON) -> None:
        """A GPUCellPool watch event: start, update or stop that pool's task."""
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if kind == "DELETED":
            self._stop(key)
            return
        try:
            pool = GPUCellPool.model_validate(raw)
        except ValueError:
            log.warning("pool does not validate; ignored", extra={"pool": "/".join(key)})
            return
        state = self.pools.get(key)
        if state is None:
            state = self.pools[key] = PoolState(pool, dict(raw.get("status") or {}))
            state.task = asyncio.create_task(
                self._run_pool(key), name=f"autoscale:{key[0]}/{key[1]}"
            )
            state.wake.set()
            return
        before = _relevant(state.pool, {"status": state.raw_status})
        state.pool, state.raw_status = pool, dict(raw.get("status") or {})
        if not self.is_leader():
            state.memory = None  # reload what the leader persisted when we take over
        if _relevant(pool, raw) != before:
            state.wake.set()
        if state.published is not None and drifted(state.published, state.raw_status):
            # Someone (a concurrent whole-list status write, a human) changed what we
            # published: write it again on the next pass.
            state.published = None
            state.wake.set()

    def cluster_event(self, cluster: object) -> None:
        """A workload watch event: wake the pools of that cluster (cheap; no I/O)."""
        for state in self.pools.values():
            if self.workload.cluster_of(state.pool) == cluster:
                state.wake.set()

    def wake_all(self) -> None:
        for state in self.pools.values():
            state.memory = None
            state.published = None
            state.event_reason = None
            state.wake.set()

    # -- the per-pool task ------------------------------------------------------------------

    async def _wait(self, state: PoolState) -> None:
        """Until woken or the tick elapses, then the debounce."""
        waiter = asyncio.ensure_future(state.wake.wait())
        ticker = asyncio.ensure_future(self.clock.sleep(self.settings.tick_s))
        try:
            await asyncio.wait({waiter, ticker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            ticker.cancel()
        if not state.wake.is_set():
            return  # the tick
        # Trailing debounce: decide once events have been quiet for ``debounce_s``, but never
        # later than ``max_debounce_s`` after the first one (a steady stream must not starve).
        first = self.clock.now()
        while True:
            state.wake.clear()
            await self.clock.sleep(self.settings.debounce_s)
            if not state.wake.is_set() or self.clock.now() - first >= self.settings.max_debounce_s:
                break
        state.wake.clear()

    async def _run_pool(self, key: tuple[str, str]) -> None:
        while True:
            state = self.pools.get(key)
            if state is None:
                return
            await self._wait(state)
            try:
                await self.decide_once(key)
            except asyncio.CancelledError:
                raise
            except Exception:  # one pool's failure never stops the others (or itself)
                state.errors += 1
                log.exception("decision failed", extra={"pool": "/".join(key)})

    def _stop(self, key: tuple[str, str]) -> None:
        state = self.pools.pop(key, None)
        if state is not None and state.task is not None:
            state.task.cancel()
        if self.metrics is not None:
            self.metrics.forget(*key)

    async def close(self) -> None:
        tasks = [s.task for s in self.pools.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.pools.clear()

    # -- one decision -----------------------------------------------------------------------

    async def decide_once(self, key: tuple[str, str]) -> Decision | None:
        """Observe, decide and (when leader) publish for one pool; None when not applicable."""
        state = self.pools.get(key)
        if state is None or not state.pool.spec.autoscaling.enabled:
            return None
        pool, now = state.pool, self.clock.now()
        if state.memory is None:
            state.memory = decode_memory(pool.metadata.annotations.get(MEMORY_ANNOTATION))
        snap = self.workload.snapshot(pool)
        obs = await self._observe(state, snap, now)
        config = policy_config_from_spec(pool.spec)
        decision = decide(obs, state.memory, config, now)
        state.decisions += 1
        state.last_decision = decision
        if self.is_leader():
            # Memory is committed only once the decision is published: a failed write must
            # not leave the policy believing it scaled when nobody was told.
            await self._publish(state, decision, obs.workload_cluster_reachable, now)
            self._record(state, decision, obs, now)
        state.memory = decision.memory
        return decision

    async def _observe(self, state: PoolState, snap: WorkloadSnapshot, now: float) -> Observation:
        pool = state.pool
        if not snap.synced:
            cells = cells_for_pool(pool, _empty_inputs(pool), now)[0]
            stale = MetricsHealth(False, 0.0, snap.error or "workload caches not synced")
            return observation((), cells, (), stale, False)
        selection, ns_labels = pool.spec.autoscaling.demand, snap.namespace_labels
        index = snap.pod_index or index_pods(snap.pods)
        uids = [
            _meta(p, "uid")
            for p in index.unbound
            if counts_as_demand(p, selection, ns_labels.get(_meta(p, "namespace")))
        ]
        state.first_seen = remember_first_seen(state.first_seen, uids, now)
        pending, bad = pending_for_pool(pool, index.unbound, ns_labels, state.first_seen)
        for name, error in bad:
            log.info("pending pod skipped: %s", error, extra={"pod": name})
        nodes = {str((n.get("metadata") or {}).get("name")): n for n in snap.nodes}
        prom_usage, health = None, MetricsHealth(True, 0.0, "HAMi pod annotations")
        names: list[str] = []
        if self.usage is not None and pool.spec.autoscaling.prometheus is not None:
            # Only cells HAMi can report: a booting cell has no Node (or no HAMi registration)
            # yet and a drained cell's Node is gone, so their missing series are expected.
            grace = pool.spec.autoscaling.prometheus.stale_after.seconds
            names = nodes_to_read(pool, nodes, now, grace)
            try:
                async with asyncio.timeout(self.settings.usage_timeout_s):
                    prom_usage, health = await self.usage.usage(pool, names)
            except TimeoutError:
                health = MetricsHealth(False, 0.0, "Prometheus read timed out")
                prom_usage = {}
        shape = policy_config_from_spec(pool.spec).shape
        asked = frozenset(names) if prom_usage is not None else None
        inputs = CellInputs(shape, nodes, index.by_node, prom_usage, asked)
        cells, unknown = cells_for_pool(pool, inputs, now)
        since = state.memory.last_scale_up_at if state.memory else None
        victims = self._victims(state)
        cells = with_requested(cells, self._requested(state), since or now, victims)
        leaving = {c.name for c in cells if c.state is CellState.DRAINING}
        unknown = [name for name in unknown if name not in leaving]  # going: no need to know
        return observation(pending, cells, unknown, health, True)

    @staticmethod
    def _victims(state: PoolState) -> tuple[str, ...]:
        """The cells our scale-down in force chose (the provisioner drains exactly those)."""
        if state.published is not None:
            return state.published.victims if state.published.act else ()
        last = state.raw_status.get("lastDecision") or {}
        victims = last.get("victims") if last.get("act") else None
        return tuple(str(v) for v in victims) if isinstance(victims, list) else ()

    @staticmethod
    def _requested(state: PoolState) -> int:
        """The target the provisioner is working toward (ours once we have acted)."""
        if state.published is not None and state.published.act:
            return state.published.desired
        value = state.raw_status.get("desiredReplicas")
        return value if isinstance(value, int) else 0

    async def _publish(
        self, state: PoolState, decision: Decision, reachable: bool, now: float
    ) -> None:
        pool = state.pool
        out = carry_victims(outcome(decision, reachable), state.published)
        changed = out != state.published
        if changed:
            if state.event_reason is None:  # after a restart or takeover: what status says,
                # read before our write (its watch event may update raw_status meanwhile)
                state.event_reason = str((state.raw_status.get("lastDecision") or {}).get("reason"))
            await self.writer.apply_status(status_apply_body(pool, out, state.raw_status, now))
            state.published = out
            if state.event_reason != out.reason:
                await self.writer.event(pool, out.reason, note(out), not reachable)
                state.event_reason = out.reason
        if changed or now - state.memory_written_at >= self.settings.memory_persist_s:
            await self.writer.annotate(pool, MEMORY_ANNOTATION, encode_memory(decision.memory))
            state.memory_written_at = now

    def _record(self, state: PoolState, decision: Decision, obs: Observation, now: float) -> None:
        if self.metrics is None:
            return
        recorder = self.metrics.pool(*_key(state.pool))
        oldest = min(state.first_seen.values(), default=now)
        recorder.record_decision(
            reason=decision.reason.value,
            desired=decision.desired_replicas,
            demand_cells=float(decision.cells_needed),
            allocated_cells=float(len(state.pool.status.cells or [])),
            pending_asks=decision.pending_asks,
            unschedulable=len(decision.unschedulable),
            oldest_pending_age_seconds=max(0.0, now - oldest),
            now=now,
        )
        recorder.record_reachable(obs.workload_cluster_reachable)
        config = policy_config_from_spec(state.pool.spec)
        recorder.record_limits(
            min_cells=config.min_replicas,
            max_cells=config.max_replicas,
            boot_seconds=config.boot_seconds,
            stabilization_seconds=config.scale_down.stabilization_window_seconds,
        )
        recorder.record_cells(Counter(c.phase for c in state.pool.status.cells or []))
        shape = config.shape
        ratio = utilisation(obs.cells, shape) if obs.metrics.fresh else None
        recorder.record_utilization(
            ratio, fresh=obs.metrics.fresh, age_seconds=obs.metrics.age_seconds
        )
        if decision.reason is Reason.SCALED_UP and decision.act:
            # Each pending pod's wait until capacity for it was requested, counted once.
            for pod in obs.pending:
                if pod.key not in state.latency_reported:
                    recorder.observe_decision_latency(now - pod.first_seen)
            state.latency_reported = {p.key for p in obs.pending}


def _meta(obj: JSON, field_name: str) -> str:
    return str((obj.get("metadata") or {}).get(field_name, ""))


def _empty_inputs(pool: GPUCellPool) -> CellInputs:
    return CellInputs(policy_config_from_spec(pool.spec).shape, {}, {}, None)
