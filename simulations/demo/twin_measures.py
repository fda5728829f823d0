"""What a twin run measured, derived from the recorder's observations once the run is over.

Why this module exists: the recorder (``simulations.demo.recorder``) follows the watches and
keeps what it saw as it happened (each boot with the decision that asked for it, each reaction,
each pod's times, a snapshot per change). What those observations mean for the simulator is
a separate question, answered here and read by the report and the fidelity dump: the timings
the simulator is given (boots in the order the simulator creates cells, the median reactions,
the bind delay after a boot) and the run in the simulator's shapes (the cell timeline, the
``Sample`` timeline, each pod's wait, the counts).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from simulations.demo.boot_order import BootSeen, boots_in_order
from simulations.demo.recorder import Recorder
from simulations.demo.run_log import CellEvent
from simulations.simulator.engine import Sample

# -- the timings the simulator is given -----------------------------------------------------


def binds_after_ready(rec: Recorder) -> list[float]:
    """Per pod created before the cell it was bound to became Ready (it waited for that
    boot): that cell's boot end -> the pod bound on it. The simulator places such a pod
    ``bind_delay_seconds`` (the median of these) after the first cell of its wave is Ready:
    HAMi's pass then opens every cell Ready by then."""
    out = []
    for times in rec.pods.values():
        if times.bound is None:
            continue
        bound, node = times.bound, times.node
        boots = [at for name, at in rec.readies if name == node and at <= bound]
        ready = max(boots, default=None)
        if ready is not None and times.created < ready:
            out.append(bound - ready)
    return out


def removal_step(events: Sequence[CellEvent]) -> float | None:
    """The median time between two guests gone one after another while the later one's
    deletion was already under way (its ``guest deleting`` before the earlier ``guest gone``):
    how long the infrastructure takes per removal when removals queue (the twin's KubeSwift
    releases one GPU at a time). A guest gone without a ``guest deleting`` before it was
    deleted at that instant and queued behind nothing. None: no removal was queued."""
    asked: dict[str, float] = {}
    last_gone: float | None = None
    gaps: list[float] = []
    for event in sorted(events, key=lambda e: e.time_seconds):
        if event.event == "guest deleting":
            asked.setdefault(event.cell, event.time_seconds)
        elif event.event == "guest gone":
            deleted_at = asked.pop(event.cell, event.time_seconds)
            if last_gone is not None and deleted_at < last_gone:
                gaps.append(event.time_seconds - last_gone)
            last_gone = event.time_seconds
    return statistics.median(gaps) if gaps else None


def first_reaction(rec: Recorder) -> float | None:
    """The run's first pod -> the first scale-up decision (the operator's first decision
    also waits for its caches: 6-7 trace s at x20 where the median was 3), or None."""
    if rec.first_request is None or not rec.pods:
        return None
    return max(0.0, rec.first_request - min(p.created for p in rec.pods.values()))


def boot_reaction(rec: Recorder) -> float | None:
    """Cell seen Ready -> the decision that followed it, the median over the changes of
    ``desiredReplicas`` that answered no new pod (the next wave once boots are proven,
    spares cancelled once their pods found the new cell), or None."""
    return statistics.median(rec.boot_reactions) if rec.boot_reactions else None


def reaction(rec: Recorder) -> float | None:
    """Pending pod -> scale-up decision, the median over the decisions that answered new
    pods (the first alone, where none did). The first decision of a run also waits for the
    operator's caches to fill: at x20 it took 8-12 trace seconds where the later ones took
    3-7, so the first alone gave the simulator a reaction the operator did not have."""
    return statistics.median(rec.reactions) if rec.reactions else rec.first_request


def boots(rec: Recorder) -> list[float]:
    """Cell asked for (or, without a decision to match, guest seen) to cell Ready, in the
    order of the cells' names. A wave's cells share the decision's time: they are ordered
    by their index, as the simulator numbers a wave's cells in creation order, not by how
    long they booted (sorted on the boot, the simulator's first cell of a wave got the
    wave's shortest boot and became Ready first every time) nor by which guest the
    provisioner's concurrent creates finished first (the simulator's lowest cell of a wave
    then stood for another twin cell, and HAMi's ties, which go to the lower name in the
    twin and the lower index in the simulator, went to different cells). A boot cancelled
    before it was Ready keeps its place, estimated (``boot_order``)."""
    ready = (BootSeen(*entry) for entry in rec.ready_after)
    cancelled = (BootSeen(*entry, censored=True) for entry in rec.cancelled_boots)
    return boots_in_order([*ready, *cancelled])


def guest_boots(rec: Recorder) -> list[float]:
    """Guest created to cell Ready, in the same order: the boot once the lag is apart."""
    return [boot for _, _, boot in sorted(rec.ready_from_guest)]


# -- the run in the simulator's shapes ------------------------------------------------------


def cell_timeline(rec: Recorder) -> list[tuple[float, float]]:
    """(seconds, cells incl. booting and draining): the fidelity check's twin side."""
    return [(s.time_seconds, float(s.cells)) for s in rec.samples]


def timeline(rec: Recorder) -> tuple[Sample, ...]:
    """The simulator's ``Sample`` shape, for the report and the plot."""
    return tuple(
        Sample(
            time_seconds=s.time_seconds,
            demand_cells=s.demand_cells,
            ready=s.ready,
            booting=max(0, s.cells - s.ready - s.draining),
            draining=s.draining,
            desired=s.desired,
        )
        for s in rec.samples
    )


def waits(rec: Recorder, end: float) -> tuple[float, ...]:
    """Per pod: creation to bound (censored at ``end`` for pods never bound)."""
    return tuple(
        max(0.0, (p.bound if p.bound is not None else end) - p.created) for p in rec.pods.values()
    )


def summary(rec: Recorder) -> dict[str, Any]:
    return {
        "guests_created": len(rec.created_guests),
        "guests_deleted": rec.deleted_guests,
        "pods": len(rec.pods),
        "pods_never_bound": sum(1 for p in rec.pods.values() if p.bound is None),
        "boot_seconds": list(boots(rec)),
        "drain_seconds": list(rec.drains),
        "cancel_seconds": list(rec.cancels),
        "first_scale_up_seconds": rec.first_request,
        "first_guest_seconds": rec.first_guest,
    }
