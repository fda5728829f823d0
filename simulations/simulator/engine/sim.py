"""The event loop: arrivals, pod ends, control ticks, boots and drains on a virtual clock.

Why this module exists: a policy's cost and wait depend on *when* things happen (boot time, tick
period, drain time). A heap of timed events replays months of demand in seconds, and with one
seeded RNG (boot times and boot failures only) the same inputs always give the same result.
The time of the event being handled is kept on ``Simulation.clock``, the one virtual clock
(``engine.clock.VirtualClock``) that the live loop's tests run on as well.

Events at the same instant run in the order of their kinds (``engine.events``): pod ends, boots,
cells opening to pods (a boot's end plus ``bind_delay_seconds``), drains, arrivals, ticks,
timeline samples; ties by insertion order. After every event the pending queue is offered to
HAMi placement if capacity may have grown. A policy's ``Decision`` is applied as the
provisioner would, through its plan check (``engine.actuator``): create cells up to
``desired_replicas`` within the free physical GPUs; drain the named ``victims`` (at most down
to ``desired_replicas``); nothing when ``act`` is False. Whether a tick calls ``decide`` or
repeats the last decision is ``engine.decider``'s rule (idle ticks cost almost nothing). What
a cell's events do (boots ending, drains, evictions) is ``engine.cell_lifecycle``; the run's
result is assembled by ``engine.metrics.run_result``.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from autoscaler.policy.decision import Decision
from autoscaler.policy.types import CellState
from simulations.simulator.engine import cell_lifecycle, gc_pause, hami
from simulations.simulator.engine.actuator import actions, unchanged
from simulations.simulator.engine.clock import VirtualClock
from simulations.simulator.engine.config import BootModel, DrainMode, SimConfig
from simulations.simulator.engine.decider import Decider
from simulations.simulator.engine.events import (
    ARRIVAL,
    BOOT,
    DRAIN,
    DRAIN_TIMEOUT,
    END,
    EXECUTE,
    OPEN,
    REACT,
    SAMPLE,
    TICK,
)
from simulations.simulator.engine.exec_lag import ExecLag
from simulations.simulator.engine.gangs import GangBook, GangScaleUp, hostable_gangs
from simulations.simulator.engine.hostable import hostable_pods
from simulations.simulator.engine.metrics import Counters, Integrals, SimResult, run_result
from simulations.simulator.engine.policy import ScalingPolicy
from simulations.simulator.engine.reactions import Reactions
from simulations.simulator.engine.timeline import Timeline
from simulations.simulator.engine.world import Pending, Running, World
from simulations.simulator.traces.model import TracePod

# the set-up values live in engine.config; importing them from here keeps working
__all__ = ["BootModel", "DrainMode", "SimConfig", "Simulation", "simulate"]

# ~0.1 s of work between progress reports, so a bar moves several times a second.
PROGRESS_EVERY_EVENTS = 1024


class Simulation:
    """One run of one policy over one trace. Use ``simulate``."""

    def __init__(self, pods: Sequence[TracePod], policy: ScalingPolicy, config: SimConfig) -> None:
        self.cfg = config
        self.policy = policy
        self.shape = config.policy_config.shape
        self.tick_seconds = float(getattr(policy, "tick_seconds", config.tick_seconds))
        self.react = bool(getattr(policy, "react_on_arrival", config.react_on_arrival))
        self.world = World(self.shape, config.node_policy, config.gpu_policy)
        self.clock = VirtualClock(0.0)  # the one virtual clock (the loop tests' too): event time
        self.rng = random.Random(config.seed)
        self.pods = hostable_pods(pods, config)
        gangs = hostable_gangs(pods, self.pods)  # a gang with an unhostable member never starts
        self.pods = [p for p in self.pods if not p.gang or p.gang in gangs]
        # Arrivals are pushed one at a time in this order: out of order, one would land in the
        # past (the clock refuses that). A stable sort leaves a sorted trace exactly as it was.
        self.pods.sort(key=lambda p: p.arrival_seconds)
        self.unschedulable = len(pods) - len(self.pods)
        mode = GangScaleUp(getattr(policy, "gang_scale_up", GangScaleUp.PER_POD))
        self.book = GangBook(self.pods, mode)
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.running: dict[str, Running] = {}
        self.waits: dict[str, float] = {}
        self.decider = Decider(policy, config)
        self.lag = ExecLag(config.exec_lag_seconds)
        self.closed: set[str] = set()  # Ready cells HAMi places nothing on yet (bind delay)
        self.last_removal_at = -math.inf  # when the last removal queued is due (the step's)
        self.desired = 0
        self.reactions = Reactions(
            self.react,
            config.react_delay_seconds,
            config.boot_react_delay_seconds,
            config.first_react_delay_seconds,
        )
        self.integrals = Integrals()
        self.counters = Counters()
        self.capacity_up = False
        self.dirty = True
        last_end = max((p.arrival_seconds + p.duration_seconds for p in self.pods), default=0.0)
        self.horizon = last_end + config.tail_seconds
        self.timeline = Timeline(self.shape, max(1.0, last_end / max(1, config.samples)))
        self.next_arrival = 0
        self.arrived = 0

    @property
    def decide_calls(self) -> int:
        """Ticks that reached ``decide`` (the rest repeated a decision)."""
        return self.decider.calls

    # ----- the loop --------------------------------------------------------------------------

    def push(self, time: float, kind: int, payload: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, kind, self.seq, payload))

    def run(self, progress: Callable[[float], None] | None = None) -> SimResult:
        with gc_pause.relaxed():  # the collector off the trace, and rarer (engine.gc_pause)
            return self._run(progress)

    def _run(self, progress: Callable[[float], None] | None) -> SimResult:
        self._start()
        now = 0.0
        while self.heap:
            now, kind, _, payload = heapq.heappop(self.heap)
            if now > self.horizon:
                now = self.horizon
                break
            self.clock.move_to(now)
            self.integrals.advance(now)
            self.counters.events += 1
            self._handle(kind, payload, now)
            if not self._more_capacity_now(now):
                self._settle(now)
            if self._finished():
                break
            if progress is not None and self.counters.events % PROGRESS_EVERY_EVENTS == 0:
                progress(min(1.0, now / self.horizon))
        self.integrals.advance(now)
        if progress is not None:
            progress(1.0)
        return run_result(self, now)

    def _start(self) -> None:
        initial = self.cfg.policy_config.min_replicas
        if self.cfg.warm_start:
            at_zero = [p.ask for p in self.pods if p.arrival_seconds <= 0.0]
            initial = max(initial, hami.pack_count(at_zero, self.shape))
        for _ in range(initial):
            self.world.add_cell(0.0, CellState.READY)
        self._push_next_arrival()
        self.push(0.0, TICK)
        self.push(0.0, SAMPLE)

    def _push_next_arrival(self) -> None:
        if self.next_arrival < len(self.pods):
            pod = self.pods[self.next_arrival]
            self.next_arrival += 1
            self.push(pod.arrival_seconds, ARRIVAL, pod)

    def _finished(self) -> bool:
        done = self.arrived == len(self.pods) and not self.world.pending and not self.running
        return done and not self.book.waiting

    def _handle(self, kind: int, payload: Any, now: float) -> None:
        if kind == END:
            self._pod_end(payload, now)
        elif kind == BOOT:
            cell_lifecycle.boot_done(self, payload, now)
        elif kind == OPEN:
            cell_lifecycle.open_cells(self, payload)
        elif kind == DRAIN:
            cell_lifecycle.drain_done(self, payload)
        elif kind == DRAIN_TIMEOUT:
            cell_lifecycle.drain_timeout(self, payload, now)
        elif kind == ARRIVAL:
            self._arrival(payload, now)
        elif kind in (TICK, REACT):
            self._tick(kind, now)
        elif kind == SAMPLE:
            self._sample(now)
        else:
            self._execute(self.lag.release(), now)

    def _more_capacity_now(self, now: float) -> bool:
        """Whether the next event is at this instant and may free or add capacity: pending
        pods are then placed once, after all of them, as one HAMi pass sees every cell that
        changed by then (placed after each, a pod took the first freed cell rather than the
        one HAMi's node policy picks among all of them)."""
        heap = self.heap
        return bool(heap) and heap[0][0] == now and heap[0][1] < ARRIVAL

    def _settle(self, now: float) -> None:
        if self.capacity_up:
            self.capacity_up = False
            self._place_pending(now)
        if self.dirty:
            self.dirty = False
            integ = self.integrals
            integ.util_sum, integ.ready = self.world.utilisation_sum()
            integ.billable = len(self.world.cells)
            self.timeline.world_changed(now, integ.billable)

    # ----- pods ------------------------------------------------------------------------------

    def _arrival(self, pod: TracePod, now: float) -> None:
        self._push_next_arrival()
        self.arrived += 1
        key = pod.key if pod.key not in self.waits else f"{pod.key}#dup{self.seq}"
        self.waits[key] = 0.0
        if key != pod.key:
            pod = replace(pod, key=key)
        if pod.gang and self.book.arrive(pod, now):  # atomic: held until its gang is admitted
            if self.book.waiting:
                self.push_react(self.reactions.after_pod(now))
            return
        self.world.enqueue(pod, now, pod.duration_seconds)
        self.dirty = True
        if not self._try_place(self.world.pending[key], now):
            self.push_react(self.reactions.after_pod(now))

    def push_react(self, at: float | None) -> None:
        """A REACT at ``at`` (``engine.reactions``; None: none, or one comes sooner)."""
        if at is not None:
            self.push(at, REACT)

    def _try_place(self, entry: Pending, now: float) -> bool:
        found = self.world.find_cell(entry.pod.ask)
        if found is None:
            return False
        cell, gpus = found
        self.waits[entry.pod.key] += now - entry.since
        self.seq += 1
        running = self.world.bind(entry, cell, gpus, now, self.seq)
        self.running[running.pod.key] = running
        # a gang member runs from its gang's start: its end is known once the last one lands
        starting = self.book.placed(running, now) if running.pod.gang else [running]
        for member in starting:
            self.push(member.end_at, END, (member.pod.key, member.token))
        self.dirty = True
        return True

    def _place_pending(self, now: float) -> None:
        refused: set[object] = set()
        for entry in list(self.world.pending.values()):
            if entry.pod.ask not in refused and not self._try_place(entry, now):
                refused.add(entry.pod.ask)

    def _pod_end(self, payload: tuple[str, int], now: float) -> None:
        key, token = payload
        running = self.running.get(key)
        if running is None or running.token != token:
            return  # evicted earlier; this end is stale
        del self.running[key]
        cell = self.world.unbind(running)
        if running.pod.gang:
            self.book.ended(running, now)
        self.capacity_up = self.dirty = True
        if cell.state is CellState.DRAINING and not cell.pods:
            cell_lifecycle.schedule_removal(self, cell.name, now + self.cfg.drain_seconds)
        # live, a pod's end is a change on its Node, which wakes the pool (routing.route_pod):
        # a cell left idle starts its scale-down window then, not at the next tick
        self.push_react(self.reactions.after_pod(now))

    # ----- the policy ------------------------------------------------------------------------

    def _free_physical(self) -> int | None:
        if self.cfg.physical_gpus is None:
            return None
        return max(0, self.cfg.physical_gpus - len(self.world.cells) * self.shape.gpus)

    def _tick(self, kind: int, now: float) -> None:
        if kind == TICK:
            self.reactions.next_tick = now + self.tick_seconds
            self.push(self.reactions.next_tick, TICK)
        else:
            self.reactions.ran()
        if self.book.waiting:
            self._admit_gangs(now)
        observation = self.decider.observe(self.world, self._free_physical(), now)
        if self.lag.plan is not None:  # a held plan: the cells as the provisioner will have them
            observation = self.lag.view(observation, self.decider.memory.last_scale_up_at or now)
        decision, repeated = self.decider.decide(observation, now)
        self.counters.decisions += 1
        self.counters.reason(str(decision.reason))
        self.push_react(self.reactions.after_decision(now, decision.steady))
        if repeated:  # applied before to this very world without changing it: a no-op again
            self.desired = decision.desired_replicas
            return
        self._apply(decision, now)

    def _admit_gangs(self, now: float) -> None:
        """Atomic mode: gangs ``autoscaler.policy.gang`` lets in become pending pods now, so
        the ``decide`` call that follows scales up for all of each one (booked capacity)."""
        observation = self.world.observation(self._free_physical())
        memory = self.decider.memory
        for gang in self.book.admit(observation, memory, self.cfg.policy_config, now):
            for pod in gang.arrived:
                self.waits[pod.key] += now - pod.arrival_seconds  # held since it arrived
                self.world.enqueue(pod, now, pod.duration_seconds)
            for pod in gang.arrived:
                entry = self.world.pending.get(pod.key)
                if entry is not None:
                    self._try_place(entry, now)
            self.dirty = True

    def _apply(self, decision: Decision, now: float) -> None:
        self.desired = decision.desired_replicas
        if not decision.act:
            return
        if self.lag.active:
            self.push(self.lag.hold(decision, now, self.world.cells.values()), EXECUTE)
            return
        self._execute(decision, now)

    def _execute(self, decision: Decision, now: float) -> None:
        cells, config = self.world.cells, self.cfg.policy_config
        if unchanged(decision, self.world.live, config, self.cfg.physical_gpus):
            return  # the count kept, no victim: nothing to do (engine.actuator.unchanged)
        todo = actions(decision, cells.values(), config, self.cfg.physical_gpus, now)
        if todo.create:
            cell_lifecycle.create_cells(self, todo.create, now)
        for name in todo.drain:
            cell_lifecycle.start_drain(self, cells[name], now)

    def _sample(self, now: float) -> None:
        self.push(now + self.timeline.every_seconds, SAMPLE)
        self.timeline.sample(self.world, self.desired, now)


def simulate(
    pods: Sequence[TracePod],
    policy: ScalingPolicy,
    config: SimConfig | None = None,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Replay ``pods`` through ``policy``; deterministic for ``config.seed``."""
    return Simulation(pods, policy, config or SimConfig()).run(progress)
