"""HPA/KEDA-style baseline: scale the pool on a utilisation metric (autoscaler-anchors §3).

Why this module exists: "point KEDA at HAMi's Prometheus metrics" is the other common answer
for GPU pools; the comparison must show what a metric-only loop does with fragmentation and
boot time. Rules modelled (HPA defaults):

- loop every 15 s; metric = mean over Ready cells of max(memory, cores, slots) allocated
  (what HAMi exports); Booting cells read as 0 % when the ratio says "up" and as on-target
  when it says "down" (HPA's not-ready-pod rule); ``desired = ceil(current x metric/target)``;
- nothing happens while ``|metric/target - 1| <= 0.1`` (tolerance);
- scale-up: no stabilisation, at most max(100 %, 4 cells) more per 15 s;
- scale-down: the highest recommendation of the last 300 s wins (stabilisation window);
- KEDA activation: at zero cells, a pending pod scales to 1 (the metric is empty there);
  otherwise pending pods are invisible to the metric (a full pool at 100 % still grows by
  the ratio, a fragmented one does not).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from autoscaler.policy.decision import Decision, Reason, Steady
from autoscaler.policy.packing import cell_utilisation
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import Observation, PolicyMemory
from simulations.simulator.baselines.common import (
    ViewMemo,
    cheapest_victims,
    clamp,
    decision,
    live,
    ready,
    with_steady,
)

TOLERANCE = 0.1
DOWN_WINDOW_SECONDS = 300.0
UP_PERCENT = 100
UP_CELLS = 4


class HPAStyle:
    """HPA's replica formula, tolerance and stabilisation on pool utilisation."""

    name = "hpa-keda"
    tick_seconds = 15.0
    react_on_arrival = False

    def __init__(self, target_utilisation: float = 0.7) -> None:
        self.target = target_utilisation
        self._util: ViewMemo[float] | None = None

    def _recommend(self, observation: Observation, config: PolicyConfig, current: int) -> int:
        if current == 0:
            return 1 if observation.pending else 0
        if self._util is None:
            shape = config.shape
            self._util = ViewMemo(lambda cell: cell_utilisation(cell.gpus, shape))
        utils = self._util.values(ready(observation.cells))
        not_ready = current - len(utils)
        ratio = (sum(utils) / len(utils) if utils else 0.0) / self.target
        if ratio > 1.0:
            ratio = sum(utils) / (current * self.target)  # not-ready cells read as 0 %
        elif utils:
            ratio = (sum(utils) / self.target + not_ready) / current  # not-ready on target
        if abs(ratio - 1.0) <= TOLERANCE:
            return current
        return math.ceil(current * ratio - 1e-9)

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        current = len(live(observation.cells))
        raw = clamp(self._recommend(observation, config, current), config)
        window = [(t, d) for t, d in memory.recommendations if now - t < DOWN_WINDOW_SECONDS]
        window.append((now, raw))
        mem = replace(memory, recommendations=tuple(window))
        if raw > current:
            limit = current + max(current * UP_PERCENT // 100, UP_CELLS)
            desired = min(raw, limit)
            msg = f"utilisation above target: {current} -> {desired}"
            return decision(desired, Reason.SCALED_UP, msg, replace(mem, last_scale_up_at=now))
        stabilised = max(d for _, d in window)
        if stabilised < current:
            victims = cheapest_victims(observation.cells, current - stabilised)
            msg = f"utilisation below target: {current} -> {stabilised}"
            mem = replace(mem, last_scale_down_at=now)
            return decision(stabilised, Reason.SCALED_DOWN, msg, mem, victims)
        reason = Reason.STABILIZING if raw < current else Reason.IDLE
        made = decision(current, reason, "within tolerance or stabilising", mem)
        clocks = [t + DOWN_WINDOW_SECONDS for t, d in window if d != raw]
        return with_steady(made, memory, current, clocks, now, raw)

    def advance(self, memory: PolicyMemory, steady: Steady, times: Sequence[float]) -> PolicyMemory:
        """Memory after skipped calls at ``times`` that repeated a steady decision: each call
        keeps the last ``DOWN_WINDOW_SECONDS`` of recommendations and adds ``steady.raw``."""
        if not times or steady.raw is None:
            return memory
        last = times[-1]
        kept = [(t, d) for t, d in memory.recommendations if last - t < DOWN_WINDOW_SECONDS]
        kept += [(t, steady.raw) for t in times if last - t < DOWN_WINDOW_SECONDS]
        return replace(memory, recommendations=tuple(kept))
