"""Gangs in the simulated world: pods that start together, and the two ways to scale for them.

Why this module exists: AI jobs arrive as gangs (a PyTorchJob, a JobSet, a Kueue workload) and
run only when every member runs, so a member placed early holds its GPUs idle until the last
one lands, and scaling for half a gang buys GPUs nothing uses. The event loop (``engine.sim``)
asks this module what a placement, an eviction or an end means for a gang, and, in atomic mode,
which waiting gangs to admit; the numbers a run reports about gangs are kept here too.

Semantics (docs/simulation.md "Gangs"):

* A gang is the trace pods sharing a ``gang`` id. It *arrives* when its last member arrives and
  *starts* when its last member is placed; each member then runs its own ``duration_seconds``
  from the start. A member placed before the start holds its GPUs idle: those are the
  partially-placed-gang GPU-seconds (wasted: paid for, used by nothing).
* An evicted member of a started gang stops the gang (a distributed job dies with a worker): its
  other running members are evicted too and every member re-queues with its remaining time; the
  gang starts again when all are placed again (its wait counts up to its first start).
* ``per-pod`` scale-up (the default): members are ordinary pods from arrival; the policy sees
  each pending member by itself.
* ``atomic`` scale-up: a gang is held (no member pod exists, as Kueue holds a workload) until
  ``autoscaler.policy.gang.plan_gang``, the live operator's own answer to a
  ProvisioningRequest, says it fits the pool's Ready and Booting cells or may add all the cells
  it needs. Then its members become pending pods in the same observation, so one ``decide``
  call scales up for the whole gang ("booked" capacity, as the live operator does); a gang that
  cannot be met waits and is asked again at the next tick; one that never can (a member fits
  no cell, or it needs more cells than maxReplicas) is never admitted. Gangs are tried in
  arrival order, and one that waits does not block a later one that fits (Kueue's
  BestEffortFIFO).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.policy import gang as gang_policy
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import Observation, PendingPod, PolicyMemory
from simulations.simulator.engine.metrics import GangStats
from simulations.simulator.engine.world import Running
from simulations.simulator.traces.model import TracePod


class GangScaleUp(enum.StrEnum):
    PER_POD = "per-pod"  # each pending member is demand by itself
    ATOMIC = "atomic"  # a gang is one all-or-nothing demand (autoscaler.policy.gang)


@dataclass(slots=True)
class Gang:
    """One gang's state in a run."""

    gang_id: str
    size: int
    arrived: list[TracePod] = field(default_factory=list)
    arrived_at: float | None = None  # when the last member arrived
    admitted: bool = False  # atomic mode: its members are pods now
    bound: dict[str, Running] = field(default_factory=dict)  # members placed, by pod key
    running: bool = False  # started and not stopped by an eviction
    first_start: float | None = None
    finished: int = 0  # members that ran to their end

    def placed_all(self) -> bool:
        return len(self.bound) + self.finished >= self.size

    def gpus_bound(self) -> int:
        return sum(r.pod.ask.gpu_count for r in self.bound.values())


def hostable_gangs(pods: Sequence[TracePod], hostable: Sequence[TracePod]) -> set[str]:
    """Gang ids all of whose members a fresh cell can host (a gang with one unhostable member
    can never start, so the whole gang is left out as unschedulable)."""
    ok = {p.key for p in hostable}
    gangs = {p.gang for p in pods if p.gang}
    return {g for g in gangs if all(p.key in ok for p in pods if p.gang == g)}


