"""Membership planning: lowest free index, in-flight limit, backoff, give-up, guards, pre-flight."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from provisioner.fsm.membership import (
    CellToCreate,
    IndexHistory,
    MemberRow,
    MembershipInput,
    MembershipLimits,
    MembershipPlan,
    backoff_s,
    plan_membership,
    record_failure,
)
from provisioner.fsm.vocabulary import CellPhase as P
from provisioner.fsm.vocabulary import CellReason as R
from provisioner.fsm.vocabulary import StallReason as S

NOW = 100_000.0


def cell(index: int, phase: P = P.READY, **kw: Any) -> MemberRow:
    kw.setdefault("ready_once", phase is P.READY)
    return MemberRow(name=f"gpu-{index}", index=index, phase=phase, **kw)


def plan(rows: tuple[MemberRow, ...] = (), desired: int = 1, **kw: Any) -> MembershipPlan:
    history = kw.pop("history", {})
    inp = MembershipInput("gpu", desired, rows, history, NOW, **kw)
    return plan_membership(inp)


@pytest.mark.parametrize(
    ("count", "expected_s"),
    [
        (0, 0),
        (1, 30),
        (2, 60),
        (3, 120),
        (4, 240),
        (6, 960),
        (7, 1800),
        (8, 1800),
        (50, 1800),
        (10**6, 1800),
    ],
)
def test_backoff_doubles_and_caps(count: int, expected_s: float) -> None:
    assert backoff_s(count, MembershipLimits()) == expected_s


def test_backoff_is_configurable() -> None:
    assert backoff_s(3, MembershipLimits(backoff_base_s=10, backoff_cap_s=35)) == 35


def test_empty_pool_creates_up_to_in_flight_limit_at_lowest_indexes() -> None:
    p = plan(desired=5)
    assert p.create == (CellToCreate("gpu-0", 0), CellToCreate("gpu-1", 1))


def test_in_flight_cells_use_the_budget() -> None:
    p = plan((cell(0, P.BOOTING), cell(1, P.READY)), desired=4)
    assert [c.index for c in p.create] == [2]


def test_configurable_in_flight_limit() -> None:
    p = plan(desired=5, limits=MembershipLimits(max_in_flight=4))
    assert len(p.create) == 4


def test_lowest_free_index_fills_holes() -> None:
    p = plan((cell(0), cell(2), cell(4)), desired=5)
    assert [c.name for c in p.create] == ["gpu-1", "gpu-3"]


def test_tombstone_index_is_free_again() -> None:
    rows = (cell(0), cell(1, P.FAILED, has_object=False))
    p = plan(rows, desired=2, history={1: IndexHistory(1, NOW - 31)})
    assert [c.index for c in p.create] == [1]


def test_index_in_backoff_is_skipped() -> None:
    p = plan((cell(0),), desired=2, history={1: IndexHistory(1, NOW - 10)})
    assert [c.index for c in p.create] == [2]


def test_draining_cells_hold_their_index_but_do_not_count() -> None:
    p = plan((cell(0, P.DRAINING), cell(1)), desired=2)
    assert [c.index for c in p.create] == [2]


def test_index_being_replaced_is_reserved_for_its_replacement() -> None:
    # The failed gpu-0 is being deleted to be replaced: no cell is created at another index
    # meanwhile (the replacement must inherit index 0's failure history and backoff).
    replacing = cell(0, P.DRAINING, replacing=True)
    assert plan((replacing, cell(1)), desired=2).create == ()
    # Once the object is gone, the replacement comes back at index 0 (backoff has passed).
    gone = cell(0, P.FAILED, has_object=False)
    p = plan((gone, cell(1)), desired=2, history={0: IndexHistory(1, NOW - 31)})
    assert [c.index for c in p.create] == [0]


def test_reserved_index_still_leaves_room_for_a_scale_up() -> None:
    # Desired grew while gpu-0 is being replaced: the extra cell is created elsewhere now.
    p = plan((cell(0, P.DRAINING, replacing=True), cell(1)), desired=3)
    assert [c.index for c in p.create] == [2]
    # A scale-down drain does not reserve its index: a new cell may be created meanwhile.
    p = plan((cell(0, P.DRAINING), cell(1)), desired=2)
    assert [c.index for c in p.create] == [2]


# Failed cells: (id, failure count, seconds since last failure, expected replace?, expected stall)
FAILED = [
    ("first-failure-within-backoff", 1, 29, False, None),
    ("first-failure-after-backoff", 1, 31, True, None),
    ("third-failure-within-backoff", 3, 119, False, None),
    ("third-failure-after-backoff", 3, 121, True, None),
    ("capped-backoff", 9, 1801, True, None),  # with a give-up limit of 100 (below)
    ("capped-backoff-within", 9, 1799, False, None),
    ("give-up-after-five", 5, 10**6, False, S.CELL_REPLACEMENT_EXHAUSTED),
]


@pytest.mark.parametrize(
    ("count", "ago", "replaced", "stall"), [c[1:] for c in FAILED], ids=[c[0] for c in FAILED]
)
def test_failed_cell_replacement(count: int, ago: float, replaced: bool, stall: S | None) -> None:
    rows = (cell(0), cell(1, P.FAILED, reason="JoinTimeout"))
    limits = MembershipLimits(max_failures_per_index=5 if count <= 5 else 100)
    hist = {1: IndexHistory(count, NOW - ago)}
    p = plan(rows, desired=2, history=hist, pool_ever_ready=True, limits=limits)
    assert (p.replace == ("gpu-1",)) == replaced
    assert p.stall == stall
    assert p.create == ()  # the failed cell still holds its slot
    if not replaced and stall is None:
        assert p.requeue_after_s == pytest.approx(backoff_s(count, limits) - ago)


def test_give_up_threshold_is_configurable() -> None:
    rows = (cell(0), cell(1, P.FAILED))
    p = plan(
        rows,
        desired=2,
        history={1: IndexHistory(2, 0)},
        limits=MembershipLimits(max_failures_per_index=2),
    )
    assert p.stall is S.CELL_REPLACEMENT_EXHAUSTED


def test_exhausted_index_is_never_reused_for_new_cells() -> None:
    p = plan((cell(0),), desired=2, history={1: IndexHistory(5, 0)})
    assert [c.index for c in p.create] == [2]


def test_fault_not_in_the_cell_veto_keeps_the_vm() -> None:
    rows = (cell(0), cell(1, P.FAILED, fault_outside_cell=True))
    p = plan(rows, desired=2, history={1: IndexHistory(1, 0)}, provider_usable=False)
    assert p.replace == () and p.stall is S.FAULT_NOT_IN_THE_CELL


def test_hopeless_pool_guard() -> None:
    rows = (cell(0, P.FAILED, has_object=False), cell(1, P.FAILED, has_object=False))
    hist = {0: IndexHistory(2, 0), 1: IndexHistory(1, 0)}
    p = plan(rows, desired=2, history=hist)
    assert p.create == () and p.stall is S.FAULT_NOT_IN_THE_CELL


def test_hopeless_guard_counts_history_of_autoscaled_indexes_too() -> None:
    # Index 7 is long gone (scaled down), but its failures still count.
    p = plan(desired=1, history={7: IndexHistory(3, 0)})
    assert p.stall is S.FAULT_NOT_IN_THE_CELL


def test_hopeless_guard_also_keeps_failed_vms() -> None:
    rows = (cell(0, P.FAILED, ready_once=False),)
    p = plan(rows, desired=1, history={0: IndexHistory(3, 0)})
    assert p.replace == ()


@pytest.mark.parametrize(
    ("ever_ready", "ready_row", "release"),
    [(True, False, False), (False, True, False), (False, False, True)],
)
def test_hopeless_guard_lifts(ever_ready: bool, ready_row: bool, release: bool) -> None:
    rows = (cell(0, P.READY, ready_once=ready_row),) if ready_row else ()
    p = plan(
        rows,
        desired=2,
        history={5: IndexHistory(3, 0)},
        pool_ever_ready=ever_ready,
        release_guard=release,
    )
    assert p.stall is None and len(p.create) >= 1


def test_credential_guard_after_two_never_registered() -> None:
    rows = tuple(
        cell(i, P.FAILED, reason=R.NODE_NEVER_REGISTERED, ready_once=False) for i in (0, 1)
    )
    p = plan(rows, desired=3, pool_ever_ready=True)
    assert p.stall is S.BOOTSTRAP_CREDENTIAL_SUSPECT and p.create == ()
    assert "joinSecretRef" in p.stall_message


def test_credential_guard_ignores_cells_that_joined_once_and_other_reasons() -> None:
    rows = (
        cell(0, P.FAILED, reason=R.NODE_NEVER_REGISTERED, ready_once=True),
        cell(1, P.FAILED, reason=R.JOIN_TIMEOUT, ready_once=False),
    )
    p = plan(rows, desired=3, pool_ever_ready=True)
    assert p.stall is None and [c.index for c in p.create] == [2]


def test_credential_guard_clears_when_the_join_template_changes() -> None:
    rows = tuple(
        cell(i, P.FAILED, reason=R.NODE_NEVER_REGISTERED, ready_once=False, current_template=False)
        for i in (0, 1)
    )
    p = plan(rows, desired=3, pool_ever_ready=True)
    assert p.stall is None and [c.index for c in p.create] == [2]


def test_unrenderable_join_template_creates_and_replaces_nothing() -> None:
    error = "unknown template token {{ nodeName }} at line 3"
    p = plan(
        (cell(0, P.FAILED),), desired=3, history={0: IndexHistory(1, 0)}, bootstrap_error=error
    )
    assert (p.create, p.replace, p.stall, p.stall_message) == (
        (),
        (),
        S.BOOTSTRAP_TEMPLATE_INVALID,
        error,
    )


def test_credential_threshold_configurable() -> None:
    rows = (cell(0, P.FAILED, reason=R.NODE_NEVER_REGISTERED),)
    p = plan(
        rows,
        desired=2,
        pool_ever_ready=True,
        limits=MembershipLimits(suspect_credential_failures=1),
    )
    assert p.stall is S.BOOTSTRAP_CREDENTIAL_SUSPECT


# Physical pre-flight: (id, free GPUs, rows, expected creations, expected stall)
PREFLIGHT = [
    ("unknown-proceeds", None, (), 2, None),
    ("none-free-stalls", 0, (), 0, S.INSUFFICIENT_PHYSICAL_GPU),
    ("one-free-creates-one", 1, (), 1, None),
    (
        "own-pending-cell-subtracted",
        1,
        (cell(0, P.ALLOCATING_GPU),),
        0,
        S.INSUFFICIENT_PHYSICAL_GPU,
    ),
    ("booting-cell-already-holds-its-gpu", 1, (cell(0, P.BOOTING),), 1, None),
]


@pytest.mark.parametrize(
    ("free", "rows", "n", "stall"), [c[1:] for c in PREFLIGHT], ids=[c[0] for c in PREFLIGHT]
)
def test_physical_preflight(
    free: int | None, rows: tuple[MemberRow, ...], n: int, stall: S | None
) -> None:
    p = plan(rows, desired=4, free_physical_gpus=free)
    assert (len(p.create), p.stall) == (n, stall)


def test_physical_preflight_counts_gpus_per_cell() -> None:
    """Free GPUs are GPUs: with 2 GPUs per cell, 5 free GPUs and one cell still to take its
    GPUs leave room for (5 - 2) // 2 = 1 more cell (counting cells against GPUs made it 3)."""
    rows = (cell(0), cell(1, P.PENDING))
    p = plan(rows, desired=5, free_physical_gpus=5, gpus_per_cell=2)
    assert [c.index for c in p.create] == [2]
    p = plan(rows, desired=5, free_physical_gpus=3, gpus_per_cell=2)
    assert (p.create, p.stall) == ((), S.INSUFFICIENT_PHYSICAL_GPU)


