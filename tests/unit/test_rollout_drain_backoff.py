"""A rolling update honours the drain back-off: a cell whose rollout drain was abandoned (a
PodDisruptionBudget blocked it until drain.timeout) is not re-picked every timeout.

The pure part (``plan_rollout``: skip held cells, drain the next stale one or wait, say why in
the ``Updated`` message) and the shell part (``rollout_plan`` reads the abandon record from the
outer object's annotations, as the scale-down hold does).
"""

from __future__ import annotations

import copy
from typing import Any, cast

from gpucellpool.api import GPUCellPool
from gpucellpool.api.status import CellStatus
from provisioner.backends.base import CellObjects
from provisioner.fsm.drain_backoff import (
    DRAIN_ABANDON_COUNT_ANNOTATION,
    DRAIN_ABANDONED_ANNOTATION,
)
from provisioner.fsm.identity import TEMPLATE_HASH_ANNOTATION
from provisioner.fsm.observations import parse_time_s
from provisioner.fsm.rollout import RolloutCell, RolloutInput, plan_rollout
from provisioner.fsm.vocabulary import CellPhase as P
from provisioner.kube import JSON, Kind, KubeApi
from provisioner.rollout_shell import rollout_plan, updated_condition
from tests.unit.test_rollout import BASE

NEW, OLD = "new", "old"


NOW_S = 1_790_000_000.0  # 2026-09-21T14:13:20Z


def cell(index: int, held_for_s: float = 0.0, abandons: int = 0) -> RolloutCell:
    return RolloutCell(
        f"gpu-{index}",
        index,
        P.READY,
        OLD,
        busy=False,
        held_for_s=held_for_s,
        held_until_s=NOW_S + held_for_s if held_for_s else 0.0,
        abandons=abandons,
    )


def roll(*cells: RolloutCell, **kw: Any) -> Any:
    inp = RolloutInput(
        cells=cells, current_hash=NEW, desired_replicas=len(cells), rolling_update=True, **kw
    )
    return plan_rollout(inp)


def test_a_held_cell_is_skipped_and_the_next_stale_one_drains() -> None:
    p = roll(cell(0, held_for_s=240.0, abandons=2), cell(1), cell(2))
    assert p.drain == ("gpu-1",) and p.reason == "RollingUpdate"
    assert p.stale == ("gpu-0", "gpu-1", "gpu-2")  # still reported stale
    assert "held: cell gpu-0: drain abandoned 2 time(s)" in p.message
    assert "not drained again before 2026-09-21T14:17:20Z" in p.message  # the end, no countdown


def test_when_every_stale_cell_is_held_the_update_waits_and_says_why() -> None:
    p = roll(cell(0, 100.0, 1), cell(1, 300.0, 3), max_unavailable=1)
    assert (p.drain, p.reason, p.creation_adjustment) == ((), "UpdateBlocked", 0)
    assert "gpu-0: drain abandoned 1 time(s)" in p.message and "14:15:00Z" in p.message
    assert "gpu-1: drain abandoned 3 time(s)" in p.message and "14:18:20Z" in p.message
    assert updated_condition(p) == (False, "UpdateBlocked", p.message)


def test_a_held_cell_does_not_use_up_the_unavailability_budget() -> None:
    p = roll(cell(0, 60.0, 1), cell(1, 60.0, 1), cell(2), cell(3), max_unavailable=2)
    assert p.drain == ("gpu-2", "gpu-3")


def test_after_the_back_off_the_cell_is_drained_again() -> None:
    p = roll(cell(0, held_for_s=0.0, abandons=4), cell(1))
    assert p.drain == ("gpu-0",) and "held" not in p.message


# -- the shell: the record comes from the outer object's annotations ----------------------------

T0 = parse_time_s("2026-11-30T10:00:00Z") or 0.0


def _pool() -> GPUCellPool:
    body = copy.deepcopy(BASE)
    body["spec"]["updatePolicy"] = {"type": "RollingUpdate"}
    body["spec"]["autoscaling"] = {"drain": {"timeout": "60s"}}
    return GPUCellPool.model_validate(body)


def _outer(index: int, abandons: int = 0) -> CellObjects:
    annotations = {TEMPLATE_HASH_ANNOTATION: OLD}
    if abandons:
        annotations[DRAIN_ABANDON_COUNT_ANNOTATION] = str(abandons)
        annotations[DRAIN_ABANDONED_ANNOTATION] = "2026-11-30T10:00:00Z"
    outer = {"metadata": {"name": f"gpu-{index}", "annotations": annotations}}
    return CellObjects(f"gpu-{index}", index, outer)


class NoPods:
    """The workload cluster: reachable, no GPU pods anywhere (every stale cell idle)."""

    async def list(self, kind: Kind, namespace: str | None = None, **_: str) -> list[JSON]:
        return []


async def _plan(now: float) -> Any:
    cells = {c.name: c for c in (_outer(0, abandons=2), _outer(1))}
    rows = {n: CellStatus(name=n, index=c.index, phase=P.READY) for n, c in cells.items()}
    workload = cast(KubeApi, NoPods())
    return await rollout_plan(_pool(), cells, rows, NEW, 2, workload, now)


async def test_the_shell_holds_a_cell_for_timeout_times_two_to_the_n() -> None:
    during = await _plan(T0 + 60 * 4 - 1)  # 2 abandons at 60 s: held for 240 s
    assert during.drain == ("gpu-1",)
    assert "gpu-0: drain abandoned 2 time(s)" in during.message
    assert "not drained again before 2026-11-30T10:04:00Z" in during.message
    after = await _plan(T0 + 60 * 4)
    assert after.drain == ("gpu-0",) and "held" not in after.message
