"""The autoscaling control loop: one asyncio task per pool, woken by watch events.

Why this module exists: it is the shell around the pure ``decide``. Per pool the one keyed runner
(``gpucellpool.runtime.runner``, whose semantics are documented there) waits for a
wake-up (a watch event on the pool itself, or a workload event routed to the pool by
``autoscaler.routing``) or its next timed decision (a tick, or, while the last decision holds,
``Decision.steady``'s ``until`` capped by a resync: ``loop_state.due``), debounces (a burst of pod
creations becomes one decision), backs off after a failure, and steps (``Autoscaler._step``):
builds the ``Observation`` from the caches (``autoscaler.loop_observe``, a module of its own:
what a decision sees is a separate job from when it runs), calls ``decide`` and publishes the
outcome (``autoscaler.explain``)
through the ``PoolWriter`` port: status, the ScalingActive condition, an Event when the reason
changes, metrics, and the policy memory. An event that left the decision's inputs unchanged decides
nothing (``Autoscaler._unchanged``), and status is written only when the outcome changed
(``autoscaler.loop_publish``). A pool's failure is logged and counted and never touches another
pool's task. Time comes only from the injected ``Clock`` (whose ``sleep`` a test can drive
virtually); nothing here imports a Kubernetes client.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

from autoscaler.explain import drifted
from autoscaler.loop_measure import record
from autoscaler.loop_observe import PoolObserver
from autoscaler.loop_ports import (
    ActivitySource,
    Clock,
    MetricsPort,
    PoolWriter,
    UsageSource,
    WorkloadSnapshot,
    WorkloadView,
)
from autoscaler.loop_publish import Publisher
from autoscaler.loop_state import (
    LoopSettings,
    PoolState,
    due,
    leads,
    record_metrics,
    replayed,
    runner_settings,
)
from autoscaler.observe import plan_feedback
from autoscaler.policy.config import policy_config_from_spec, pool_shape
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision
from autoscaler.policy_memory import stored_memory
from autoscaler.sharing import RivalBoard, sharing_facts
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.runtime.runner import KeyedRunner

__all__ = ["Autoscaler", "LoopSettings", "WorkloadSnapshot"]

JSON = dict[str, Any]
log = logging.getLogger(__name__)


def _key(pool: GPUCellPool) -> tuple[str, str]:
    return pool.metadata.namespace, pool.metadata.name


def _relevant(pool: GPUCellPool, raw: JSON) -> tuple[Any, ...]:
    """What, when changed on the pool object, should trigger a decision (not our own writes)."""
    status = raw.get("status") or {}
    cells = [(c.get("name"), c.get("phase")) for c in status.get("cells") or []]
    gone = pool.metadata.deletion_timestamp is not None
    return pool.metadata.generation, tuple(cells), gone, status.get("cellDeviceShape")


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
        activity: ActivitySource | None = None,
        *,
        owns: Callable[[tuple[str, str]], bool] = lambda _key: True,
        term_left: Callable[[], float] = lambda: math.inf,
    ) -> None:
        self.workload = workload
        self.clock = clock
        self.metrics = metrics
        self.settings = settings or LoopSettings()
        self.is_leader = is_leader
        self.pools: dict[tuple[str, str], PoolState] = {}
        self.publisher = Publisher(
            writer, self.settings, term_left, now=clock.now, stage=self._stage
        )
        # What each decision sees (usage: Prometheus; activity: the HAMi monitor's measured use).
        self.observer = PoolObserver(
            workload, usage, activity, metrics, self.settings.usage_timeout_s, self._leader
        )
        self.runner: KeyedRunner[tuple[str, str]] = KeyedRunner(
            self._step,
            clock,
            runner_settings(self.settings),
            owns,  # shard ownership: a pool another process owns is not decided here
            leading=self._leads if self.settings.leading_edge else lambda _key: False,
            name="autoscale",
            label="/".join,
            failure_message="decision failed",
        )

    @property
    def rivals(self) -> RivalBoard:
        """The expander's options, per workload cluster (the observer shares pending pods)."""
        return self.observer.rivals

    def _leader(self) -> bool:
        return self.is_leader()  # late-bound: ``is_leader`` may be replaced after construction

    @property
    def writer(self) -> PoolWriter:
        """Where outcomes are written (the publisher's port; replaceable, e.g. to count writes)."""
        return self.publisher.writer

    @writer.setter
    def writer(self, value: PoolWriter) -> None:
        self.publisher.writer = value

    # -- inputs from the watches ----------------------------------------------------------

    def pool_event(self, kind: str, raw: JSON, pool: GPUCellPool | None = None) -> None:
        """A GPUCellPool watch event: start, update or stop that pool's task (``pool``: ``raw``
        already validated by the caller, which shares one validation among its consumers)."""
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if kind == "DELETED":
            gone = self.pools.get(key)
            self._stop(key)
            if gone is not None:  # its pending pods may now belong to another pool
                self.cluster_event(self._identity(gone.pool))
            return
        try:
            pool = GPUCellPool.model_validate(raw) if pool is None else pool
        except ValueError:
            log.warning("pool does not validate; ignored", extra={"pool": "/".join(key)})
            return
        self.rivals.put(key, self.workload.cluster_of(pool), pool)
        state = self.pools.get(key)
        if state is None:
            state = self.pools[key] = PoolState(pool, dict(raw.get("status") or {}))
            self.runner.add(key, wake=False, delay_s=self.settings.tick_s)
            self.cluster_event(self._identity(pool))  # the expander's options grew
            return
        before = _relevant(state.pool, {"status": state.raw_status})
        expander_before = sharing_facts(state.pool)
        status_before = state.raw_status
        state.pool, state.raw_status = pool, dict(raw.get("status") or {})
        if not self.is_leader():
            state.memory = None  # reload what the leader persisted when we take over
        if _relevant(pool, raw) != before:
            self.runner.wake(key)
        if plan_feedback(state.last_decision, status_before, state.raw_status):
            self.runner.wake(key)
        if sharing_facts(pool) != expander_before:  # priority, selection, shape: re-share
            self.cluster_event(self._identity(pool))
        if state.published is not None and drifted(state.published, state.raw_status):
            # Someone (a concurrent whole-list status write, a human) changed what we
            # published: write it again on the next pass.
            state.published = None
            self.runner.wake(key)

    def cluster_event(self, identity: object) -> None:
        """Wake every pool of that workload cluster, whichever Secret reaches it (``identity``
        as ``WorkloadView.identity`` gives it; cheap, no I/O)."""
        for key, state in self.pools.items():
            if self._state_identity(state) == identity:
                self.runner.wake(key)

    def _identity(self, pool: GPUCellPool) -> object:
        return self.workload.identity(self.workload.cluster_of(pool))

    def _state_identity(self, state: PoolState) -> object:
        """``_identity`` of the state's pool, its ``cluster_of`` key kept while the pool object
        is the same (``cluster_event`` asks it of every pool)."""
        if state.cluster_of is None or state.cluster_of[0] is not state.pool:
            state.cluster_of = (state.pool, self.workload.cluster_of(state.pool))
        return self.workload.identity(state.cluster_of[1])

    def wake(self, keys: Iterable[tuple[str, str]]) -> None:
        """Wake these pools: a workload event routed to them (``autoscaler.routing``)."""
        for key in keys:
            self.runner.wake(key)

    def wake_all(self, keys: Iterable[tuple[str, str]] | None = None) -> None:
        """A new term for these pools (None: every pool): re-read what the last holder
        persisted and publish afresh. Pools of a shard whose term did not change keep theirs."""
        for key in self.pools if keys is None else keys:
            state = self.pools.get(key)
            if state is not None:
                state.memory = state.published = state.event_reason = None
                self.runner.wake(key)

    # -- the per-pool step (the keyed runner schedules it) ----------------------------------

    async def _step(self, key: tuple[str, str], woken: bool) -> float | None:
        """Decide once (``skip_unchanged`` when an event woke it); the seconds until the next
        timed decision: ``due``, counted from the last decision, not from a skipped one."""
        state, served = self.pools.get(key), self.runner.keys.get(key)
        if state is None:
            return None
        if woken and served is not None:
            self._stage("wait", self.clock.now() - served.served_woken_s)
        await self.decide_once(key, skip_unchanged=woken)
        delay = due(state, self.settings) - self.clock.now()
        if not 0.0 < delay < float("inf"):
            delay = self.settings.tick_s if state.synced else self.settings.unsynced_retry_s
        return delay

    def _stage(self, stage: str, seconds: float) -> None:
        """One stage of a decision for ``gpucellpool_decision_stage_seconds`` (as leader)."""
        if self.metrics is not None and self.is_leader():
            self.metrics.observe_stage(stage, seconds)

    def _leads(self, key: tuple[str, str]) -> bool:
        state = self.pools.get(key)
        return state is not None and leads(state)

    def _stop(self, key: tuple[str, str]) -> None:
        self.pools.pop(key, None)
        self.rivals.remove(key)
        self.runner.remove(key)
        if self.metrics is not None:
            self.metrics.forget(*key)

    async def close(self) -> None:
        await self.runner.close()
        self.pools.clear()
        self.observer.rivals = RivalBoard()

    # -- one decision -----------------------------------------------------------------------

    async def decide_once(
        self, key: tuple[str, str], skip_unchanged: bool = False
    ) -> Decision | None:
        """Observe, decide and (when leader) publish for one pool; None when not applicable.

        ``skip_unchanged`` (an event woke the pool): return the last decision without deciding
        again when ``_unchanged`` says the decision inputs are the same.
        """
        state = self.pools.get(key)
        if state is None or not state.pool.spec.autoscaling.enabled:
            return None
        pool, now = state.pool, self.clock.now()
        if state.memory is None:
            state.memory = stored_memory(pool)
        snap = self.workload.snapshot(pool)
        state.synced = snap.synced
        obs = await self.observer.observe(state, snap, now)
        shape = pool_shape(pool)  # the provisioner's cellDeviceShape, the Ready cells, the spec
        leader = self.is_leader()
        inputs = (obs, state.memory, pool.metadata.generation, leader, state.share, shape)
        if skip_unchanged and self._unchanged(state, inputs, now):
            state.skipped += 1
            return state.last_decision
        config = policy_config_from_spec(pool.spec, shape)
        state.memory = memory = replayed(state, state.memory, now, self.settings.tick_s)
        decision = decide(obs, memory, config, now)
        self._stage("decide", self.clock.now() - now)
        state.decisions += 1
        state.last_decision = decision
        if self.is_leader():
            # Memory is committed only once the decision is published: a failed write must
            # not leave the policy believing it scaled when nobody was told.
            reachable = obs.workload_cluster_reachable
            await self.publisher.publish(state, decision, reachable, now, self.is_leader)
            if self.metrics is not None and self.is_leader():  # not if deposed meanwhile
                recorder = self.metrics.pool(*_key(pool))
                state.latency_reported = record_metrics(recorder, state, decision, obs, now)
                record(recorder, state.measured)
        state.memory = decision.memory
        # What the next decision would start from, were nothing to change but the time.
        state.last_inputs, state.decided_at = (obs, decision.memory, *inputs[2:]), now
        state.steady, state.steady_memory = decision.steady, decision.memory
        return decision

    def _unchanged(self, state: PoolState, inputs: tuple[Any, ...], now: float) -> bool:
        """Whether an event-driven decision now would only re-run the last one a moment later.

        ``decide`` is a pure function of (observation, memory, config, now). When the
        observation, the memory it left, the spec generation and leadership are all unchanged,
        deciding again differs from the last decision only by ``now``: the time-based rules
        (stabilisation, delays, cooldowns) and the memory's samples. Without events those run
        at ``due`` (a tick after the last decision, or the held decision's ``steady.until`` /
        resync), so skipping is allowed only before that instant (``_step`` counts it from the
        last decision, so a stream of no-op events cannot starve those rules; the samples of
        the ticks skipped are replayed by ``replayed``), and never while something is left to
        publish (``published`` reset by drift or a takeover).
        """
        return (
            state.last_inputs == inputs
            and now < due(state, self.settings)
            and (state.published is not None or not self.is_leader())
        )