# Scale-down: (id, rows, desired, victims, expected removal)
READY3 = (cell(0), cell(1), cell(2))
SCALE_DOWN = [
    ("highest-index-by-default", READY3, 2, (), ("gpu-2",)),
    ("autoscaler-victims-first", READY3, 1, ("gpu-0",), ("gpu-0", "gpu-2")),
    ("failed-first", (cell(0), cell(1, P.FAILED), cell(2)), 2, ("gpu-0",), ("gpu-1",)),
    ("unknown-victim-ignored", READY3, 2, ("gpu-9",), ("gpu-2",)),
    ("draining-not-counted", (cell(0), cell(1), cell(2, P.DRAINING)), 2, (), ()),
    ("to-zero", READY3, 0, (), ("gpu-2", "gpu-1", "gpu-0")),
]


@pytest.mark.parametrize(
    ("rows", "desired", "victims", "removed"),
    [c[1:] for c in SCALE_DOWN],
    ids=[c[0] for c in SCALE_DOWN],
)
def test_scale_down(
    rows: tuple[MemberRow, ...], desired: int, victims: tuple[str, ...], removed: tuple[str, ...]
) -> None:
    p = plan(rows, desired=desired, victims=victims)
    assert p.remove == removed and p.create == ()


def test_failed_victim_is_removed_not_replaced() -> None:
    rows = (cell(0), cell(1, P.FAILED))
    p = plan(rows, desired=1, history={1: IndexHistory(1, 0)})
    assert p.remove == ("gpu-1",) and p.replace == ()


