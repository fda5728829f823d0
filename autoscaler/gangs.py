"""The ProvisioningRequest controller: serves Kueue's gangs in place of Cluster Autoscaler.

Why this module exists: Kueue's provisioning admission check creates a ProvisioningRequest
(``autoscaling.x-k8s.io/v1``) per gang in the workload cluster and admits the gang when the
request is Provisioned. This controller answers the two classes Cluster Autoscaler serves
(``check-capacity`` and ``best-effort-atomic-scale-up``; other classes are left to other
autoscalers) for the pools of that workload cluster:

1. Each pass reads the requests and their PodTemplates (``RequestSource``), oldest first.
2. A request not yet Provisioned goes to the first pool, by ``namespace/name``, whose demand
   selection matches the template's pods and whose fresh cell fits every member (a pool that
   fits no member is skipped); ``policy.gang.plan_gang`` plans it on that pool's cells as the
   loop last observed them, after the capacity already booked by older requests. While a
   selecting pool has not observed its cells yet (just created, or the operator just
   started) the request waits for a later pass rather than being told no pool selects it.
3. ``policy.provreq.judge`` sets the conditions as Cluster Autoscaler does; a Provisioned
   request is *booked* until BookingExpired: ``Bookings`` hands the loop placeholder pods for
   it (``autoscaler.gang_pods``) so one decision adds all of an atomic gang's cells.

Only the leader writes. What was written is remembered until the cache shows it, so a lagging
watch never makes a booked request look new.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from autoscaler.gang_pods import Booking, placed_consumers, with_bookings
from autoscaler.loop import Autoscaler
from autoscaler.loop_ports import WorkloadSnapshot, WorkloadView
from autoscaler.loop_state import PoolState
from autoscaler.pod_index import index_pods
from autoscaler.policy import gang, provreq
from autoscaler.policy.config import policy_config_from_spec, pool_shape
from autoscaler.policy.errors import AskError
from autoscaler.policy.expander import assign
from autoscaler.policy.pool_demand import selector_matches
from autoscaler.policy.types import Observation, PendingPod, PolicyMemory
from autoscaler.sharing import eligible, option_of
from gpucellpool.api.clock import Clock
from gpucellpool.api.pool import GPUCellPool

JSON = dict[str, Any]
log = logging.getLogger(__name__)
PoolKey = tuple[str, str]


class RequestSource(Protocol):
    """The workload clusters' ProvisioningRequests and PodTemplates, and the status writer."""

    def clusters(self) -> Sequence[object]:
        """Keys of the workload clusters whose request and template caches are synced."""
        ...

    def requests(self, cluster: object) -> Sequence[JSON]: ...

    def template(self, cluster: object, namespace: str, name: str) -> JSON | None: ...

    async def apply_status(self, cluster: object, body: JSON) -> None: ...


class Bookings:
    """Booked requests per workload cluster (by ``WorkloadView.identity``, so every Secret
    reaching the cluster sees them); the loop's view of them (``view``)."""

    def __init__(self) -> None:
        self.by_cluster: dict[object, tuple[Booking, ...]] = {}
        self.labels: dict[PoolKey, Mapping[str, str]] = {}  # booked pools' Node labels

    def set(self, cluster: object, bookings: Sequence[Booking]) -> set[PoolKey]:
        """Replace the cluster's bookings; the pools whose bookings changed."""
        old = self.by_cluster.get(cluster, ())
        self.by_cluster[cluster] = tuple(bookings)
        before = {(b.pool, b.key, b.until) for b in old}
        after = {(b.pool, b.key, b.until) for b in bookings}
        return {pool for pool, _, _ in before ^ after}

    def view(self, inner: WorkloadView, clock: Clock) -> BookedWorkloadView:
        return BookedWorkloadView(inner, self, clock)


class BookedWorkloadView:
    """A ``WorkloadView`` whose snapshots carry the booked requests (``gang_pods``)."""

    def __init__(self, inner: WorkloadView, bookings: Bookings, clock: Clock) -> None:
        self.inner, self.bookings, self.clock = inner, bookings, clock

    def cluster_of(self, pool: GPUCellPool) -> object:
        return self.inner.cluster_of(pool)

    def identity(self, cluster: object) -> object:
        return self.inner.identity(cluster)

    def snapshot(self, pool: GPUCellPool) -> WorkloadSnapshot:
        snap = self.inner.snapshot(pool)
        now = self.clock.now()
        booked = self.bookings.by_cluster.get(self.identity(self.cluster_of(pool)), ())
        held = [b for b in booked if now < b.until]
        scheduler = pool.spec.autoscaling.demand.scheduler_name
        labels = {b.pool: self.bookings.labels.get(b.pool, {}) for b in held}
        return with_bookings(snap, held, scheduler, labels)


