"""Cluster-Autoscaler-style baseline, from its documented rules (autoscaler-anchors §1).

Why this module exists: CA is what most GPU pools use today; the comparison must show what it
does with HAMi fractions. Rules modelled (defaults as documented):

- loop every ``--scan-interval`` 10 s; acts on pending (unschedulable) pods only;
- CA's view of a cell is whole ``nvidia.com/gpu`` devices: a HAMi pod asking one GPU at 30 %
  takes a whole GPU in CA's simulation (CA cannot see gpumem/gpucores, HAMi#1099), so a
  fractional pod fills a 1-GPU cell;
- scale-up: pending pods are first fitted onto upcoming (Booting) and free Ready capacity in
  that view, the rest are bin-packed onto new template nodes (``binpacking`` estimator);
- scale-down: a Ready cell is unneeded while its GPU-count-only utilisation is below
  ``--scale-down-gpu-utilization-threshold`` 0.5 and its pods fit elsewhere; it is removed
  after ``--scale-down-unneeded-time`` 10 min, not within ``--scale-down-delay-after-add``
  10 min of a scale-up; empty cells go in bulk (up to 10), non-empty ones one at a time
  (``--max-drain-parallelism`` 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellState, CellView, Observation, PolicyMemory
from simulations.simulator.baselines.common import (
    ViewMemo,
    booting,
    clamp,
    decision,
    live,
    ready,
    with_steady,
)

UNNEEDED_SECONDS = 600.0
DELAY_AFTER_ADD_SECONDS = 600.0
GPU_UTILISATION_THRESHOLD = 0.5
MAX_EMPTY_BULK = 10


def used_devices(cell: CellView) -> int:
    """Whole GPUs CA believes are requested on ``cell`` (each pod: ``gpu_count`` devices)."""
    if cell.pod_asks:
        return sum(max(a.gpu_count for a in asks) for asks in cell.pod_asks)
    return sum(1 for g in cell.gpus if g.slots > 0)


def _first_fit(free: list[int], need: int) -> bool:
    for i, units in enumerate(free):
        if units >= need:
            free[i] -= need
            return True
    return False


class ClusterAutoscalerStyle:
    """CA's scale-up/scale-down rules with HAMi pods seen as whole GPUs."""

    name = "cluster-autoscaler"
    tick_seconds = 10.0
    react_on_arrival = False

    def __init__(self) -> None:
        self._used = ViewMemo(used_devices)

    def decide(
        self, observation: Observation, memory: PolicyMemory, config: PolicyConfig, now: float
    ) -> Decision:
        cells = observation.cells
        current = len(live(cells))
        new_nodes = self._scale_up_estimate(observation, config)
        if new_nodes:
            desired = clamp(current + new_nodes, config)
            if desired > current:
                mem = replace(memory, last_scale_up_at=now)
                msg = f"{new_nodes} new node(s) for pending pods"
                return decision(desired, Reason.SCALED_UP, msg, mem)
        made = self._scale_down(observation, memory, config, now, current)
        clocks = [t + UNNEEDED_SECONDS for t in made.memory.idle_since.values()]
        if memory.last_scale_up_at is not None:
            clocks.append(memory.last_scale_up_at + DELAY_AFTER_ADD_SECONDS)
        return with_steady(made, memory, current, clocks, now)

    def _scale_up_estimate(self, observation: Observation, config: PolicyConfig) -> int:
        if not observation.pending:
            return 0  # nothing to fit: no cell's free devices need counting
        gpus = config.shape.gpus
        free = [gpus for _ in booting(observation.cells)]
        free += [gpus - used for used in self._used.values(ready(observation.cells))]
        new: list[int] = []
        for pod in sorted(observation.pending, key=lambda p: (p.first_seen, p.key)):
            need = pod.ask.gpu_count
            if need > gpus or _first_fit(free, need) or _first_fit(new, need):
                continue
            new.append(gpus - need)
        return len(new)

    def _unneeded(self, cells: Sequence[CellView], config: PolicyConfig) -> list[CellView]:
        gpus = config.shape.gpus
        candidates = ready(cells)
        used_by = self._used.values(candidates)
        spare = sum([gpus - used for used in used_by])
        return [
            cell
            for cell, used in zip(candidates, used_by, strict=True)
            if used / gpus < GPU_UTILISATION_THRESHOLD and spare - (gpus - used) >= used
        ]

    def _scale_down(
        self,
        observation: Observation,
        memory: PolicyMemory,
        config: PolicyConfig,
        now: float,
        current: int,
    ) -> Decision:
        unneeded = self._unneeded(observation.cells, config)
        since = {c.name: memory.idle_since.get(c.name, now) for c in unneeded}
        # the same cells unneeded since the same times: the memory as it was (no copy)
        mem = memory if since == memory.idle_since else replace(memory, idle_since=since)
        if memory.last_scale_up_at is not None and now - memory.last_scale_up_at < (
            DELAY_AFTER_ADD_SECONDS
        ):
            return decision(current, Reason.SCALE_DOWN_DELAYED, "delay after add", mem)
        ripe = [c for c in unneeded if now - since[c.name] >= UNNEEDED_SECONDS]
        empty = [c.name for c in ripe if c.pods == 0][:MAX_EMPTY_BULK]
        draining = any(c.state is CellState.DRAINING and c.pods for c in observation.cells)
        busy = [c.name for c in ripe if c.pods > 0][: 0 if draining else 1]
        victims = tuple(empty + busy)[: max(0, current - config.min_replicas)]
        if not victims:
            return decision(current, Reason.IDLE, "no node unneeded long enough", mem)
        mem = replace(mem, last_scale_down_at=now)
        msg = f"removing {len(victims)} unneeded node(s)"
        return decision(current - len(victims), Reason.SCALED_DOWN, msg, mem, victims)
