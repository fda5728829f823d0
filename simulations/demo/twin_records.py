"""What the recorder keeps of a twin run: each pod's times and the pool's state at an instant.

Why this module exists: these records are read far from the watches that fill them
(``simulations.demo.recorder``): the progress line prints a ``Snapshot`` (``demo.cli``), the
fidelity dump carries each pod's ``PodTimes``, and the run's timelines and waits are derived
from both (``demo.twin_measures``). Kept apart, their readers need not import the watch
machinery, and how a snapshot counts (cells, the demand packed into cells, pending and
running pods) is one pure function, ``snapshot_at``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.policy.types import GPUAsk
from simulations.demo.config import SHAPE
from simulations.simulator.engine import hami as sim_hami


@dataclass
class PodTimes:
    created: float
    bound: float | None = None
    node: str = ""
    ended: float | None = None
    ask: GPUAsk | None = None


@dataclass
class Snapshot:
    """The state at one instant (what the progress line prints)."""

    time_seconds: float
    cells: int
    ready: int
    draining: int
    desired: int
    demand_cells: int
    pods_created: int
    pods_pending: int
    pods_running: int


def snapshot_at(
    at: float, status: Mapping[str, Any], cells: int, pods: Mapping[str, PodTimes]
) -> Snapshot:
    """The state at ``at``: ``cells`` guests, the pool's last ``status`` and ``pods`` by name
    (a pod not ended counts as pending until bound, then running)."""
    phases = Counter(c.get("phase") for c in status.get("cells") or [])
    live = [p for p in pods.values() if p.ended is None]
    asks = [p.ask for p in live if p.ask is not None]
    return Snapshot(
        time_seconds=at,
        cells=cells,
        ready=int(status.get("readyCells") or 0),
        draining=phases["Draining"] + phases["Deleting"],
        desired=int(status.get("desiredReplicas") or 0),
        demand_cells=sim_hami.pack_count(asks, SHAPE),
        pods_created=len(pods),
        pods_pending=sum(1 for p in live if p.bound is None),
        pods_running=sum(1 for p in live if p.bound is not None),
    )