@dataclass(frozen=True, slots=True)
class _Gang:
    request: provreq.Request
    pod_sets: tuple[gang.PodSet, ...]
    templates: tuple[tuple[Mapping[str, Any], int], ...]
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class _Held:
    """A booking made in this pass, with its members (packed first by younger requests)."""

    booking: Booking
    members: tuple[PendingPod, ...]


class GangController:
    """One task for every workload cluster's requests; woken by their watches or a tick."""

    def __init__(
        self,
        autoscaler: Autoscaler,
        source: RequestSource,
        bookings: Bookings,
        clock: Clock,
        tick_s: float = 5.0,
    ) -> None:
        self.autoscaler, self.source, self.bookings = autoscaler, source, bookings
        self.clock, self.tick_s = clock, tick_s
        self.woken = asyncio.Event()
        self.passes = 0
        # Our last write per request (namespace, name), with the uid it was written for
        self._written: dict[tuple[str, str], tuple[str, provreq.Verdict]] = {}

    def wake(self) -> None:
        self.woken.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_s):
                    await self.woken.wait()
            self.woken.clear()
            try:
                await self.pass_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad pass never stops the controller
                log.exception("provisioning request pass failed")

    async def pass_once(self) -> None:
        """Judge every served request of every synced cluster once; write what changed."""
        now = self.clock.now()
        listed: set[tuple[str, str]] = set()
        for cluster in self._served():
            booked: list[_Held] = []
            for raw in sorted(self.source.requests(cluster), key=_age):
                listed.add(_name(raw))
                await self._one(cluster, raw, booked, now)
            identity = self.autoscaler.workload.identity(cluster)
            changed = self.bookings.set(identity, [h.booking for h in booked])
            self.autoscaler.wake(changed)
        for gone in self._written.keys() - listed:  # deleted requests: nothing to remember
            del self._written[gone]
        self.passes += 1

    def _served(self) -> list[object]:
        """One synced connection per workload cluster: two Secrets reaching one cluster (one
        identity) show the same requests, which must be judged and booked once. The first
        Secret by key reads and writes them (its credential must be allowed to)."""
        workload = self.autoscaler.workload
        chosen: dict[object, object] = {}
        for cluster in sorted(self.source.clusters(), key=repr):
            chosen.setdefault(workload.identity(cluster), cluster)
        return list(chosen.values())

    async def _one(self, cluster: object, raw: JSON, booked: list[_Held], now: float) -> None:
        request = provreq.parse_request(raw)
        if isinstance(request, AskError):
            log.info("provisioning request skipped: %s: %s", request.field, request.message)
            return
        if request.class_name not in provreq.SERVED_CLASSES:
            return  # another autoscaler's class
        request = self._as_written(request)
        found = self._gang(cluster, request)
        if isinstance(found, str):
            verdict = provreq.judge(request, None, None, found, now)
        elif request.is_true(provreq.PROVISIONED):
            verdict = provreq.judge(request, None, None, "", now)
        else:
            plan, pool, why = self._plan(cluster, found, booked, now)
            if plan is None and why == _UNDECIDED:
                return  # answered once that pool has looked at its cells (a later pass)
            verdict = provreq.judge(request, plan, pool, why, now)
        if verdict.book and verdict.pool and not isinstance(found, str):
            namespace, _, name = verdict.pool.partition("/")
            until = verdict.booked_until or now
            booking = Booking(
                request.namespace,
                request.name,
                request.class_name,
                (namespace, name),
                found.templates,
                until,
            )
            placed = self._placed(booking)  # their use is on the cells already
            booked.append(_Held(booking, gang.members(found.pod_sets)[placed:]))
            self._pin(booking.pool)
        await self._write(cluster, request, verdict)

    def _placed(self, booking: Booking) -> int:
        """How many of the booking's members run already (bound pods consuming the request),
        as ``gang_pods.placeholders`` counts them: the rest are what the booking still holds."""
        state = self.autoscaler.pools.get(booking.pool)
        if state is None:
            return 0
        snap = self.autoscaler.workload.snapshot(state.pool)
        index = snap.pod_index or index_pods(snap.pods)
        return placed_consumers(index.by_node).get(booking.key, 0)

    def _pin(self, key: PoolKey) -> None:
        """Record the booked pool's Node labels, which pin its placeholders to it; for every
        booking, not only new ones: after a restart the bookings come from request status."""
        state = self.autoscaler.pools.get(key)
        if state is not None:
            labels = policy_config_from_spec(state.pool.spec).node_template.labels
            self.bookings.labels[key] = dict(labels)

    def _as_written(self, request: provreq.Request) -> provreq.Request:
        """The request with what we wrote last, until the cache shows that write (never for a
        request recreated under the same name: its uid differs)."""
        uid, mine = self._written.get((request.namespace, request.name), ("", None))
        if mine is None or uid != request.uid or provreq.unchanged(request, mine):
            self._written.pop((request.namespace, request.name), None)
            return request
        return replace(request, conditions=mine.conditions, details=dict(mine.details))

    async def _write(
        self, cluster: object, request: provreq.Request, verdict: provreq.Verdict
    ) -> None:
        if provreq.unchanged(request, verdict) or not self.autoscaler.is_leader():
            return
        try:
            await self.source.apply_status(cluster, provreq.status_body(request, verdict))
        except Exception as exc:  # retried on the next pass
            log.warning(
                "provisioning request status not written: %s",
                type(exc).__name__,
                extra={"request": request.key},
            )
            return
        self._written[(request.namespace, request.name)] = (request.uid, verdict)

    def _gang(self, cluster: object, request: provreq.Request) -> _Gang | str:
        """The request's pod sets from its PodTemplates, or why they cannot be read."""
        sets, templates = [], []
        labels: Mapping[str, str] = {}
        for i, (name, count) in enumerate(request.pod_sets):
            raw = self.source.template(cluster, request.namespace, name)
            if raw is None:
                return f"PodTemplate {request.namespace}/{name} not found"
            parsed = provreq.pod_set(request, i, raw)
            if isinstance(parsed, AskError):
                return f"{parsed.field}: {parsed.message}"
            body = raw.get("template") or {}
            labels = labels or ((body.get("metadata") or {}).get("labels") or {})
            sets.append(parsed)
            templates.append((body, count))
        return _Gang(request, tuple(sets), tuple(templates), labels)

    def _candidates(self, cluster: object, found: _Gang) -> Iterable[tuple[PoolKey, PoolState]]:
        workload = self.autoscaler.workload
        identity = workload.identity(cluster)
        for key in sorted(self.autoscaler.pools):
            state = self.autoscaler.pools[key]
            pool = state.pool
            if not eligible(pool):
                continue
            if workload.identity(workload.cluster_of(pool)) != identity:
                continue  # another workload cluster (any Secret reaching this one is fine)
            demand = pool.spec.autoscaling.demand
            if selector_matches(demand.pod_selector, found.labels):
                yield key, state

    def _plan(
        self, cluster: object, found: _Gang, booked: Sequence[_Held], now: float
    ) -> tuple[gang.GangPlan | None, str | None, str]:
        """The plan on the pool the expander picks among those that fit every member, its key,
        or why no pool does (with a permanent plan when a member fits no selecting pool)."""
        why = "no autoscaled pool of this workload cluster selects the pod templates' pods"
        unfit: gang.GangPlan | None = None
        undecided = False
        plans: dict[str, tuple[gang.GangPlan, GPUCellPool]] = {}
        for key, state in self._candidates(cluster, found):
            plan = self._plan_on(
                state, found, [m for h in booked if h.booking.pool == key for m in h.members], now
            )
            name = f"{key[0]}/{key[1]}"
            if plan is None:  # the pool has not observed its cells yet
                undecided = True
                continue
            if plan.reason == gang.MEMBER_UNFIT:
                why = f"no pool fits every member (pool {name}: {plan.message})"
                unfit = replace(plan, message=why)
                continue
            plans[name] = (plan, state.pool)
        if not plans:
            return (None, None, _UNDECIDED) if undecided else (unfit, None, why)
        chosen = _expander_choice(found, {k: p for k, (_, p) in plans.items()})
        return plans[chosen][0], chosen, ""

    @staticmethod
    def _plan_on(
        state: PoolState, found: _Gang, held: Sequence[PendingPod], now: float
    ) -> gang.GangPlan | None:
        """The gang's plan on one pool's cells as its loop last observed them, within the
        bounds ``decide`` will apply (the cells ``held`` for older requests count first)."""
        obs = state.last_inputs[0] if state.last_inputs else None
        if not isinstance(obs, Observation):
            return None
        config = policy_config_from_spec(state.pool.spec, pool_shape(state.pool))
        memory = state.memory or PolicyMemory()
        return gang.plan_on_pool(found.pod_sets, obs, memory, config, held, now)


def _expander_choice(found: _Gang, pools: Mapping[str, GPUCellPool]) -> str:
    """The pool ``policy.expander`` gives the gang's first member to (priority, least waste,
    name), so the booked pool is the one the loops' expander gives the placeholders to."""
    member = gang.members(found.pod_sets[:1])[:1]
    wanted = {key: member for key in pools}
    options = {key: option_of(pool) for key, pool in pools.items()}
    shares = assign(wanted, options)
    return next((k for k in sorted(pools) if shares[k].kept), min(pools))


_UNDECIDED = "a pool that selects the pods has not observed its cells yet"


def _name(raw: JSON) -> tuple[str, str]:
    meta = raw.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _age(raw: JSON) -> tuple[str, str, str]:
    meta = raw.get("metadata") or {}
    return (
        str(meta.get("creationTimestamp") or ""),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )
