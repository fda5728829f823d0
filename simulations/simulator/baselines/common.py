"""Small helpers the peer baselines share: which cells count, and a plain Decision.

Why this module exists: each baseline is a few documented rules; the bookkeeping around them
(live cells, clamping to min/max, building a ``Decision``) is the same and should not be
repeated four times. Utilisation arithmetic comes from the policy's packing module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

from autoscaler.policy.decision import Decision, Reason, Steady
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellState, CellView, PolicyMemory

LIVE = (CellState.BOOTING, CellState.READY)


def live(cells: Sequence[CellView]) -> list[CellView]:
    """Cells that are or will be capacity (Booting or Ready)."""
    return [c for c in cells if c.state in LIVE]


def ready(cells: Sequence[CellView]) -> list[CellView]:
    return [c for c in cells if c.state is CellState.READY]


def booting(cells: Sequence[CellView]) -> list[CellView]:
    return [c for c in cells if c.state is CellState.BOOTING]


def clamp(desired: int, config: PolicyConfig) -> int:
    return max(config.min_replicas, min(config.max_replicas, desired))


def decision(
    desired: int,
    reason: Reason,
    message: str,
    memory: PolicyMemory,
    victims: tuple[str, ...] = (),
) -> Decision:
    return Decision(
        desired_replicas=desired, reason=reason, message=message, memory=memory, victims=victims
    )


def with_steady(
    made: Decision,
    before: PolicyMemory,
    current: int,
    clocks: Iterable[float | None],
    now: float,
    raw: int | None = None,
) -> Decision:
    """``made`` with the promise that it holds until the first of ``clocks`` at or after
    ``now`` while the observation stays the same (see ``autoscaler.policy.next_change``); no
    promise when it changes the count or records a scale event."""
    after = made.memory
    if (
        made.desired_replicas != current
        or after.last_scale_up_at != before.last_scale_up_at
        or after.last_scale_down_at != before.last_scale_down_at
    ):
        return made
    until = min((t for t in clocks if t is not None and t >= now), default=math.inf)
    return replace(made, steady=Steady(until=until, raw=raw))


def cheapest_victims(cells: Sequence[CellView], count: int) -> tuple[str, ...]:
    """Booting cells first (newest first), then Ready cells with the fewest pods."""
    order = sorted(
        live(cells),
        key=lambda c: (c.state is CellState.READY, c.pods, -c.created_at, -c.index),
    )
    return tuple(c.name for c in order[: max(0, count)])


T = TypeVar("T")


class ViewMemo(Generic[T]):
    """Memoise a per-cell value on the identity of the immutable ``CellView``.

    The engine hands out the same view object while a cell is unchanged, so a baseline that
    recomputes per-cell figures every 10 s tick pays only for cells that changed.
    """

    def __init__(self, compute: Callable[[CellView], T]) -> None:
        self.compute = compute
        self.memo: dict[int, tuple[CellView, T]] = {}

    def __call__(self, cell: CellView) -> T:
        hit = self.memo.get(id(cell))
        if hit is not None and hit[0] is cell:
            return hit[1]
        value = self.compute(cell)
        if len(self.memo) > 4096:
            self.memo.clear()
        self.memo[id(cell)] = (cell, value)
        return value

    def values(self, cells: Iterable[CellView]) -> list[T]:
        """The value of each of ``cells``, in order (one call for a whole tick's cells)."""
        memo, compute = self.memo, self.compute
        out = []
        for cell in cells:
            hit = memo.get(id(cell))
            if hit is None or hit[0] is not cell:
                value = compute(cell)
                if len(memo) > 4096:
                    memo.clear()
                memo[id(cell)] = hit = (cell, value)
            out.append(hit[1])
        return out
