"""The oracle: what an autoscaler with perfect foresight and zero boot time would pay.

Why this module exists: a cost ratio needs a denominator. At every instant the oracle runs
exactly the cells that the pods running *at that instant* (every pod starting on arrival, no
wait) pack into with the policy's packing, repacked from scratch (free migration). Its cost is
the time integral of that count; its waits are zero.

It is a reference, not a theorem: packing is a heuristic, and a policy that delays pods runs a
different set of pods at each instant, so a policy could in principle undercut it by a hair on
a pathological trace. In practice every real policy pays boot time and idle cells and sits well
above it. For long traces the count is evaluated at no more than ``max_points`` instants (a
regular grid, active set at the start of each step) to bound run time.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise

from autoscaler.policy.packing import ask_size, lower_bound_cells, pack
from autoscaler.policy.types import CellShape, GPUAsk, PendingPod
from simulations.simulator.engine import gc_pause, hami
from simulations.simulator.engine.metrics import Sample, SimResult
from simulations.simulator.traces.model import TracePod

PACK = "pack"
BOUND = "bound"


def _change_times(pods: Sequence[TracePod], max_points: int) -> list[float]:
    times = sorted(
        {p.arrival_seconds for p in pods} | {p.arrival_seconds + p.duration_seconds for p in pods}
    )
    if len(times) <= max_points:
        return times
    step = (times[-1] - times[0]) / max_points
    return [times[0] + i * step for i in range(max_points + 1)]


class _Sweep:
    """The pods running at a non-decreasing sequence of instants, maintained incrementally."""

    def __init__(self, pods: Sequence[TracePod]) -> None:
        self.pods = sorted(pods, key=lambda p: p.arrival_seconds)
        self.next = 0
        self.ends: list[tuple[float, int]] = []
        self.active: dict[int, PendingPod] = {}
        self.asks: Counter[GPUAsk] = Counter()  # the asks of ``active``, kept in step

    def at(self, time: float) -> list[PendingPod]:
        while self.next < len(self.pods) and self.pods[self.next].arrival_seconds <= time:
            pod = self.pods[self.next]
            self.active[self.next] = PendingPod(key=pod.key, ask=pod.ask, first_seen=0.0)
            self.asks[pod.ask] += 1
            heapq.heappush(self.ends, (pod.arrival_seconds + pod.duration_seconds, self.next))
            self.next += 1
        while self.ends and self.ends[0][0] <= time:
            gone = self.active.pop(heapq.heappop(self.ends)[1], None)
            if gone is not None:
                self.asks[gone.ask] -= 1
                if not self.asks[gone.ask]:
                    del self.asks[gone.ask]
        return list(self.active.values())

    def key(self) -> frozenset[tuple[GPUAsk, int]]:
        """The multiset of active asks: equal keys pack into the same cells."""
        return frozenset(self.asks.items())


def _cells(active: list[PendingPod], shape: CellShape, method: str) -> tuple[int, float]:
    """(cells, mean utilisation) for the pods running at one instant."""
    if method == BOUND:
        cells = lower_bound_cells(active, shape)
        return cells, ask_size((p.ask for p in active), shape) / max(1, cells * shape.gpus)
    result = pack(active, (), shape)
    utils = list(result.utilisation.values())
    return result.new_cells, sum(utils) / len(utils)


def cells_over_time(
    pods: Sequence[TracePod], shape: CellShape, max_points: int = 4000, method: str = PACK
) -> list[tuple[float, int, float]]:
    """(time, cells, mean utilisation) at each change point (or grid point).

    ``method`` is ``pack`` (the policy's packing, repacked each instant) or ``bound`` (the
    policy's per-resource lower bound, much faster on huge traces).
    """
    ordered = sorted(pods, key=lambda p: p.arrival_seconds)
    sweep = _Sweep(ordered)
    memo: dict[frozenset[tuple[GPUAsk, int]], tuple[int, float]] = {}
    out = []
    for time in _change_times(ordered, max_points):
        active = sweep.at(time)
        if not active:
            out.append((time, 0, 0.0))
            continue
        key = sweep.key()
        if key not in memo:
            memo[key] = _cells(active, shape, method)
        out.append((time, *memo[key]))
    return out


def _scale_counts(curve: list[tuple[float, int, float]]) -> tuple[int, int]:
    ups = downs = 0
    for (_, before, _), (_, after, _) in pairwise(curve):
        ups += max(0, after - before)
        downs += max(0, before - after)
    return ups, downs


def oracle(
    pods: Sequence[TracePod], shape: CellShape, max_points: int = 4000, method: str = PACK
) -> SimResult:
    """The oracle's ``SimResult`` for ``pods`` on cells of ``shape``."""
    fit = [p for p in pods if hami.fits_fresh_cell(p.ask, shape)]
    with gc_pause.relaxed():  # many small packings: the collector off the trace (engine)
        curve = cells_over_time(fit, shape, max_points, method)
    cell_seconds = util_seconds = ready_seconds = 0.0
    for (time, cells, util), (after, _, _) in pairwise(curve):
        cell_seconds += cells * (after - time)
        util_seconds += util * cells * (after - time)
        ready_seconds += cells * (after - time)
    ups, downs = _scale_counts(curve)
    stride = max(1, len(curve) // 1500)
    timeline = tuple(Sample(t, c, c, 0, 0, c) for t, c, _ in curve[::stride])
    return SimResult(
        policy="oracle",
        pods=len(fit),
        cost_cell_hours=cell_seconds / 3600.0,
        waits_seconds=tuple(0.0 for _ in fit),
        unplaced=0,
        unschedulable=len(pods) - len(fit),
        evictions=0,
        scale_up_cells=ups,
        scale_down_cells=downs,
        boot_failures=0,
        mean_utilisation=util_seconds / ready_seconds if ready_seconds else 0.0,
        end_seconds=curve[-1][0] if curve else 0.0,
        events=len(curve),
        decisions=0,
        reasons=(),
        timeline=timeline,
        boot_seconds=0.0,
    )
