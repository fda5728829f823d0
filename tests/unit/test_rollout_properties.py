"""Property tests: a rolling update never drains more Ready cells than maxUnavailable allows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.fsm.rollout import RolloutCell, RolloutInput, is_stale, plan_rollout, resolve_count
from provisioner.fsm.vocabulary import TEARDOWN_PHASES, CellPhase


@st.composite
def inputs(draw: st.DrawFn) -> RolloutInput:
    n = draw(st.integers(0, 10))
    cells = tuple(
        RolloutCell(
            name=f"p-{i}",
            index=i,
            phase=draw(st.sampled_from(list(CellPhase))),
            template_hash=draw(st.sampled_from(["", "old", "new"])),
            busy=draw(st.one_of(st.none(), st.booleans())),
            draining_for_rollout=draw(st.booleans()),
        )
        for i in range(n)
    )
    knob = st.one_of(st.integers(0, 3), st.sampled_from(["0%", "25%", "50%", "100%"]))
    return RolloutInput(
        cells=cells,
        current_hash="new",
        desired_replicas=draw(st.integers(0, 10)),
        rolling_update=draw(st.booleans()),
        workload_reachable=draw(st.booleans()),
        max_surge=draw(knob),
        max_unavailable=draw(knob),
    )


@settings(max_examples=500, deadline=None)
@given(inputs())
def test_rollout_invariants(inp: RolloutInput) -> None:
    plan = plan_rollout(inp)
    live = {c.name: c for c in inp.cells if c.phase not in TEARDOWN_PHASES}
    # Only live stale cells are drained, each once; nothing when Manual or unreachable.
    assert len(set(plan.drain)) == len(plan.drain)
    assert all(name in live and is_stale(live[name], "new") for name in plan.drain)
    if not inp.rolling_update or not inp.workload_reachable:
        assert plan.drain == () and plan.creation_adjustment == 0
    # Ready cells drained stay within maxUnavailable.
    surge = resolve_count(inp.max_surge, inp.desired_replicas, round_up=True)
    unavailable = resolve_count(inp.max_unavailable, inp.desired_replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    available = sum(1 for c in live.values() if c.phase is CellPhase.READY)
    ready_drained = sum(1 for n in plan.drain if live[n].phase is CellPhase.READY)
    assert ready_drained <= max(0, available - (inp.desired_replicas - unavailable))
    # Surge never exceeds maxSurge.
    assert plan.creation_adjustment <= surge
