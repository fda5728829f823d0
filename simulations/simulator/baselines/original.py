"""The earlier gpucellpool's ``DecideScale`` (original-gpucellpool §3.4), as a baseline.

Why this module exists: it is our parity floor; the comparison must show what "one cell per
10 minutes, scale down one idle cell after 30 minutes of zero demand" costs in wait and money.
Rules modelled (``scaleDown: Auto``; defaults from §3.5):

- reconcile every 30 s; demand = pending pods; a pod is satisfiable when it asks at most one
  GPU that fits one cell's GPU; pending > 0 but none satisfiable -> ``DemandUnsatisfiable``
  (which also resets the demand-free clock, so it blocks scale-down);
- growth: at ``maxReplicas`` -> hold; no free physical GPU -> hold; a scale-up within the last
  10 min -> ``Stabilizing``; at most 2 cells in flight; else exactly one more cell;
- scale-down only with zero demand: demand-free for 30 min and no scale event in 30 min, then
  one idle (empty, Ready) cell, the lowest index.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.fit import resources_fit
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape, CellState, GPUAsk, Observation, PolicyMemory
from simulations.simulator.baselines.common import booting, clamp, decision, live, with_steady

UP_WINDOW_SECONDS = 600.0
DOWN_WINDOW_SECONDS = 1800.0
IN_FLIGHT = 2


@dataclass
class _State:
    demand_free_since: float | None = None


class OriginalGpucellpool:
    """One cell per decision, at most every 10 minutes; slow, idle-only scale-down."""

    name = "original-gpucellpool"
    tick_seconds = 30.0
    react_on_arrival = False

    def __init__(self) -> None:
        self.state = _State()
        self._fits: dict[tuple[GPUAsk, CellShape], bool] = {}  # resources_fit, memoised

    def _satisfiable(self, ask: GPUAsk, shape: CellShape) -> bool:
        known = self._fits.get((ask, shape))
        if known is None:
            known = self._fits[(ask, shape)] = (
                ask.gpu_count <= 1 and resources_fit((ask,), shape).ok
            )
        return known

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        made = self._decide(observation, memory, config, now)
        up, down = memory.last_scale_up_at, memory.last_scale_down_at
        since = self.state.demand_free_since
        clocks = [
            None if up is None else up + UP_WINDOW_SECONDS,
            None if up is None else up + DOWN_WINDOW_SECONDS,
            None if down is None else down + DOWN_WINDOW_SECONDS,
            None if since is None else since + DOWN_WINDOW_SECONDS,
        ]
        return with_steady(made, memory, len(live(observation.cells)), clocks, now)

    def _decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        base = clamp(len(live(observation.cells)), config)
        pending = observation.pending
        satisfiable = [p for p in pending if self._satisfiable(p.ask, config.shape)]
        if pending:
            self.state.demand_free_since = None
        elif self.state.demand_free_since is None:
            self.state.demand_free_since = now
        if pending and not satisfiable:
            return decision(base, Reason.DEMAND_UNSATISFIABLE, "no satisfiable pod", memory)
        if satisfiable:
            return self._grow(observation, memory, config, now, base)
        return self._shrink(observation, memory, config, now, base)

    def _grow(
        self,
        observation: Observation,
        memory: PolicyMemory,
        config: PolicyConfig,
        now: float,
        base: int,
    ) -> Decision:
        if base >= config.max_replicas:
            return decision(base, Reason.AT_MAX_REPLICAS, "at maxReplicas", memory)
        if observation.free_physical_gpus == 0:
            return decision(base, Reason.INSUFFICIENT_PHYSICAL_GPU, "no free GPU", memory)
        last = memory.last_scale_up_at
        if last is not None and now - last < UP_WINDOW_SECONDS:
            return decision(base, Reason.STABILIZING, "scale-up within 10 m", memory)
        if len(booting(observation.cells)) >= IN_FLIGHT:
            return decision(base, Reason.IN_FLIGHT_LIMIT, "2 cells in flight", memory)
        mem = replace(memory, last_scale_up_at=now)
        return decision(base + 1, Reason.SCALED_UP, "one more cell", mem)

    def _shrink(
        self,
        observation: Observation,
        memory: PolicyMemory,
        config: PolicyConfig,
        now: float,
        base: int,
    ) -> Decision:
        if base <= config.min_replicas:
            return decision(base, Reason.AT_MIN_REPLICAS, "at floor", memory)
        idle = sorted(
            (c for c in observation.cells if c.state is CellState.READY and c.pods == 0),
            key=lambda c: c.index,
        )
        if not idle:
            return decision(base, Reason.NO_IDLE_CELL, "no idle cell", memory)
        since = self.state.demand_free_since
        events = [t for t in (memory.last_scale_up_at, memory.last_scale_down_at) if t is not None]
        if (
            since is None
            or now - since < DOWN_WINDOW_SECONDS
            or any(now - t < DOWN_WINDOW_SECONDS for t in events)
        ):
            return decision(base, Reason.STABILIZING, "demand-free window", memory)
        mem = replace(memory, last_scale_down_at=now)
        return decision(base - 1, Reason.SCALED_DOWN, "one idle cell", mem, (idle[0].name,))
