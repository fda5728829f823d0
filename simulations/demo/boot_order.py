"""The twin's boots in the order the simulator creates cells, cancelled boots included.

Why this module exists: the simulator hands the twin's measured boots to its cells in creation
order (a wave's cells by index, ``twin_measures.boots``). A boot the operator cancelled was never
measured, and leaving it out shifted every later cell of its wave (and of the run) onto another
cell's boot: the simulator's cells turned Ready while the twin's same cells were still booting,
so at a wave's end the two worlds cancelled different cells. In a loaded 2 h run (session 23)
the twin cancelled the 10 boots still running at 32.9 s, while the simulator, whose same cells
had turned Ready on later cells' boots, cancelled 3 and retired unused Ready cells for 1.8 s
after.

A cancelled boot is censored: it lasted at least until the cell was seen leaving. It is
estimated as that, or as the slowest boot its wave measured when that is longer (the boots the
twin cancels at a wave's end are the ones still running: its slowest), so the simulator's same
cell is still booting when its cancel comes. A wave with no measured boot falls back to the
median of all measured boots.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BootSeen:
    """One cell's boot: the decision that asked for it (``asked_at``, shared by a wave), its
    place in the wave (``order``, the cell's index) and its length; ``censored``: the boot was
    cancelled, ``seconds`` is how long it had run when the cell was seen leaving."""

    asked_at: float
    order: float
    seconds: float
    censored: bool = False


def boots_in_order(seen: Iterable[BootSeen]) -> list[float]:
    """Every boot in creation order (``asked_at``, then ``order``), cancelled ones estimated."""
    entries = sorted(seen, key=lambda b: (b.asked_at, b.order, b.seconds))
    measured = [b.seconds for b in entries if not b.censored]
    fallback = statistics.median(measured) if measured else 0.0
    slowest: dict[float, float] = {}
    for boot in entries:
        if not boot.censored:
            slowest[boot.asked_at] = max(slowest.get(boot.asked_at, 0.0), boot.seconds)
    return [
        max(b.seconds, slowest.get(b.asked_at, fallback)) if b.censored else b.seconds
        for b in entries
    ]
