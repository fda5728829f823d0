"""The run's timeline: demand against Ready, Booting and Draining cells, sampled at a fixed step.

Why this module exists: the report's figures (demand vs capacity over time) need a sample of
the world every ``samples``-th of the trace, and the demand in cells (what the running and
pending pods pack into) is a packing, too costly to redo at every sample. Keeping the sampling
here, with its one memo (re-pack only after the world changed), keeps the event loop to events.

The billable cell count is kept exactly as well, one point per change (``cells``): a sample
every second or more shows a change up to a whole step late, which is what the fidelity check
against the twin (recorded at every watch event) measured as disagreement at each scale-up and
scale-down of a compressed run (1 s steps = 20 trace seconds at x20).
"""

from __future__ import annotations

from autoscaler.policy.types import CellShape, CellState
from simulations.simulator.engine import hami
from simulations.simulator.engine.metrics import Sample
from simulations.simulator.engine.world import World


class Timeline:
    """Samples taken so far, and the demand packing they share while the world is unchanged."""

    def __init__(self, shape: CellShape, every_seconds: float) -> None:
        self.shape = shape
        self.every_seconds = every_seconds
        self.samples: list[Sample] = []
        self.cells: list[tuple[float, int]] = []  # (time, billable cells) at each change
        self._demand_stale = True
        self._demand_cells = 0

    def world_changed(self, now: float, billable: int) -> None:
        """Pods or cells changed at ``now``: the next sample packs the demand again, and the
        billable cell count is recorded if it moved."""
        self._demand_stale = True
        if not self.cells or self.cells[-1][1] != billable:
            self.cells.append((now, billable))

    def sample(self, world: World, desired: int, now: float) -> None:
        """Record the world as it is at ``now``."""
        if self._demand_stale:
            self._demand_stale = False
            self._demand_cells = hami.pack_count(world.demand_asks(), self.shape)
        self.samples.append(
            Sample(
                time_seconds=now,
                demand_cells=self._demand_cells,
                ready=world.count(CellState.READY),
                booting=world.count(CellState.BOOTING),
                draining=world.count(CellState.DRAINING),
                desired=desired,
            )
        )
