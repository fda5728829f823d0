"""A pass creates the cells of a wave concurrently (``provisioner.creator.create_cells``).

What this proves: the backend's create of every new cell is under way at once - each create is
answered only once all of the wave's cells have asked (a pass that created one cell after the
other would wait for ever on the first) - and each new cell gets its Pending row. A create that
fails does not cut the others short: they finish, then the failure is raised.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucellpool.api import GPUCellPool
from gpucellpool.api.status import CellPhase
from provisioner.creator import CREATE_CONCURRENCY, create_cells
from provisioner.fsm.membership import CellToCreate, MembershipPlan
from provisioner.kube import KubeError
from provisioner.planning import JoinTemplate

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"


def _pool() -> GPUCellPool:
    body = yaml.safe_load((SAMPLES / "autoscaling-off.yaml").read_text())
    body["metadata"].update({"namespace": "ns", "uid": "u-1", "resourceVersion": "1"})
    return GPUCellPool.model_validate(body)


class Rendezvous:
    """A backend whose creates are answered only once ``expected`` of them are under way;
    ``failing`` indices then raise."""

    def __init__(self, expected: int, failing: frozenset[int] = frozenset()) -> None:
        self.expected = expected
        self.failing = failing
        self.asked: list[int] = []
        self.done: list[int] = []
        self.all_asked = asyncio.Event()

    async def create(self, pool: GPUCellPool, index: int, template: str, secret: Any) -> None:
        self.asked.append(index)
        if len(self.asked) >= self.expected:
            self.all_asked.set()
        await self.all_asked.wait()
        if index in self.failing:
            raise KubeError(500, f"create of cell {index} refused")
        self.done.append(index)


def _plan(n: int) -> MembershipPlan:
    return MembershipPlan(create=tuple(CellToCreate(f"pool-{i}", i) for i in range(n)))


async def _create(backend: Rendezvous, n: int) -> dict[str, Any]:
    return await asyncio.wait_for(
        create_cells(_pool(), backend, _plan(n), JoinTemplate(None), "h1", {}, 0.0),  # type: ignore[arg-type]
        timeout=5.0,
    )


@pytest.mark.asyncio
async def test_a_waves_cells_are_created_together() -> None:
    n = 8
    assert n <= CREATE_CONCURRENCY
    backend = Rendezvous(expected=n)
    rows = await _create(backend, n)
    assert sorted(backend.done) == list(range(n))
    assert sorted(rows) == [f"pool-{i}" for i in range(n)]
    assert all(r.phase is CellPhase.PENDING and r.template_hash == "h1" for r in rows.values())


@pytest.mark.asyncio
async def test_a_failed_create_lets_the_others_finish_then_raises() -> None:
    backend = Rendezvous(expected=4, failing=frozenset({1}))
    with pytest.raises(KubeError, match="cell 1"):
        await _create(backend, 4)
    assert sorted(backend.done) == [0, 2, 3]
