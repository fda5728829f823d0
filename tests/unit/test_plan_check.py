"""The provisioner checks the autoscaler's plan, step by step (provisioner.fsm.plan_check).

What these prove: a plan inside the spec's bounds whose victims are live and not in drain
back-off is accepted as is (victims in the plan's order); each kind of rejection is typed and
explained - a victim gone while the pool is above its target (one already leaving or gone
once the target is reached is simply done), a victim in drain back-off (with the time it may
go), a target outside the spec's bounds (StaleGeneration when the plan was made for another
generation), more cells than the free physical GPUs hold (in GPUs per cell, less this pool's
cells still to take theirs). Membership executes the checked plan: Failed cells first, then the
accepted victims in the plan's order - never re-ordered, and a held victim's slot is not filled
by another cell (the scale-down waits with ScaleDownHeld and the reason) - and creates no more
cells than the check allows. The published rows say the same (status.planRejections).
"""

from __future__ import annotations

import pytest

from gpucellpool.api.status import MAX_PLAN_REJECTIONS, GPUCellPoolStatus, PlanStep
from provisioner.fsm.membership import MemberRow, MembershipInput, plan_membership
from provisioner.fsm.plan_check import Bounds, CellFact, Plan, Rejection, check_plan
from provisioner.fsm.vocabulary import CellPhase, StallReason
from provisioner.status import published_rejections

NOW = 1000.0
CELLS = tuple(CellFact(f"p-{i}") for i in range(4))
BOUNDS = Bounds(floor=0, ceiling=10, generation=3)


def test_a_valid_plan_is_accepted_as_is() -> None:
    checked = check_plan(Plan(2, ("p-1", "p-3"), 3), CELLS, BOUNDS, NOW)
    assert checked.target == 2 and checked.victims == ("p-1", "p-3")
    assert checked.rejections == () and checked.held == () and checked.summary() == ""
    assert checked.create_limit is None  # ledger unknown: no physical bound


def test_victim_gone_is_rejected_only_while_the_pool_is_above_target() -> None:
    cells = (*CELLS[:3], CellFact("p-3", live=False))  # p-3 leaving: in progress, no rejection
    checked = check_plan(Plan(1, ("p-9", "p-3", "p-0"), 3), cells, BOUNDS, NOW)
    assert checked.victims == ("p-0",)
    assert [(v.step, v.rejection, v.cell) for v in checked.rejections] == [
        (PlanStep.REMOVE, Rejection.VICTIM_GONE, "p-9"),
    ]
    done = check_plan(Plan(3, ("p-9", "p-3"), 3), cells, BOUNDS, NOW)  # down to the target
    assert done.victims == () and done.rejections == ()


def test_a_victim_this_plan_already_removed_is_done_not_gone() -> None:
    # plan 4 -> 2 (p-3, p-1): p-3 is drained and gone while p-1 is still live; the excess (1)
    # is p-1's step, so p-3's step is done - no rejection (one woke the autoscaler each time)
    cells = CELLS[:3]
    checked = check_plan(Plan(2, ("p-3", "p-1"), 3), cells, BOUNDS, NOW)
    assert checked.victims == ("p-1",) and checked.rejections == ()
    # a gone victim the remaining ones do not cover is still rejected, the first in plan order
    short = check_plan(Plan(1, ("p-8", "p-9", "p-1"), 3), cells, BOUNDS, NOW)
    assert [(v.rejection, v.cell) for v in short.rejections] == [(Rejection.VICTIM_GONE, "p-8")]


def test_victim_in_drain_backoff_is_held_until_it_ends() -> None:
    cells = (CellFact("p-0"), CellFact("p-1", held_until_s=NOW + 120.0), CellFact("p-2"))
    checked = check_plan(Plan(1, ("p-1", "p-2"), 3), cells, BOUNDS, NOW)
    assert checked.victims == ("p-2",) and checked.held == ("p-1",)
    (verdict,) = checked.rejections
    assert verdict.rejection is Rejection.VICTIM_IN_DRAIN_BACKOFF
    assert verdict.retry_after_s == NOW + 120.0 and checked.requeue_after_s == 120.0
    assert "p-1" in checked.summary() and "before 1970-01-01T00:18:40Z" in checked.summary()
    a_second_later = check_plan(Plan(1, ("p-1", "p-2"), 3), cells, BOUNDS, NOW + 1.0)
    assert a_second_later.rejections == checked.rejections  # no write per pass for a countdown
    later = check_plan(Plan(1, ("p-1", "p-2"), 3), cells, BOUNDS, NOW + 120.0)
    assert later.victims == ("p-1", "p-2") and later.rejections == ()


