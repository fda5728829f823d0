"""What the twin did, recorded from watches: cells over time and every pod's wait.

Why this module exists: the fidelity check compares the twin's cell-count timeline with the
simulator's, and the report computes the simulator's metrics (cell-hours, waits, churn) from
the twin's run, so both must be measured from the outside, as a user would: SwiftGuests in the
infrastructure cluster (a cell costs from its guest's creation until the guest is gone, as in
the simulator), the pool's status (Ready cells, desired), and pods in the workload cluster
(wait = creation until bound to a Node). Watches give every change; ``sample()`` adds a point
at a fixed interval too, so the progress line and the timeline never go quiet. What the
observations measure (boots in creation order, the median reactions, the timeline in the
simulator's shape) is derived after the run, in ``simulations.demo.twin_measures``; the
records kept per pod and per instant are ``simulations.demo.twin_records``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from dataclasses import dataclass, field, replace

from autoscaler.policy.demand import pod_ask
from autoscaler.policy.types import GPUAsk
from gpucellpool.kube.cache import JSON, Query, WatchCache
from gpucellpool.kube.rest import RestClient
from simulations.demo.run_log import CellEvent, DecisionSeen
from simulations.demo.twin_records import PodTimes, Snapshot, snapshot_at
from simulations.twin.hami_placement import node_state

POOLS = "/apis/cells.kubeswift.io/v1alpha1/namespaces/{ns}/gpucellpools"
GUESTS = "/apis/swift.kubeswift.io/v1alpha1/namespaces/{ns}/swiftguests"
PODS = "/api/v1/namespaces/{ns}/pods"
NODES = "/api/v1/nodes"


def _cell_index(name: str, otherwise: float) -> float:
    """The index a cell's name ends with (``pool-12``: 12), else ``otherwise``."""
    tail = name.rsplit("-", 1)[-1]
    return float(tail) if tail.isdigit() else otherwise


