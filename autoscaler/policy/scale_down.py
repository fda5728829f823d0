"""Scale-down candidates, idle tracking and victim choice, with a re-pack simulation.

Why this module exists: removing a cell is the expensive, disruptive direction. A cell is a
candidate only while its projected utilisation (max over memory, cores, slots; after pending
pods are packed) is below the threshold, and a victim only if it stayed there for the whole
stabilisation window and its pods can be re-packed into the cells that remain, like Cluster
Autoscaler's removal simulation (autoscaler-anchors §1.2). Victims go cheapest-to-drain first:
fewest pods, then lowest utilisation, then newest (highest index). Booting cells are never
victims: they are upcoming capacity that has not had a chance to be used yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.policy.packing import pack
from autoscaler.policy.types import CellShape, CellState, CellView, GPUAsk, GPUUsage, PendingPod


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """Victims in drain order, and candidates kept because their pods fit nowhere else.

    ``over_budget`` is True when a cell with pods could have gone but the disruption budget
    was spent.
    """

    victims: tuple[str, ...]
    blocked: tuple[str, ...]
    over_budget: bool = False


@dataclass(frozen=True, slots=True)
class VictimLimits:
    """At most ``total`` victims; at most ``busy`` with pods (the disruption budget left) and
    at most ``empty`` empty ones (keeping headroom). Removing an empty cell disrupts nothing,
    so empty cells do not spend the disruption budget (like Cluster Autoscaler's bulk removal
    of empty nodes)."""

    total: int
    busy: int
    empty: int


def candidates(
    cells: Sequence[CellView], utilisation: Mapping[str, float], threshold: float
) -> list[CellView]:
    """Ready cells whose projected utilisation is below ``threshold``; empty cells always are
    (so a threshold of 0 means "only empty cells")."""
    out = []
    for c in cells:
        used = utilisation.get(c.name, 0.0)
        if c.state == CellState.READY and (used < threshold or used == 0.0):
            out.append(c)
    return out


def with_idle_cells(
    cells: Sequence[CellView], below: Sequence[CellView], idle: frozenset[str]
) -> list[CellView]:
    """``below`` plus the Ready cells measured idle (``scaleDownOn: Usage``), whatever their
    allocation: an allocated GPU nobody computes on is the waste Usage mode reclaims."""
    named = {c.name for c in below}
    extra = [c for c in cells if c.state == CellState.READY and c.name in idle - named]
    return [*below, *extra]


def update_idle_since(
    previous: Mapping[str, float],
    below: Sequence[CellView],
    now: float,
    cells: Sequence[CellView] = (),
) -> dict[str, float]:
    """``hand_over_idle`` within one observation (nothing carried over from earlier ones)."""
    return hand_over_idle(previous, (), below, now, cells, 0.0)[0]


def hand_over_idle(
    previous: Mapping[str, float],
    left_before: Sequence[tuple[float, float]],
    below: Sequence[CellView],
    now: float,
    cells: Sequence[CellView],
    grace_seconds: float,
) -> tuple[dict[str, float], tuple[tuple[float, float], ...]]:
    """Keep the first time each below-threshold cell was seen so; forget all other cells.
    Returns that and the idle times still waiting to be handed over, as (since, left at).

    A swap keeps the pool's idle time: a cell that left the threshold while still Ready in
    ``cells`` (a pod landed on it) hands its time, oldest first, to a cell that falls below it
    (lowest index first) in this observation or one within ``grace_seconds`` after
    (``left_before`` carries the times not handed over yet). The pool has had that many idle
    cells all along; which cell a pod landed on is a race of moments (HAMi placing a pod as
    another pod ends, seen in one observation or in two a fraction of a second apart), and
    without the hand-over one placement would restart a whole scale-down window in one world
    and not in the other. A cell that left the pool, or is draining, hands nothing.
    """
    still = {c.name for c in below}
    ready = {c.name for c in cells if c.state is CellState.READY}
    left_now = [(t, now) for name, t in previous.items() if name not in still and name in ready]
    waiting = sorted(
        (since, at) for since, at in (*left_before, *left_now) if now - at <= grace_seconds
    )
    fresh = sorted((c for c in below if c.name not in previous), key=lambda c: (c.index, c.name))
    handed = {cell.name: since for cell, (since, _) in zip(fresh, waiting, strict=False)}
    idle = {c.name: previous.get(c.name, handed.get(c.name, now)) for c in below}
    return idle, tuple(e for e in waiting[len(handed) :] if now - e[1] < grace_seconds)


def idle_for(
    below: Sequence[CellView], idle_since: Mapping[str, float], now: float, window_seconds: float
) -> list[CellView]:
    """Candidates that have been below the threshold for the whole window."""
    return [c for c in below if now - idle_since.get(c.name, now) >= window_seconds]


def drain_order(cells: Sequence[CellView], utilisation: Mapping[str, float]) -> list[CellView]:
    """Cheapest to drain first: fewest pods, lowest utilisation, newest (highest index)."""
    return sorted(cells, key=lambda c: (c.pods, utilisation.get(c.name, 0.0), -c.index, c.name))


def is_empty(cell: CellView, usage: Sequence[GPUUsage]) -> bool:
    """No pods and nothing allocated on any GPU: removing it disrupts nothing."""
    return cell.pods == 0 and not cell.pod_asks and all(g.slots == 0 for g in usage)


def pods_to_move(cell: CellView, usage: Sequence[GPUUsage]) -> list[PendingPod]:
    """The cell's pods as asks. Without exact pod asks, each used GPU is one indivisible block
    (its memory and cores in one container, plus zero-sized containers for its other slots),
    which is never easier to place than the real pods: a conservative re-pack."""
    if cell.pod_asks:
        return [
            PendingPod(f"{cell.name}/{i}", asks[0], 0.0, container_asks=tuple(asks))
            for i, asks in enumerate(cell.pod_asks)
            if asks
        ]
    moved = []
    for j, g in enumerate(usage):
        if g.slots == 0 and g.memory_mib == 0 and g.cores_percent == 0:
            continue
        main = GPUAsk(1, g.memory_mib, None, g.cores_percent)
        extra = tuple(GPUAsk(1, 0, None, 0) for _ in range(max(g.slots - 1, 0)))
        moved.append(PendingPod(f"{cell.name}/gpu{j}", main, 0.0, container_asks=(main, *extra)))
    return moved


def choose_victims(
    ordered: Sequence[CellView],
    ready: Sequence[CellView],
    usage: Mapping[str, tuple[GPUUsage, ...]],
    shape: CellShape,
    limits: VictimLimits,
    idle: frozenset[str] = frozenset(),
) -> VictimChoice:
    """Victims within ``limits`` whose pods re-pack, in ``ordered`` (drain) order.

    Pods of a victim are packed into the other Ready cells (never into new or Booting cells).
    A cell that receives moved pods is pinned: it cannot become a victim in the same decision.
    A cell in ``idle`` (measured idle, ``scaleDownOn: Usage``) needs no re-pack: its pods are
    drained, not moved; it still spends the disruption budget.
    """
    working = dict(usage)
    victims: list[str] = []
    blocked: list[str] = []
    pinned: set[str] = set()
    empties = busy = 0
    over_budget = False
    for cell in ordered:
        if len(victims) >= limits.total:
            break
        gpus = working.get(cell.name, ())
        if cell.name in pinned:
            continue
        if is_empty(cell, gpus):
            if empties < limits.empty:
                victims.append(cell.name)
                empties += 1
            continue
        if busy >= limits.busy:
            over_budget = True
            continue
        if cell.name not in idle and not _repack(
            cell, gpus, ready, victims, working, pinned, shape
        ):
            blocked.append(cell.name)
            continue
        victims.append(cell.name)
        busy += 1
    return VictimChoice(tuple(victims), tuple(blocked), over_budget and not victims)


def _repack(
    cell: CellView,
    gpus: Sequence[GPUUsage],
    ready: Sequence[CellView],
    victims: Sequence[str],
    working: dict[str, tuple[GPUUsage, ...]],
    pinned: set[str],
    shape: CellShape,
) -> bool:
    """Pack ``cell``'s pods into the other Ready cells; on success commit to ``working``."""
    targets = [
        CellView(c.name, c.index, CellState.READY, c.created_at, gpus=working[c.name])
        for c in ready
        if c.name != cell.name and c.name not in victims and c.name in working
    ]
    result = pack(pods_to_move(cell, gpus), targets, shape, max_new_cells=0)
    if result.unplaced:
        return False
    for name, after in result.usage.items():
        if after != working[name]:
            pinned.add(name)
            working[name] = after
    return True