def test_a_cell_in_drain_backoff_stays_refused_when_the_next_plan_leaves_it_out() -> None:
    cells = (CellFact("p-0"), CellFact("p-1", held_until_s=NOW + 120.0), CellFact("p-2"))
    checked = check_plan(Plan(2, ("p-2",), 3), cells, BOUNDS, NOW)  # p-1 not named any more
    assert checked.victims == ("p-2",) and checked.held == ()  # not a slot of this plan
    (verdict,) = checked.rejections
    assert (verdict.cell, verdict.rejection) == ("p-1", Rejection.VICTIM_IN_DRAIN_BACKOFF)
    assert verdict.retry_after_s == NOW + 120.0 and checked.requeue_after_s == 120.0
    rows = [CellPhase.READY] * 3
    members = tuple(MemberRow(f"p-{i}", i, phase) for i, phase in enumerate(rows))
    plan = plan_membership(MembershipInput("p", 2, members, {}, NOW, plan=checked))
    assert plan.remove == ("p-2",) and plan.stall is not StallReason.SCALE_DOWN_HELD
    assert check_plan(Plan(2, ("p-2",), 3), cells, BOUNDS, NOW + 120.0).rejections == ()


@pytest.mark.parametrize(
    ("generation", "kind"),
    [(2, Rejection.STALE_GENERATION), (3, Rejection.TARGET_OUT_OF_BOUNDS)],
)
def test_target_outside_the_spec_is_clamped(generation: int, kind: Rejection) -> None:
    checked = check_plan(Plan(12, (), generation), CELLS, BOUNDS, NOW)
    assert checked.target == 10
    (verdict,) = checked.rejections
    assert verdict.step is PlanStep.TARGET and verdict.rejection is kind
    assert "outside replicas 0..10" in verdict.message
    assert check_plan(Plan(0, (), 3), CELLS, Bounds(2, 10, 3), NOW).target == 2


def test_creations_beyond_the_free_physical_gpus_are_rejected() -> None:
    cells = (*CELLS, CellFact("p-4", waiting_for_gpu=True))  # 5 live, one without its GPU
    two_gpu = Bounds(0, 20, 3, free_gpus=9, gpus_per_cell=2)
    fits = check_plan(Plan(8, (), 3), cells, two_gpu, NOW)  # (9 - 2) // 2 = 3 new cells
    assert fits.create_limit == 3 and fits.rejections == ()
    over = check_plan(Plan(9, (), 3), cells, two_gpu, NOW)
    (verdict,) = over.rejections
    assert verdict.step is PlanStep.CREATE and verdict.rejection is Rejection.PHYSICAL_GPU_EXCEEDED
    assert over.create_limit == 3 and "adds 4 cell(s)" in verdict.message


def _rows(*phases: CellPhase) -> tuple[MemberRow, ...]:
    return tuple(MemberRow(f"p-{i}", i, phase) for i, phase in enumerate(phases))


R = CellPhase.READY


def test_membership_executes_accepted_victims_in_the_plans_order() -> None:
    rows = _rows(R, R, R, R)
    checked = check_plan(Plan(2, ("p-0", "p-2"), 3), CELLS, BOUNDS, NOW)
    plan = plan_membership(MembershipInput("p", 2, rows, {}, NOW, plan=checked))
    assert plan.remove == ("p-0", "p-2")  # not the highest indexes, not re-ordered


def test_a_held_victim_is_not_replaced_by_another_cell() -> None:
    rows = _rows(R, R, R, R)
    cells = (*CELLS[:3], CellFact("p-3", held_until_s=NOW + 60.0))
    checked = check_plan(Plan(2, ("p-3", "p-1"), 3), cells, BOUNDS, NOW)
    plan = plan_membership(MembershipInput("p", 2, rows, {}, NOW, plan=checked))
    assert plan.remove == ("p-1",)  # p-3 waits; p-2 (highest free index) does not stand in
    assert plan.stall is StallReason.SCALE_DOWN_HELD and "p-3" in plan.stall_message
    assert plan.requeue_after_s == 60.0


