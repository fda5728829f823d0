"""``spec.autoscaling.warmSpare`` and ``spec.autoscaling.bootHedge``: capacity bought ahead of
the pods that will need it.

Why this module exists: both knobs trade cell-hours for tail wait, and a pool author picks them
from a simulated trace of their own cluster (``gpucellpool sweep``). A warm spare is a Ready
cell kept empty while the pool is growing; a hedged boot is a spare cell started with a
scale-up and cancelled while still booting once the pods it hedged have found a cell. The warm
spare is off by default, hedged boots are on; docs/autoscaling.md has the measurements behind
the numbers quoted here.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from gpucellpool.api.base import KubeModel
from gpucellpool.api.durations import Duration


class WarmSpare(KubeModel):
    """Empty cells kept while lone pods keep arriving at a pool that shares GPUs, so the next
    one finds a Ready cell instead of waiting a boot; unlike headroomCells, a pool whose
    arrivals stop, come in bursts or ask whole GPUs keeps none. On by default."""

    cells: int = Field(default=1, ge=0, le=100)
    """Keep this many empty cells (within maxReplicas) while the rule below holds; 0 turns it
    off. A pod that takes the spare makes the pool grow again, so the spare is replaced and
    kept; once the rule lapses it is an idle cell like any other."""
    keep_for: Duration = Duration("90m")
    """How far back the rule looks: the spare is kept while loneArrivals of them ended within
    this time (with loneArrivals 0: while the pool grew within it)."""
    lone_arrivals: int = Field(default=2, ge=0, le=100)
    """Keep the spare only after this many lone arrivals within keepFor: growths less than a
    boot apart are one arrival, which is lone when its pending pods needed at most `cells` new
    cells (the spare would have taken them all) and the pool shared GPUs (a pending pod asked
    part of a GPU, or a GPU held two pods or a fractional one). 0 keeps the spare after any
    growth. The default 2 (with 1 cell for 90m) put the tail wait of lone fractional pods
    ahead of Cluster Autoscaler's on a public trace, and kept no spare on month-long traces of
    whole-GPU jobs or on bursts."""


class HedgeBasis(StrEnum):
    PODS = "Pods"
    CELLS = "Cells"


class BootHedge(KubeModel):
    """Spare boots started with each wave of cells, so a wave's last pods take the fastest
    boots instead of waiting for the slowest; the spares still booting are cancelled once no
    pending pod waits for a booting cell (a cancelled boot costs the minutes it ran). No spare
    starts while boots are not yet proven (no cell Ready yet, or a cell Failed), nor with
    scale-down off (spares could not be cancelled). On by default; sparePercent 0 turns it
    off."""

    spare_percent: int = Field(default=75, ge=0, le=400)
    """Spare boots per 100 cells (or pods, see per) that pending pods wait for, rounded up; 0
    turns hedging off. The default 75 was ahead of Cluster Autoscaler on cost and p95 wait on
    four month-long public traces of bursty one-GPU jobs."""
    min_wave_cells: int = Field(default=1, ge=1, le=100)
    """Only a wave of at least this many cells gets spares."""
    per: HedgeBasis = HedgeBasis.PODS
    """Pods: size the spares by the larger of the cells and the pods waiting for boots, so a
    wave of fractional pods packed several to a cell gets as many fast boots as a whole-GPU
    view would start. Cells: by the cells only. The same for whole-GPU pods on one-GPU
    cells."""