def test_unreachable_freezes_membership() -> None:
    rows = (cell(0), cell(1, P.FAILED), cell(2))
    p = plan(rows, desired=1, workload_reachable=False, history={1: IndexHistory(1, 0)})
    assert (p.create, p.replace, p.remove, p.stall) == ((), (), (), S.UNREACHABLE)


def test_creation_adjustment_surges_and_holds_back_but_never_removes() -> None:
    assert len(plan(READY3, desired=3, creation_adjustment=1).create) == 1
    held = plan((cell(0), cell(1), cell(2, P.DRAINING)), desired=3, creation_adjustment=-1)
    assert held.create == () and held.remove == ()
    # The surge cell a rollout created is not scale-down excess while the surge lasts.
    surged = (*READY3, cell(3, P.BOOTING))
    assert plan(surged, desired=3, creation_adjustment=1).remove == ()
    assert plan(surged, desired=3, creation_adjustment=0).remove == ("gpu-3",)


def test_history_is_kept_across_replacement() -> None:
    hist = record_failure({}, 3, now_s=10)
    hist = record_failure(hist, 3, now_s=500)
    assert hist[3] == IndexHistory(2, 500)
    # The replacement incarnation fails again: the count continues, the backoff grows.
    hist = record_failure(hist, 3, now_s=700)
    assert hist[3].failure_count == 3
    assert backoff_s(hist[3].failure_count, MembershipLimits()) == 120
    # An unrelated index is untouched and the input mapping is not mutated.
    assert record_failure(hist, 4, 1)[3] == hist[3]


def test_rows_are_not_required_to_be_sorted() -> None:
    rows = (cell(2), cell(0))
    assert [c.index for c in plan(rows, desired=3).create] == [1]


def test_plan_is_a_pure_function() -> None:
    inp = MembershipInput(
        pool_name="gpu", desired_replicas=3, rows=READY3[:1], history={}, now_s=NOW
    )
    assert plan_membership(inp) == plan_membership(replace(inp))
