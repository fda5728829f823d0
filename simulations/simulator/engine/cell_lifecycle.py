"""What a cell's events do to a run: boots end, cells open to pods, drains start and finish.

Why this module exists: the event loop (``engine.sim``) says *when* things happen; these
handlers are a cell's life between its creation and its removal, the provisioner's rules as
the simulator plays them. A cell is created Booting with a boot time (and failure) drawn from
``BootModel``; at its boot's end it is removed if the boot failed, else Ready at once (billed,
seen by the policy) and open to pods ``bind_delay_seconds`` later, with every other cell Ready
by then (one HAMi pass). A
drained cell waits for its pods or evicts them (``DrainMode``), is removed ``drain_seconds``
after it is empty, and is kept, uncordoned, if it is still busy at ``drain_timeout_seconds``;
a cancelled boot is removed at once or kept Draining for ``cancel_seconds``. With
``removal_step_seconds`` the removals queue: a cell leaves no sooner than that long after the
one before it (``schedule_removal``). Each handler is a function of the ``Simulation`` it
changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.policy.types import CellState
from simulations.simulator.engine.config import DrainMode
from simulations.simulator.engine.events import BOOT, DRAIN, DRAIN_TIMEOUT, OPEN
from simulations.simulator.engine.world import SimCell, busy_until

if TYPE_CHECKING:
    from simulations.simulator.engine.sim import Simulation


def boot_done(sim: Simulation, payload: tuple[str, bool], now: float) -> None:
    name, failed = payload
    cell = sim.world.cells.get(name)
    if cell is None or cell.state is not CellState.BOOTING:
        return  # cancelled while booting
    if failed:
        sim.world.remove_cell(name)
        sim.counters.boot_failures += 1
    else:
        delay = sim.cfg.bind_delay_seconds
        if delay > 0:  # Ready (billed, seen by the policy); HAMi places on it later
            cell.accepting = False
            sim.closed.add(name)
            sim.push(now + delay, OPEN, name)
        sim.world.set_state(cell, CellState.READY, now)
        sim.capacity_up = True
    sim.dirty = True
    sim.push_react(sim.reactions.after_boot(now))


def open_cells(sim: Simulation, name: str) -> None:
    """A booted cell's bind delay is over: HAMi's pass places pods on it, and on every
    other cell Ready by now (the pass sees every placeable node). A wave's cells turn Ready
    within a second of each other: opened one by one, its oldest pods took whichever cell
    opened first, where the twin's HAMi binds them oldest first to the lowest names of
    the wave together."""
    if name not in sim.closed:
        return  # opened with an earlier cell's pass
    for other in sorted(sim.closed):
        cell = sim.world.cells.get(other)
        if cell is not None:  # Ready, or drained since (then it takes nothing anyway)
            sim.world.open_cell(cell)
            sim.capacity_up = sim.dirty = True
    sim.closed.clear()


def drain_done(sim: Simulation, name: str) -> None:
    if sim.world.remove_cell(name) is not None:
        sim.dirty = True


def drain_timeout(sim: Simulation, name: str, now: float) -> None:
    cell = sim.world.cells.get(name)
    if cell is not None and cell.state is CellState.DRAINING and cell.pods:
        sim.world.set_state(cell, CellState.READY, now)  # abandoned: uncordon, keep
        sim.counters.drains_abandoned += 1
        sim.capacity_up = sim.dirty = True


def _evict_all(sim: Simulation, cell: SimCell, now: float) -> None:
    for running in list(cell.pods.values()):
        if sim.running.get(running.pod.key) is not running:
            continue  # stopped with its gang by an earlier eviction of this loop
        stopped = (
            sim.book.evict(running, now) if running.pod.gang else [(running, running.end_at - now)]
        )
        for member, remaining in stopped:  # a started gang stops with any of its members
            sim.world.unbind(member)
            del sim.running[member.pod.key]
            sim.counters.evictions += 1
            if not member.pod.gang and now >= busy_until(member):
                continue  # its work was done: an idle pod evicted is not re-run
            sim.world.enqueue(member.pod, now, remaining)
    sim.capacity_up = sim.dirty = True
    sim.push_react(sim.reactions.after_pod(now))


def schedule_removal(sim: Simulation, name: str, due: float) -> None:
    """Remove cell ``name`` at ``due``, or ``removal_step_seconds`` after the removal before
    it if that is later. The twin's KubeSwift releases a deleted guest's GPU under one ledger
    lock, one guest after another: a plan's 12 retirements left over 1.4 wall s at load 5,
    where the simulator had removed all 12 at one instant."""
    step = sim.cfg.removal_step_seconds
    at = max(due, sim.last_removal_at + step) if step > 0 else due
    sim.last_removal_at = at
    sim.push(at, DRAIN, name)


def start_drain(sim: Simulation, cell: SimCell, now: float) -> None:
    sim.counters.scale_down_cells += 1
    sim.dirty = True
    if cell.state is CellState.BOOTING:  # a cancelled boot (its BOOT event is dropped)
        if sim.cfg.cancel_seconds > 0 or sim.cfg.removal_step_seconds > 0:
            sim.world.set_state(cell, CellState.DRAINING, now)
            schedule_removal(sim, cell.name, now + sim.cfg.cancel_seconds)
        else:
            sim.world.remove_cell(cell.name)
        return
    sim.world.set_state(cell, CellState.DRAINING, now)
    if cell.pods and sim.cfg.drain_mode is DrainMode.EVICT:
        _evict_all(sim, cell, now)
    if not cell.pods:
        schedule_removal(sim, cell.name, now + sim.cfg.drain_seconds)
    elif sim.cfg.drain_timeout_seconds is not None:
        sim.push(now + sim.cfg.drain_timeout_seconds, DRAIN_TIMEOUT, cell.name)


def create_cells(sim: Simulation, count: int, now: float) -> None:
    for _ in range(count):
        cell = sim.world.add_cell(now, CellState.BOOTING)
        seconds, failed = sim.cfg.boot.sample(sim.rng)
        sim.push(now + seconds, BOOT, (cell.name, failed))
    sim.counters.scale_up_cells += count
    sim.dirty = True