@dataclass
class Recorder:
    """Watches one pool's guests, status and pods; times are seconds since ``start()``."""

    infra: RestClient
    workload: RestClient
    namespace: str
    pool: str
    t0: float = field(default_factory=time.monotonic)
    samples: list[Snapshot] = field(default_factory=list)
    pods: dict[str, PodTimes] = field(default_factory=dict)
    created_guests: set[str] = field(default_factory=set)
    deleted_guests: int = 0
    # Cell names are reused after a scale-down, so these follow one incarnation at a time.
    booting: dict[str, float] = field(default_factory=dict)  # name -> guest first seen
    draining: dict[str, float] = field(default_factory=dict)  # name -> Draining first seen
    # (asked for, cell index, boot): a wave's cells share the first, their names order them
    ready_after: list[tuple[float, float, float]] = field(default_factory=list)
    # The same for a boot seen leaving before it was Ready (cancelled): how long it had run
    cancelled_boots: list[tuple[float, float, float]] = field(default_factory=list)
    drains: list[float] = field(default_factory=list)  # Draining seen -> guest gone
    first_guest: float | None = None
    first_request: float | None = None  # the first scale-up decision seen in status
    # Per scale-up decision: from the first pod it answered (created since the decision before,
    # still pending) to the decision; the first one also waits for the caches to fill.
    reactions: list[float] = field(default_factory=list)
    # Per change of desiredReplicas that answered no new pod, after a cell turned Ready since
    # the change before: from that Ready (the newest) to the change. The operator hears of a
    # Ready cell through its Node and the pool's status, later than of a pending pod.
    boot_reactions: list[float] = field(default_factory=list)
    # A change later than this after the Ready was prompted by something else (a window
    # running out, a tick): not a reaction to the boot. None: no bound.
    boot_reaction_max_s: float | None = None
    _ready_at: float | None = None  # a cell last turned Ready since the last change
    _changed_at: float = 0.0  # when desiredReplicas last changed
    # One entry per cell a decision asked for (desiredReplicas raised by n: n entries), taken
    # in order by the guests that follow: a cell's boot counts from the decision, as a user
    # measures "scale-up to Ready" on their cluster (the provisioner's work is part of it).
    _asked: collections.deque[float] = field(default_factory=collections.deque)
    # The same for a scale-down: one entry per cell a decision lowered desiredReplicas by,
    # taken in order by the cells then seen Draining.
    _lowered: collections.deque[float] = field(default_factory=collections.deque)
    # Decision -> execution, per cell: desiredReplicas raised -> its guest created, lowered ->
    # a cell seen Draining (the provisioner's lag; the simulator holds its decisions this long).
    lags: list[float] = field(default_factory=list)
    # A cancelled boot (a cell seen Draining before it was Ready), per cell: desiredReplicas
    # lowered -> its guest gone; ``_cancelling`` holds the decision's time until then.
    cancels: list[float] = field(default_factory=list)
    _cancelling: dict[str, float] = field(default_factory=dict)
    _guest_seen: dict[str, float] = field(default_factory=dict)  # name -> guest created
    ready_from_guest: list[tuple[float, float, float]] = field(default_factory=list)  # as above
    _desired: int = 0
    # Each change of status.lastDecision (reason, target, message) or status.policyMemory
    decisions: list[DecisionSeen] = field(default_factory=list)
    # Each cell's steps in order (guest created/gone, row phase, Node placeable)
    cell_events: list[CellEvent] = field(default_factory=list)
    _phases: dict[str, str] = field(default_factory=dict)  # cell -> its row's last phase
    _live: set[str] = field(default_factory=set)
    _deleting: set[str] = field(default_factory=set)  # guests seen with a deletionTimestamp
    _status: JSON = field(default_factory=dict)
    # With ``node_selector`` (the pool's cell Nodes in the workload cluster), a cell's boot ends
    # when HAMi could first place on its Node (registered, Ready, schedulable), not when the
    # pool's status shows it Ready: that status write came up to 12 trace s (x20) before or
    # after it, so the simulator's wave became Ready in another order than HAMi saw the twin's.
    node_selector: str | None = None
    _placeable: dict[str, float] = field(default_factory=dict)  # name -> its Node placeable
    # (cell, when its boot ended) per boot: a pod that waited for the cell is bound some time
    # after (``binds_after_ready``; the median is the simulator's bind delay)
    readies: list[tuple[str, float]] = field(default_factory=list)
    _status_ready: set[str] = field(default_factory=set)  # Ready in status, Node not yet
    _caches: list[WatchCache] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def start(self) -> None:
        """Start the watches (guests, the pool, pods, and with ``node_selector`` the cells'
        Nodes) and wait until they listed once."""
        ns = self.namespace
        self._caches = [
            WatchCache(self.infra, Query(GUESTS.format(ns=ns)), self._guest),
            WatchCache(
                self.infra,
                Query(POOLS.format(ns=ns), field_selector=f"metadata.name={self.pool}"),
                self._pool,
            ),
            WatchCache(self.workload, Query(PODS.format(ns=ns)), self._pod),
        ]
        if self.node_selector is not None:
            nodes = Query(NODES, label_selector=self.node_selector)
            self._caches.append(WatchCache(self.workload, nodes, self._node))
        self._tasks = [asyncio.create_task(c.run(), name="demo:recorder") for c in self._caches]
        await asyncio.wait_for(asyncio.gather(*(c.synced.wait() for c in self._caches)), 30)

    def restart_clock(self) -> None:
        """Time zero is the start of the replay."""
        shift = time.monotonic() - self.t0
        self.booting = {k: v - shift for k, v in self.booting.items()}
        self._asked = collections.deque(t - shift for t in self._asked)
        self._lowered = collections.deque(t - shift for t in self._lowered)
        self._changed_at -= shift
        self._ready_at = None if self._ready_at is None else self._ready_at - shift
        self._guest_seen = {k: v - shift for k, v in self._guest_seen.items()}
        self._placeable = {k: v - shift for k, v in self._placeable.items()}
        self.readies = [(name, at - shift) for name, at in self.readies]
        self._cancelling = {k: v - shift for k, v in self._cancelling.items()}
        self.decisions = [replace(d, time_seconds=d.time_seconds - shift) for d in self.decisions]
        self.cell_events = [
            replace(e, time_seconds=e.time_seconds - shift) for e in self.cell_events
        ]
        self.t0 += shift
        self.samples.clear()
        self.sample()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- watch callbacks ----------------------------------------------------------------------

    def _guest(self, kind: str, obj: JSON) -> None:
        name, now = str(obj["metadata"]["name"]), self.now()
        if kind == "ADDED":
            self.created_guests.add(str(obj["metadata"]["uid"]))
            asked = self._asked.popleft() if self._asked else None
            self.booting[name] = now if asked is None else asked
            self._guest_seen[name] = now
            if asked is not None:
                self.lags.append(now - asked)
            self._live.add(name)
            self.first_guest = now if self.first_guest is None else self.first_guest
            self.cell_events.append(CellEvent(now, name, "guest created"))
        elif kind == "MODIFIED" and obj["metadata"].get("deletionTimestamp"):
            if name in self._live and name not in self._deleting:  # a finalizer holds it
                self._deleting.add(name)
                self.cell_events.append(CellEvent(now, name, "guest deleting"))
        elif kind == "DELETED":
            self._deleting.discard(name)
            self.deleted_guests += 1
            self.cell_events.append(CellEvent(now, name, "guest gone"))
            self._phases.pop(name, None)
            self._live.discard(name)
            self.booting.pop(name, None)
            self._guest_seen.pop(name, None)
            self._placeable.pop(name, None)
            self._status_ready.discard(name)
            if name in self._cancelling:
                self.cancels.append(now - self._cancelling.pop(name))
            if name in self.draining:
                self.drains.append(now - self._emptied(name, self.draining.pop(name)))
        self.sample()

    def _pool(self, kind: str, obj: JSON) -> None:
        del kind
        self._status = obj.get("status") or {}
        now = self.now()
        desired = int(self._status.get("desiredReplicas") or 0)
        answered = False
        if desired > self._desired:
            answered = self._reacted(now)
            self._asked.extend([now] * (desired - self._desired))
            self._lowered.clear()  # a scale-down not carried out yet is no longer asked for
            self.first_request = now if self.first_request is None else self.first_request
        elif desired < self._desired:  # asked-for cells not created yet are no longer asked for
            unasked = min(len(self._asked), self._desired - desired)
            for _ in range(unasked):
                self._asked.pop()
            self._lowered.extend([now] * (self._desired - desired - unasked))
        if desired != self._desired:
            if not answered and self._ready_at is not None:
                self._boot_reacted(now - self._ready_at)
            self._changed_at, self._ready_at = now, None
        self._desired = desired
        self._decided(now)
        for cell in self._status.get("cells") or []:
            name = str(cell.get("name"))
            self._phase_seen(name, str(cell.get("phase")), now)
            if cell.get("phase") == "Ready" and name in self.booting:
                self._status_ready.add(name)
                self._booted(name, now)
            elif cell.get("phase") in ("Draining", "Deleting") and name in self._live:
                if name not in self.draining and name in self.booting:
                    self._cancelled_boot(name, now)
                if name not in self.draining and self._lowered:
                    lowered = self._lowered.popleft()
                    self.lags.append(now - lowered)
                    if name in self.booting:  # never Ready: a cancelled boot
                        self._cancelling[name] = lowered
                self.draining.setdefault(name, now)
        self.sample()

    def _decided(self, now: float) -> None:
        """Record the published decision and policy memory when either changed."""
        last = self._status.get("lastDecision") or {}
        seen = DecisionSeen(
            time_seconds=now,
            reason=str(last.get("reason", "")),
            desired_replicas=int(last.get("desiredReplicas") or 0),
            message=str(last.get("message", "")),
            decided_at=str(last.get("time") or ""),
            policy_memory=str(self._status.get("policyMemory") or ""),
        )
        if not self.decisions or not self.decisions[-1].same_as(seen):
            self.decisions.append(seen)

    def _phase_seen(self, name: str, phase: str, now: float) -> None:
        if self._phases.get(name) != phase:
            self._phases[name] = phase
            self.cell_events.append(CellEvent(now, name, f"row {phase}"))

    def _node(self, kind: str, obj: JSON) -> None:
        name, now = str(obj["metadata"]["name"]), self.now()
        if kind == "DELETED":
            self.cell_events.append(CellEvent(now, name, "Node gone"))
            return
        if name not in self.booting or name in self._placeable:
            return
        if node_state(obj).blocked is None:
            self._placeable[name] = now
            self.cell_events.append(CellEvent(now, name, "Node placeable"))
            self._booted(name, now)

    def _cancelled_boot(self, name: str, now: float) -> None:
        created = self.booting[name]
        order = _cell_index(name, self._guest_seen.get(name, created))
        self.cancelled_boots.append((created, order, now - created))

    def _booted(self, name: str, now: float) -> None:
        """A booting cell is Ready once the status says so and, with the Node watch, HAMi
        could place on its Node: its boot ends at the latter."""
        if name not in self._status_ready:
            return
        if self.node_selector is not None and name not in self._placeable:
            return
        self._status_ready.discard(name)
        ready = self._placeable.pop(name, now)
        created = self.booting.pop(name)
        guest = self._guest_seen.pop(name, created)
        order = _cell_index(name, guest)
        self.ready_after.append((created, order, ready - created))
        self.ready_from_guest.append((created, order, ready - guest))
        self.readies.append((name, ready))
        self._ready_at = ready

    def _pod(self, kind: str, obj: JSON) -> None:
        name, now = str(obj["metadata"]["name"]), self.now()
        times = self.pods.get(name)
        if times is None:
            ask = pod_ask(obj)
            times = self.pods[name] = PodTimes(now, ask=ask if isinstance(ask, GPUAsk) else None)
        phase = (obj.get("status") or {}).get("phase")
        if times.bound is None and (obj.get("spec") or {}).get("nodeName"):
            times.bound, times.node = now, str(obj["spec"]["nodeName"])
        ended = kind == "DELETED" or phase in ("Succeeded", "Failed")
        if ended and times.ended is None:
            times.ended = now
        self.sample()

    def _boot_reacted(self, seconds: float) -> None:
        bound = self.boot_reaction_max_s
        if bound is None or seconds <= bound:
            self.boot_reactions.append(seconds)

    def _reacted(self, now: float) -> bool:
        """Record the reaction of a scale-up to the pods created since the last change;
        whether there were any."""
        waited = [
            p.created
            for p in self.pods.values()
            if p.bound is None and p.ended is None and p.created >= self._changed_at
        ]
        if waited:
            self.reactions.append(now - min(waited))
        return bool(waited)

    def _emptied(self, node: str, drain_start: float) -> float:
        """When a draining cell's last pod ended (its drain start if it was empty)."""
        ends = [
            p.ended
            for p in self.pods.values()
            if p.node == node and p.ended is not None and p.bound is not None
        ]
        return max([drain_start, *ends])

    # -- samples ------------------------------------------------------------------------------

    def sample(self) -> Snapshot:
        """Record (and return) the state now; repeated states are kept only at the interval."""
        cells = len(self._caches[0].objects) if self._caches else 0
        snap = snapshot_at(max(0.0, self.now()), self._status, cells, self.pods)
        self.samples.append(snap)
        return snap

    def status(self) -> JSON:
        """The pool's last observed status."""
        return self._status

    async def sample_every(self, interval_s: float) -> None:
        """A point every ``interval_s`` (cancelled by the caller)."""
        while True:
            await asyncio.sleep(interval_s)
            self.sample()
