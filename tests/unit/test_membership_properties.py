"""Property tests: membership invariants hold for any rows, history and limits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.fsm.membership import (
    IndexHistory,
    MemberRow,
    MembershipInput,
    MembershipLimits,
    backoff_s,
    plan_membership,
)
from provisioner.fsm.vocabulary import CREATING_PHASES, TEARDOWN_PHASES, CellPhase

NOW = 1_000_000.0


@st.composite
def inputs(draw: st.DrawFn) -> MembershipInput:
    indexes = draw(st.lists(st.integers(0, 12), unique=True, max_size=10))
    rows = tuple(
        MemberRow(
            name=f"p-{i}",
            index=i,
            phase=draw(st.sampled_from(list(CellPhase))),
            has_object=draw(st.booleans()),
            ready_once=draw(st.booleans()),
            reason=draw(st.sampled_from(["", "NodeNeverRegistered", "JoinTimeout"])),
        )
        for i in indexes
    )
    history = draw(
        st.dictionaries(
            st.integers(0, 15),
            st.builds(
                IndexHistory, st.integers(0, 8), st.one_of(st.none(), st.floats(NOW - 4000, NOW))
            ),
            max_size=6,
        )
    )
    limits = MembershipLimits(max_in_flight=draw(st.integers(0, 4)))
    return MembershipInput(
        pool_name="p",
        desired_replicas=draw(st.integers(0, 12)),
        rows=rows,
        history=history,
        now_s=NOW,
        limits=limits,
        free_physical_gpus=draw(st.one_of(st.none(), st.integers(0, 6))),
        workload_reachable=draw(st.booleans()),
        victims=tuple(draw(st.lists(st.sampled_from([r.name for r in rows] or ["x"]), max_size=3))),
        creation_adjustment=draw(st.integers(-2, 2)),
        provider_usable=draw(st.booleans()),
        pool_ever_ready=draw(st.booleans()),
    )


def _live(inp: MembershipInput) -> list[MemberRow]:
    return [r for r in inp.rows if r.has_object and r.phase not in TEARDOWN_PHASES]


@settings(max_examples=400, deadline=None)
@given(inputs())
def test_membership_invariants(inp: MembershipInput) -> None:
    plan = plan_membership(inp)
    live = _live(inp)
    occupied = {r.index for r in inp.rows if r.has_object}
    created = [c.index for c in plan.create]
    # New cells take free, distinct indexes and are named after them.
    assert len(set(created)) == len(created)
    assert not occupied & set(created)
    assert all(c.name == f"p-{c.index}" for c in plan.create)
    # Never beyond the in-flight budget, the free GPUs or the target.
    in_flight = sum(1 for r in live if r.phase in CREATING_PHASES)
    assert len(created) <= max(inp.limits.max_in_flight - in_flight, 0)
    if inp.free_physical_gpus is not None:
        assert len(created) <= inp.free_physical_gpus
    assert len(live) + len(created) <= max(
        inp.desired_replicas + inp.creation_adjustment, len(live)
    )
    # Removal only of live cells, only down to the desired size (plus surge), never with growth.
    assert set(plan.remove) <= {r.name for r in live}
    keep = inp.desired_replicas + max(inp.creation_adjustment, 0)
    assert len(live) - len(plan.remove) >= min(keep, len(live))
    assert not (plan.remove and plan.create)
    # Replacement only of live Failed cells not being removed, whose backoff has elapsed.
    by_name = {r.name: r for r in live}
    for name in plan.replace:
        row = by_name[name]
        assert row.phase is CellPhase.FAILED and name not in plan.remove
        hist = inp.history.get(row.index, IndexHistory())
        assert hist.failure_count < inp.limits.max_failures_per_index
        if hist.last_failure_s is not None:
            assert NOW - hist.last_failure_s >= backoff_s(hist.failure_count, inp.limits)
    # Unreachable freezes everything.
    if not inp.workload_reachable:
        assert (plan.create, plan.replace, plan.remove) == ((), (), ())


@given(st.integers(0, 200), st.integers(0, 200))
def test_backoff_is_monotonic_and_capped(a: int, b: int) -> None:
    limits = MembershipLimits()
    lo, hi = sorted((a, b))
    assert backoff_s(lo, limits) <= backoff_s(hi, limits) <= limits.backoff_cap_s