class GangBook:
    """Every gang of a run: arrivals, placements, starts, stops and the admission queue."""

    def __init__(self, pods: Sequence[TracePod], mode: GangScaleUp) -> None:
        self.mode = mode
        sizes = Counter(p.gang for p in pods if p.gang)
        self.gangs = {gid: Gang(gid, size) for gid, size in sizes.items()}
        self.waiting: list[Gang] = []  # atomic: complete gangs not admitted yet, arrival order
        self.rejected: list[Gang] = []  # atomic: gangs the pool can never hold (never admitted)
        self.partial_gpus = 0  # GPUs held now by members of gangs not running
        self.partial_gpu_seconds = 0.0
        self.last_time = 0.0
        self.reasons: Counter[str] = Counter()
        self.admitted_keys: set[str] = set()  # atomic: members whose pods exist
        self._last_tried: tuple[object, ...] | None = None  # inputs of the last admission try

    @property
    def atomic(self) -> bool:
        return self.mode is GangScaleUp.ATOMIC and bool(self.gangs)

    def advance(self, now: float) -> None:
        """Integrate the partially-placed GPUs up to ``now``."""
        if now > self.last_time:
            self.partial_gpu_seconds += self.partial_gpus * (now - self.last_time)
            self.last_time = now

    def arrive(self, pod: TracePod, now: float) -> bool:
        """Record a member's arrival; True when the caller should hold the pod (atomic mode)."""
        gang = self.gangs[pod.gang]
        gang.arrived.append(pod)
        if len(gang.arrived) == gang.size:
            gang.arrived_at = now
            if self.atomic:
                self.waiting.append(gang)
        return self.atomic

    def placed(self, running: Running, now: float) -> list[Running]:
        """A member was placed. When it was the last one, the gang starts: every member's end
        moves to the start plus its remaining time and all of them are returned (the caller
        schedules their ends); otherwise [] (the member holds its GPUs, idle)."""
        self.advance(now)
        gang = self.gangs[running.pod.gang]
        gang.bound[running.pod.key] = running
        self.partial_gpus += running.pod.ask.gpu_count
        if not gang.placed_all():
            return []
        gang.running = True
        if gang.first_start is None:
            gang.first_start = now
        self.partial_gpus -= gang.gpus_bound()
        members = list(gang.bound.values())
        for member in members:
            member.end_at = now + (member.end_at - member.started_at)
        return members

    def ended(self, running: Running, now: float) -> None:
        """A member ran to its end and left its cell."""
        self.advance(now)
        gang = self.gangs[running.pod.gang]
        gang.bound.pop(running.pod.key, None)
        gang.finished += 1

    def evict(self, running: Running, now: float) -> list[tuple[Running, float]]:
        """The members an eviction of ``running`` takes off their cells, each with the time it
        still has to run: before the start, the member alone with all of its duration; once
        the gang has started, every member still running (the job stops) with what is left."""
        self.advance(now)
        gang = self.gangs[running.pod.gang]
        if gang.running:
            gang.running = False
            out = [(member, member.end_at - now) for member in gang.bound.values()]
        else:
            self.partial_gpus -= running.pod.ask.gpu_count
            out = [(running, running.end_at - running.started_at)]
        for member, _ in out:
            gang.bound.pop(member.pod.key, None)
        return out

    def admit(
        self,
        observation: Observation,
        memory: PolicyMemory,
        config: PolicyConfig,
        now: float,
    ) -> list[Gang]:
        """Atomic mode: the waiting gangs ``plan_gang`` lets in now, in arrival order."""
        seen = (observation, memory.boots_proven, memory.scale_events, len(self.waiting))
        last = self._last_tried
        if (
            last is not None
            and last[0] is observation
            and last[1:] == seen[1:]
            and not config.scale_up.policies
        ):
            return []  # the very inputs of the last try (no rate clock runs): the same answers
        booked = [p for p in observation.pending if p.key in self.admitted_keys]
        admitted: list[Gang] = []
        for gang in list(self.waiting):
            plan = self._plan(gang, observation, memory, config, booked, now)
            self.reasons[plan.reason] += 1
            if plan.permanent:  # waiting cannot help (the request fails): never admitted
                self.waiting.remove(gang)
                self.rejected.append(gang)
            elif plan.fits_now or plan.cells_to_add > 0:
                gang.admitted = True
                self.waiting.remove(gang)
                admitted.append(gang)
                booked += [_pending_view(p.key, p) for p in gang.arrived]
                self.admitted_keys.update(p.key for p in gang.arrived)
        self._last_tried = (*seen[:3], len(self.waiting))
        return admitted

    def _plan(
        self,
        gang: Gang,
        observation: Observation,
        memory: PolicyMemory,
        config: PolicyConfig,
        booked: Sequence[PendingPod],
        now: float,
    ) -> gang_policy.GangPlan:
        """The live operator's plan for one gang (``autoscaler.gangs``: the bounds ``decide``
        will apply, less the cells promised to gangs booked before it)."""
        return gang_policy.plan_on_pool(_pod_sets(gang), observation, memory, config, booked, now)

    def stats(self, end: float, waits: Mapping[str, float]) -> GangStats:
        """The gang figures of a run that ended at ``end``; ``waits`` are every pod's."""
        if not self.gangs:
            return GangStats()
        self.advance(end)
        members = {p.key for gang in self.gangs.values() for p in gang.arrived}
        gang_waits = []
        unstarted = 0
        for gang in self.gangs.values():
            if gang.arrived_at is None:
                continue
            if gang.first_start is None:
                unstarted += 1
                gang_waits.append(end - gang.arrived_at)
            else:
                gang_waits.append(gang.first_start - gang.arrived_at)
        return GangStats(
            waits_seconds=tuple(gang_waits),
            unstarted=unstarted,
            partial_gpu_hours=self.partial_gpu_seconds / 3600.0,
            admissions=tuple(sorted(self.reasons.items())),
            solo_waits_seconds=tuple(w for k, w in waits.items() if k not in members),
        )


def _pending_view(key: str, pod: TracePod) -> PendingPod:
    return PendingPod(key, pod.ask, pod.arrival_seconds, pod.constraints())


def _pod_sets(gang: Gang) -> list[gang_policy.PodSet]:
    """The gang's members grouped into pod sets of identical asks and selectors (as a Kueue
    workload's pod sets are), named after the gang."""
    groups: dict[tuple[object, ...], list[TracePod]] = {}
    for pod in gang.arrived:
        groups.setdefault((pod.ask, pod.node_selector), []).append(pod)
    return [
        gang_policy.PodSet(_pending_view(f"{gang.gang_id}/{i}", pods[0]), len(pods))
        for i, pods in enumerate(groups.values())
    ]
