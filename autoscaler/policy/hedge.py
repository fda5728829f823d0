"""Hedged boots: start a few spare cells with every wave, cancel them once nobody waits.

Why this module exists: boot times vary (the simulator's model is lognormal, sigma 0.25, so one
boot in three takes over 1.1 medians), and a pending pod takes whichever cell becomes Ready
first. A wave of exactly as many cells as the backlog needs makes its last pods wait for the
slowest boots; a wave with spare cells lets them take the fastest ones, so the tail wait of a
burst falls towards the median boot. The spares are cheap because they are cancelled while
still booting, as soon as the pods they hedged have found a cell: a cancelled boot costs the
minutes it ran, not the ten idle minutes a Ready cell waits before it may go. This is the
hedged-request idea (send a spare request, keep the first answer) applied to boots.

The rule, over one observation (pure, no clock):

* ``waiting`` = cells pending pods wait for: Booting cells that hold pods after packing, plus
  the new cells the backlog needs;
* ``hedge`` = ``ceil(fraction x waiting)`` spare cells are wanted; empty Booting cells count as
  spares, so the wave adds only the missing ones, and only a wave of ``MIN_WAVE_CELLS`` or
  more starts spares (a wave's last pods keep the spares it started);
* with ``PolicyConfig.boot_hedge_per_pod``, ``ceil(fraction x max(waiting, pods))``, ``pods``
  being the pending pods packed on Booting or new cells (``pods_waiting``): fractional pods
  packed four to a cell get the spares a one-cell-per-pod wave would have; the wave's size
  (``MIN_WAVE_CELLS``) is still counted in cells;
* with ``PolicyConfig.boot_hedge_delay_boots``, spares start only once a pending pod has
  waited that share of the expected boot: a pod that finds room within seconds starts none
  (between two worlds, whether a pod waits a few seconds at a decision at all is a race, and
  with a spare it decides two cells);
* empty Booting cells beyond the hedge are surplus: cancelled at once, newest first (they have
  booted least), never below the floor, the forecast or the headroom the policy keeps;
* a cell that has never run a pod (``unused``: Booting with no pod running on it, or Ready
  and empty ever since) is still a bet: once nothing waits for a booting or new cell, such a
  cell that has been Ready for ``PolicyConfig.unused_ready_grace_boots`` of a boot (plus 1 s,
  ``unused_grace_seconds``) retires, newest first, after the surplus boots, under the same
  floors. Without it a spare cancelled while booting in one world (the operator) but Ready a
  few seconds sooner in the other (the simulator) would idle out the ten-minute scale-down
  window there: seconds of timing turned into idle cell-minutes. With it both worlds drop the
  bet within the grace. A cell started for a pod that then took a faster cell is such a bet
  too; the grace is what keeps the cell a pod was bound to as it turned Ready (live, the pod
  may show on it a decision or two later);
* a scale-up whose cells the cancels have all taken back is forgotten (``forget_cancelled``):
  it restarts no post-scale-up delay and leaves no recommendation made since it at or above
  the count it returned to, so a bet that was never needed holds no idle cell for a window.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellState, CellView, GPUUsage, PendingPod, PolicyMemory

# Spares are started for waves of at least this many cells by default
# (``PolicyConfig.boot_hedge_min_wave``, where the measurements behind it are cited).
MIN_WAVE_CELLS = PolicyConfig().boot_hedge_min_wave


@dataclass(frozen=True, slots=True)
class Hedge:
    """The hedge for one observation: cells waited for, spares wanted and present, and the
    empty Booting cells that may be cancelled (newest first)."""

    waiting: int
    wanted: int
    spares: int
    surplus: tuple[str, ...]
    # Ready cells that never ran a pod, retired once nothing waits (newest first)
    unused: tuple[str, ...] = ()
    # the smallest wave that starts spares (``PolicyConfig.boot_hedge_min_wave``)
    min_wave: int = MIN_WAVE_CELLS
    # whether a pending pod has waited long enough to start spares
    # (``PolicyConfig.boot_hedge_delay_boots``, ``hedge_delay_over``)
    due: bool = True

    @property
    def victims(self) -> tuple[str, ...]:
        """What may go, in order: surplus boots first (not usable yet), then unused Ready
        cells."""
        return (*self.surplus, *self.unused)

    @property
    def missing(self) -> int:
        """Spare cells to add on top of what the backlog needs: only for a wave of at least
        ``min_wave`` cells (a wave's last pods keep the spares it started)."""
        if not self.due or self.waiting < self.min_wave:
            return 0
        return max(0, self.wanted - self.spares)


NO_HEDGE = Hedge(0, 0, 0, ())


def hedge_delay_seconds(config: PolicyConfig) -> float:
    """How long a pending pod waits before spares may start (``boot_hedge_delay_boots`` of
    the expected boot)."""
    return config.boot_hedge_delay_boots * config.boot_seconds


def hedge_delay_over(pending: Sequence[PendingPod], delay_seconds: float, now: float) -> bool:
    """Whether some pending pod has waited ``delay_seconds`` (spares may start)."""
    return delay_seconds <= 0 or any(now - p.first_seen >= delay_seconds for p in pending)


def hedge_delay_clocks(
    pending: Sequence[PendingPod], delay_seconds: float, now: float
) -> list[float]:
    """When pending pods reach the hedge's delay (``decide`` may then start spares)."""
    if delay_seconds <= 0:
        return []
    return [p.first_seen + delay_seconds for p in pending if p.first_seen + delay_seconds > now]


def _holds_anything(gpus: Sequence[GPUUsage]) -> bool:
    return any(g.slots for g in gpus)


def _no_pod(cell: CellView) -> bool:
    return cell.pods == 0 and not cell.pod_asks


def _empty(cell: CellView, usage: Mapping[str, tuple[GPUUsage, ...]]) -> bool:
    return _no_pod(cell) and not _holds_anything(usage.get(cell.name, ()))


def still_unused(cells: Sequence[CellView], before: frozenset[str]) -> frozenset[str]:
    """Cells that are still bets: the Booting cells (no pod runs on a cell before it is Ready;
    the cell a pending pod is packed on is a bet too, since the pod takes whichever cell is
    Ready first), and the Ready cells that were so ``before`` and have run no pod since (no pod
    on them, no GPU use: a pod seen running there ends the bet for good). A pending pod packed
    on a Ready cell keeps it (``hedge`` retires only empty cells after packing), and a Ready
    bet retires only after the grace (``ripe_unused``): live, the pod a cell was started for
    shows on it a decision or two after it turned Ready (the twin:
    tests/integration/test_loop_provision)."""
    return frozenset(
        c.name
        for c in cells
        if _no_pod(c)
        and (
            c.state == CellState.BOOTING
            or (c.state == CellState.READY and c.name in before and not _holds_anything(c.gpus))
        )
    )


# A cell's Ready time comes from its status row's lastTransitionTime, which is whole seconds
# (metav1.Time): the age read from it is up to this much too old.
READY_AGE_RESOLUTION_SECONDS = 1.0


def unused_grace_seconds(config: PolicyConfig) -> float:
    """How long an unused cell is Ready before it may retire: ``unused_ready_grace_boots`` of
    the expected boot, plus the resolution of the Ready time (without it, the twin's boots,
    compressed x20, had a grace of 0.75 s that whole-second timestamps could make none)."""
    return config.unused_ready_grace_boots * config.boot_seconds + READY_AGE_RESOLUTION_SECONDS


def _ready_bets(cells: Sequence[CellView], unused: frozenset[str]) -> list[CellView]:
    return [c for c in cells if c.name in unused and c.state == CellState.READY]


def ripe_unused(
    cells: Sequence[CellView], unused: frozenset[str], grace_seconds: float, now: float
) -> frozenset[str]:
    """The Ready cells of ``unused`` that have been Ready for ``grace_seconds`` (a Ready cell
    without ``ready_at`` counts as Ready long enough)."""
    return frozenset(
        c.name
        for c in _ready_bets(cells, unused)
        if c.ready_at is None or now - c.ready_at >= grace_seconds
    )


def unused_grace_clocks(
    cells: Sequence[CellView], unused: frozenset[str], grace_seconds: float, now: float
) -> list[float]:
    """When Ready cells of ``unused`` reach the grace (``decide`` may then retire them)."""
    ready = (c.ready_at for c in _ready_bets(cells, unused))
    ends = (at + grace_seconds for at in ready if at is not None)
    return [end for end in ends if end > now]


def pods_waiting(cells: Sequence[CellView], placements: Sequence[tuple[str, str]]) -> int:
    """Pending pods ``placements`` (``PackingResult.placements``: pod key -> cell name) puts
    on a Booting cell or on a new one (a name no cell has: ``new-0``, ...): the pods that wait
    for a boot."""
    if not placements:
        return 0
    known = {c.name: c.state for c in cells}
    return sum(
        1 for _, cell in placements if known.get(cell, CellState.BOOTING) is CellState.BOOTING
    )


def _newest_first(cells: Sequence[CellView]) -> list[CellView]:
    return sorted(cells, key=lambda c: (c.created_at, c.index, c.name), reverse=True)


def hedge(
    cells: Sequence[CellView],
    usage: Mapping[str, tuple[GPUUsage, ...]],
    new_cells: int,
    fraction: float,
    unused: frozenset[str] = frozenset(),
    min_wave: int = MIN_WAVE_CELLS,
    waiting_pods: int = 0,
) -> Hedge:
    """The hedge for ``cells`` after packing (``usage``: projected per-cell usage, as
    ``PackingResult.usage``; ``new_cells``: cells the backlog still needs; ``unused``: the
    cells that had never run a pod at the last call and have been Ready for the grace,
    ``still_unused`` and ``ripe_unused``; ``min_wave``: the smallest wave that starts spares;
    ``waiting_pods``: with the per-pod basis, the pods waiting for booting or new cells,
    ``pods_waiting``, else 0: spares are sized on the larger of it and the cells waited
    for)."""
    booting = [c for c in cells if c.state == CellState.BOOTING]
    held = sum(1 for c in booting if _holds_anything(usage.get(c.name, ())))
    empty = sorted(  # oldest first: the spares kept are the ones that have booted longest
        (c for c in booting if not _holds_anything(usage.get(c.name, ()))),
        key=lambda c: (c.created_at, c.index, c.name),
    )
    waiting = held + new_cells
    basis = max(waiting, waiting_pods) if waiting else 0
    wanted = math.ceil(fraction * basis - 1e-9) if basis and fraction > 0 else 0
    surplus = tuple(c.name for c in reversed(empty[wanted:]))
    bets = (
        ()
        if waiting
        else _newest_first(
            [
                c
                for c in cells
                if c.state == CellState.READY and c.name in unused and _empty(c, usage)
            ]
        )
    )
    unused_ready = tuple(c.name for c in bets)
    return Hedge(waiting, wanted, len(empty), surplus, unused_ready, min_wave)


def cancellable(hedged: Hedge, current: int, keep: int, empty_cells: int, headroom: int) -> int:
    """How many of ``hedged.victims`` may go now: never below ``keep`` cells (the floor, the
    forecast) nor below ``headroom`` empty cells."""
    return max(0, min(len(hedged.victims), current - keep, empty_cells - headroom))


def cancel_boots(
    hedged: Hedge, count: int, current: int, memory: PolicyMemory, now: float
) -> Decision:
    """Cancel the ``count`` first of ``hedged.victims`` (newest surplus boots, then unused Ready
    cells). Recorded as a scale event (rate policies see it), not as a scale-down: the
    post-scale-down cooldown is for drained cells, and these never ran a pod."""
    victims = hedged.victims[:count]
    boots = min(count, len(hedged.surplus))
    mem = replace(memory, scale_events=(*memory.scale_events, (now, -count)))
    mem = forget_cancelled(mem, current - count, now)
    parts = [f"cancelling {boots} surplus booting cell(s)"] if boots else []
    if count > boots:
        parts.append(f"retiring {count - boots} Ready cell(s) that never ran a pod")
    message = (
        f"pending pods wait for {hedged.waiting} booting or new cell(s), {hedged.wanted} spare "
        f"boot(s) hedge them; {' and '.join(parts)}, scaling {current} -> {current - count}"
    )
    return Decision(
        current - count, Reason.SPARES_CANCELLED, message, mem, victims, empty_victims=victims
    )


def forget_cancelled(memory: PolicyMemory, count: int, now: float) -> PolicyMemory:
    """``memory`` without the scale-ups that cancelled bets have taken back to ``count`` cells:
    a scale-up whose cells all went before running a pod restarts no
    ``scaleDownDelayAfterScaleUp`` and leaves no recommendation of ``count`` or more made
    since it in the stabilisation windows (the one made ``now`` stays). Without it, a pod that
    waited seconds for a GPU another pod was freeing (in one world and not the other, a race
    of seconds) held a pool's idle cell for the whole ten-minute window after its spares were
    cancelled. A recommendation made meanwhile counted the cells being taken back: one of
    exactly ``count`` (the pool less its idle cells, booting spares included) held the idle
    cells as firmly as a higher one, and only where a decision happened to fall inside the
    bet (the operator decides on every event, the simulator on fewer). Memory whose last
    scale-up is not its newest record (stored by an earlier version) is kept as it is."""
    ups = list(memory.scale_ups)
    if not ups or ups[-1][0] != memory.last_scale_up_at:
        return memory
    undone: list[tuple[float, int, float | None]] = []
    while ups and ups[-1][1] >= count:
        undone.append(ups.pop())
    if not undone:
        return memory
    first, _, before = undone[-1]
    recs = tuple((t, r) for t, r in memory.recommendations if t < first or t >= now or r < count)
    return replace(memory, last_scale_up_at=before, scale_ups=tuple(ups), recommendations=recs)
