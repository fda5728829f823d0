"""The autoscaler reads the provisioner's plan rejections (status.planRejections).

What these prove: a victim the provisioner refused (drain back-off) is not chosen again by
``decide`` while the rejection stands - another idle cell goes instead, or the decision holds and
says which cell was refused (before, the provisioner swapped in a stand-in the autoscaler then
had to reverse-engineer); a refused victim is no longer "in force" (so it is neither shown as
leaving to the next decision nor carried into the next published plan); and a change of the
rejections wakes the pool's decision at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from autoscaler.loop import Autoscaler, LoopSettings
from autoscaler.loop_publish import victims_in_force
from autoscaler.loop_state import PoolState
from autoscaler.observe import refused_victims
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.types import Observation, PolicyMemory
from gpucellpool.api.pool import GPUCellPool
from provisioner.fsm.plan_check import Bounds, CellFact, Plan, check_plan
from tests.unit.test_loop_fakes import FakeWorkload, FakeWriter, VirtualClock, pool_manifest
from tests.unit.test_policy_decide import BUSY_B, CONFIG, NOW, ready, run

JSON = dict[str, Any]
IDLE_AC = PolicyMemory(idle_since={"a": 0.0, "c": 0.0})


def refusing(raw: JSON, *cells: str) -> JSON:
    status = dict(raw.get("status") or {})
    status["planRejections"] = [
        {"step": "Remove", "cell": c, "reason": "VictimInDrainBackoff", "message": "held"}
        for c in cells
    ] + [{"step": "Create", "reason": "PhysicalGPUExceeded", "message": "no GPU"}]
    return {**raw, "status": status}


def test_decide_passes_over_a_refused_victim() -> None:
    cells = (ready("a", 0), BUSY_B, ready("c", 2))
    free = run(cells=cells, memory=IDLE_AC)
    assert free.reason is Reason.SCALED_DOWN and free.victims[0] == "c"  # newest first
    d = run(cells=cells, memory=IDLE_AC, protected=frozenset({"c"}))
    assert (d.reason, d.victims) == (Reason.SCALED_DOWN, ("a",))
    held = run(cells=cells, memory=IDLE_AC, protected=frozenset({"a", "c"}))
    assert (held.reason, held.desired_replicas, held.victims) == (Reason.NO_IDLE_CELL, 3, ())
    assert "a, c refused by the provisioner" in held.message


def test_refused_victims_are_not_in_force() -> None:
    raw = pool_manifest("a")
    raw["status"] = {"lastDecision": {"reason": "ScaledDown", "act": True, "victims": ["x", "y"]}}
    raw = refusing(raw, "x")
    pool = GPUCellPool.model_validate(raw)
    assert refused_victims(pool) == frozenset({"x"})  # Remove rows only
    assert victims_in_force(PoolState(pool, dict(raw["status"]))) == ("y",)


@pytest.fixture
async def scaler() -> AsyncIterator[tuple[Autoscaler, FakeWriter, VirtualClock]]:
    clock, writer = VirtualClock(), FakeWriter()
    settings = LoopSettings(debounce_s=0.15, tick_s=10.0, resync_s=3600.0)
    autoscaler = Autoscaler(FakeWorkload(), writer, clock, settings=settings)
    yield autoscaler, writer, clock
    await autoscaler.close()


async def test_a_new_rejection_wakes_the_pool(
    scaler: tuple[Autoscaler, FakeWriter, VirtualClock],
) -> None:
    autoscaler, writer, clock = scaler
    autoscaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    published = {**pool_manifest("a"), "status": writer.for_pool("a")[-1]["status"]}
    autoscaler.pool_event("MODIFIED", published)  # our own write coming back: no decision
    await clock.advance(0.2)
    state = autoscaler.pools[("ns", "a")]
    decided = state.decisions
    autoscaler.pool_event("MODIFIED", refusing(published, "a-0"))
    await clock.advance(0.2)
    assert state.decisions == decided + 1
    assert state.last_inputs is not None
    assert state.last_inputs[0].protected == frozenset({"a-0"})


def test_a_refused_victim_does_not_make_the_target_flap() -> None:
    """decide and the provisioner's check, pass after pass: with both idle cells in drain
    back-off the target goes down once and stays (before: 1, 3, 1, 3... as the next plan left
    the refused cells out, the check cleared its rows and the plan after chose them again - a
    status write each way until the back-off ended)."""
    cells = (ready("a", 0), BUSY_B, ready("c", 2))
    facts = tuple(
        CellFact(c.name, held_until_s=None if c.name == "b" else NOW + 600) for c in cells
    )
    memory, protected = IDLE_AC, frozenset[str]()
    targets: list[int] = []
    for step in range(6):
        now = NOW + step
        d = decide(Observation((), cells, protected=protected), memory, CONFIG, now)
        checked = check_plan(Plan(d.desired_replicas, d.victims), facts, Bounds(0, 5), now)
        protected = frozenset(v.cell for v in checked.rejections if v.cell)
        memory, targets = d.memory, [*targets, d.desired_replicas]
    assert protected == {"a", "c"}
    assert targets[1:] == [targets[1]] * 5, targets
