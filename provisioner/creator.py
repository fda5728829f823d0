"""Creating a plan's new cells: the outer objects of every new cell of a pass, concurrently.

Why this module exists: the cells of a wave are independent (each one's bootstrap Secret, seed
profile and guest are named by its own index), yet they were created one after another, three
writes each, so under load the eighth guest of a wave started seconds after the first. The
simulator starts a wave's boots together, so that lag was one of the timing differences between
the live operator and the simulator (docs/autoscaling.md, hedged boots: a hedge makes waves of
many cells common). Now the writes of different cells overlap, at most ``CREATE_CONCURRENCY`` at
once; one cell's own writes stay in order. A create that fails does not cut the others short:
all run to their end, then the first failure is raised (the pass ends as after a crash; every
write is an idempotent apply of a deterministic name, so the next pass finds what was made).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellPhase, CellStatus
from provisioner.backends.base import CellBackend
from provisioner.cells import identity
from provisioner.fsm.bootstrap import RenderError, bootstrap_secret
from provisioner.fsm.manifests import owner_reference
from provisioner.fsm.membership import CellToCreate, MembershipPlan
from provisioner.fsm.rows import to_time
from provisioner.kube import JSON
from provisioner.planning import JoinTemplate, render

CREATE_CONCURRENCY = 16  # new cells whose writes run at once in one pass


def _rendered(
    pool: GPUCellPool, join: JoinTemplate, plan: MembershipPlan, owners: list[JSON]
) -> list[tuple[CellToCreate, JSON | None]]:
    """Each new cell with its bootstrap Secret (None: the pool has no join template), up to
    the first cell whose template does not render (it and those after it wait, as before)."""
    out: list[tuple[CellToCreate, JSON | None]] = []
    for new in plan.create:
        rendered = render(pool, join, new.index)
        if isinstance(rendered, RenderError):
            break
        secret = None
        if rendered is not None:
            secret = bootstrap_secret(rendered, identity(pool), new.index, owners)
        out.append((new, secret))
    return out


def _row(new: CellToCreate, old: CellStatus | None, template: str, now: float) -> CellStatus:
    return CellStatus(
        name=new.name,
        index=new.index,
        phase=CellPhase.PENDING,
        reason="GuestNotCreated",
        message="outer objects created this pass",
        failure_count=(old.failure_count if old else None),
        template_hash=template,
        last_transition_time=to_time(now),
        creation_time=to_time(now),
    )


async def create_cells(
    pool: GPUCellPool,
    backend: CellBackend,
    plan: MembershipPlan,
    join: JoinTemplate,
    template: str,
    prev: Mapping[str, CellStatus],
    now: float,
) -> dict[str, CellStatus]:
    """Create ``plan.create``'s cells (concurrently) and return their Pending rows by name."""
    owners = [owner_reference(pool, controller=True)]
    todo = _rendered(pool, join, plan, owners)
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(new: CellToCreate, secret: JSON | None) -> None:
        async with gate:
            await backend.create(pool, new.index, template, secret)

    results = await asyncio.gather(*(one(n, s) for n, s in todo), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return {new.name: _row(new, prev.get(new.name), template, now) for new, _ in todo}
