"""One acceptance rule: ``plan_check.accepted_as_is`` answers what the full check answers.

A plan that names no victim, targets within the spec's bounds, meets no physical limit and no
cell in drain back-off is accepted as it stands by ``accepted_as_is``; ``check_plan`` takes
that path first and the simulator's actuator calls it without building its cells' facts (most
of a replay's decisions). The full check's answer is computed here with that path switched
off, so a rule added to the check but not to ``accepted_as_is`` fails a test: every plan the
shortcut accepts gets the same checked plan, and the same actions, as through the full check.
"""

from __future__ import annotations

import itertools

import pytest

from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellState
from provisioner.fsm import plan_check
from provisioner.fsm.plan_check import Bounds, CellFact, CheckedPlan, Plan, accepted_as_is
from provisioner.fsm.plan_execute import LiveCell, creatable, removals
from simulations.simulator.engine import actuator
from simulations.simulator.engine.actuator import LIVE, actions
from simulations.simulator.engine.world import SimCell
from tests.unit.test_sim_actuator import CONFIG, plan, world

STATES = (CellState.BOOTING, CellState.READY, CellState.DRAINING)
FACTS = (
    CellFact("a"),
    CellFact("b", live=False),
    CellFact("c", held_until_s=5.0),  # in drain back-off until 5 s
    CellFact("d", held_until_s=1.0),  # back-off over at 2 s
    CellFact("e", waiting_for_gpu=True),
)


def _full_check(
    monkeypatch: pytest.MonkeyPatch, plan_: Plan, cells: list[CellFact], bounds: Bounds
) -> CheckedPlan:
    """``check_plan`` with its first rule switched off: every step judged."""
    with monkeypatch.context() as m:
        m.setattr(plan_check, "accepted_as_is", lambda *_: None)
        return plan_check.check_plan(plan_, cells, bounds, 2.0)


def test_what_accepted_as_is_accepts_the_full_check_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = 0
    for size, target, victims, free, floor, generation in itertools.product(
        range(len(FACTS) + 1), range(7), ((), ("a",), ("z",)), (None, 0, 4), (0, 2), (None, 1)
    ):
        for cells in itertools.combinations(FACTS, size):
            bounds = Bounds(floor, 4, 2, free, 2)
            plan_ = Plan(target, victims, generation)
            fast = accepted_as_is(plan_, cells, bounds, 2.0)
            full = _full_check(monkeypatch, plan_, list(cells), bounds)
            assert plan_check.check_plan(plan_, cells, bounds, 2.0) == full
            if fast is not None:
                taken += 1
                assert fast == full, (plan_, cells, bounds)
            elif not victims and free is None and floor <= target <= 4:
                assert any(c.name == "c" for c in cells)  # only a held cell stops the shortcut
    assert taken > 100  # the shortcut was taken, not only the check


def _through_the_check(
    monkeypatch: pytest.MonkeyPatch, config: PolicyConfig, target: int, w_cells: list[SimCell]
) -> tuple[int, tuple[str, ...], CheckedPlan]:
    live = sum(c.state in LIVE for c in w_cells)
    bounds = Bounds(config.min_replicas, config.max_replicas, None, None, config.shape.gpus)
    facts = [CellFact(c.name, live=c.state in LIVE) for c in w_cells]
    checked = _full_check(monkeypatch, Plan(target, ()), facts, bounds)
    if checked.target >= live:
        return creatable(checked, checked.target - live), (), checked
    in_service = [LiveCell(c.name, c.index) for c in w_cells if c.state in LIVE]
    return 0, removals(checked, in_service), checked


def test_every_victimless_plan_gets_what_the_check_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configs = (CONFIG, PolicyConfig(min_replicas=2, max_replicas=4, shape=CONFIG.shape))
    fast = 0
    for config, size in itertools.product(configs, range(4)):
        for states in itertools.product(STATES, repeat=size):
            cells = list(world(*states).cells.values())
            for target in range(0, 8):
                todo = actions(plan(target), cells, config, None, 0.0)
                expected = _through_the_check(monkeypatch, config, target, cells)
                assert (todo.create, todo.drain, todo.checked) == expected, (states, target)
                fast += config.min_replicas <= target <= config.max_replicas
    assert fast > 50  # the shortcut was taken, not only the check


def test_the_actuator_builds_no_cell_facts_for_a_plan_accepted_as_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("read the cells for a plan accepted as it stands")

    monkeypatch.setattr(actuator, "_facts", refuse)
    monkeypatch.setattr(actuator, "check_plan", refuse)
    cells = list(world(CellState.READY, CellState.BOOTING, CellState.DRAINING).cells.values())
    assert (actions(plan(5), cells, CONFIG, None, 0.0).create) == 3
    assert actions(plan(1), cells, CONFIG, None, 0.0).drain == ("cell-1",)
    with pytest.raises(AssertionError, match="read the cells"):
        actions(plan(1, "cell-0"), cells, CONFIG, None, 0.0)  # a victim: the full check


def test_a_decision_the_engine_skips_as_unchanged_is_one_actions_does_nothing_for() -> None:
    configs = (
        CONFIG,
        PolicyConfig(min_replicas=2, max_replicas=4, shape=CONFIG.shape),
        PolicyConfig(min_replicas=3, max_replicas=1, shape=CONFIG.shape),  # floor above ceiling
    )
    states = (*STATES, CellState.FAILED)
    skipped = kept_count = 0
    for config, size, physical in itertools.product(configs, range(4), (None, 2, 40)):
        for cell_states in itertools.product(states, repeat=size):
            w = world(*cell_states)
            cells = list(w.cells.values())
            assert w.live == sum(c.state in LIVE for c in cells)
            for target, victims in itertools.product(range(6), ((), ("cell-0",), ("cell-9",))):
                decision = plan(target, *victims)
                todo = actions(decision, cells, config, physical, 0.0)
                if actuator.unchanged(decision, w.live, config, physical):
                    skipped += 1
                    assert (todo.create, todo.drain) == (0, ()), (cell_states, decision)
                kept_count += target == w.live
    assert skipped > 50
    assert kept_count > skipped  # victims, a physical limit or the bounds stop the shortcut


def test_the_worlds_live_count_follows_every_change_of_state() -> None:
    w = world(CellState.READY, CellState.BOOTING, CellState.DRAINING)
    steps = [
        ("cell-1", CellState.READY),
        ("cell-0", CellState.DRAINING),
        ("cell-2", CellState.READY),
        ("cell-1", CellState.FAILED),
        ("cell-2", CellState.BOOTING),
    ]
    for name, state in steps:
        w.set_state(w.cells[name], state, 1.0)
        assert w.live == sum(c.state in LIVE for c in w.cells.values()), (name, state)
    for name in ("cell-2", "cell-0", "missing", "cell-1"):
        w.remove_cell(name)
        assert w.live == sum(c.state in LIVE for c in w.cells.values()), name
    assert w.live == 0