def test_failed_cells_go_first_and_a_clamped_target_removes_by_index() -> None:
    rows = _rows(R, CellPhase.FAILED, R, R)
    checked = check_plan(Plan(2, ("p-0",), 3), CELLS, BOUNDS, NOW)
    plan = plan_membership(MembershipInput("p", 2, rows, {}, NOW, plan=checked))
    assert plan.remove == ("p-1", "p-0")
    clamped = check_plan(Plan(4, (), 2), CELLS, Bounds(0, 2, 3), NOW)  # maxReplicas lowered
    plan = plan_membership(MembershipInput("p", clamped.target, _rows(R, R, R, R), {}, NOW))
    assert plan.remove == ("p-3", "p-2")


def test_membership_creates_within_the_checks_physical_limit() -> None:
    rows = _rows(R, CellPhase.PENDING)
    cells = (CellFact("p-0"), CellFact("p-1", waiting_for_gpu=True))
    checked = check_plan(Plan(6, (), 3), cells, Bounds(0, 10, 3, 5, 2), NOW)
    assert checked.create_limit == 1  # (5 - 2) // 2
    inp = MembershipInput("p", 6, rows, {}, NOW, free_physical_gpus=5, plan=checked)
    plan = plan_membership(inp)
    assert [c.name for c in plan.create] == ["p-2"]
    none_left = check_plan(Plan(6, (), 3), cells, Bounds(0, 10, 3, 2, 2), NOW)
    stalled = plan_membership(MembershipInput("p", 6, rows, {}, NOW, plan=none_left))
    assert stalled.create == () and stalled.stall is StallReason.INSUFFICIENT_PHYSICAL_GPU


def test_rejections_are_published_as_status_rows() -> None:
    cells = (CellFact("p-0", held_until_s=NOW + 90.0), CellFact("p-1"))
    checked = check_plan(Plan(1, ("p-0",), 3), cells, BOUNDS, NOW)
    (row,) = [r.to_api() for r in published_rejections(checked)]
    assert row["step"] == "Remove" and row["cell"] == "p-0"
    assert row["reason"] == "VictimInDrainBackoff"
    assert row["retryAfter"] == "1970-01-01T00:18:10Z"  # NOW + 90 s


def test_published_rejections_stay_within_the_crds_bound() -> None:
    cells = tuple(CellFact(f"p-{i}", held_until_s=NOW + 60.0) for i in range(300))
    checked = check_plan(Plan(0, tuple(c.name for c in cells), 3), cells, BOUNDS, NOW)
    assert len(checked.held) == 300  # membership still holds every one
    rows = [r.to_api() for r in published_rejections(checked)]
    assert len(rows) == MAX_PLAN_REJECTIONS and rows[0]["cell"] == "p-0"
    GPUCellPoolStatus.model_validate({"planRejections": rows})  # would be refused: > 256


def test_an_unused_victim_that_runs_a_pod_by_now_is_kept_not_replaced() -> None:
    # A cancel of spare boots (victims chosen while they ran no pod): p-1's boot ended
    # and a waiting pod was bound to it before this pass; p-3 is still empty.
    cells = (CellFact("p-0"), CellFact("p-1", runs_pods=True), CellFact("p-2"), CellFact("p-3"))
    cancel = Plan(2, ("p-1", "p-3"), 3, empty_victims=("p-1", "p-3"))
    checked = check_plan(cancel, cells, BOUNDS, NOW)
    assert checked.victims == ("p-3",) and checked.held == ("p-1",)
    (verdict,) = checked.rejections
    assert (verdict.step, verdict.rejection, verdict.cell) == (
        PlanStep.REMOVE,
        Rejection.VICTIM_IN_USE,
        "p-1",
    )
    assert verdict.retry_after_s is None and "runs one now" in verdict.message
    plan = plan_membership(MembershipInput("p", 2, _rows(R, R, R, R), {}, NOW, plan=checked))
    assert plan.remove == ("p-3",)  # p-1 is kept and no other cell stands in for it
    assert plan.stall is StallReason.SCALE_DOWN_HELD and "p-1" in plan.stall_message


def test_a_scale_down_victim_with_pods_is_drained_as_planned() -> None:
    # Victims not chosen empty (a scale-down of cells below the threshold) may run pods:
    # the drain re-homes them; only an unused victim's pod is a change the plan did not see.
    cells = (CellFact("p-0", runs_pods=True), CellFact("p-1", runs_pods=True), CellFact("p-2"))
    checked = check_plan(Plan(1, ("p-0", "p-1"), 3, empty_victims=("p-1",)), cells, BOUNDS, NOW)
    assert checked.victims == ("p-0",) and checked.held == ("p-1",)
    plain = check_plan(Plan(1, ("p-0", "p-1"), 3), cells, BOUNDS, NOW)
    assert plain.victims == ("p-0", "p-1") and plain.rejections == ()
