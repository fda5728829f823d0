"""Multi-pass scenarios on a virtual clock: the pure modules composed the way the shell will."""

from __future__ import annotations

from dataclasses import replace

from provisioner.fsm.cell_state import (
    Budgets,
    CellObservation,
    CellRow,
    GPUCapacity,
    NodeStatus,
    OuterStatus,
    decide_cell,
)
from provisioner.fsm.identity import Liveness
from provisioner.fsm.membership import (
    IndexHistory,
    MemberRow,
    MembershipInput,
    plan_membership,
    record_failure,
)
from provisioner.fsm.vocabulary import CellPhase as P
from provisioner.fsm.vocabulary import CellReason as R
from provisioner.fsm.vocabulary import StallReason as S

GUEST = OuterStatus(exists=True, uid="u1", created_at_s=0.0)
GPU = replace(GUEST, gpu_devices=("0000:01:00.0",))
RUNNING = replace(GPU, running=True)
UP = replace(RUNNING, address="10.1.0.7")
NODE = NodeStatus(exists=True, instance_label="u1", liveness=Liveness.LIVE)
HAMI = GPUCapacity(gate_label_on=True, healthy_devices=1, allocatable_gpus=10)


def test_measured_startup_timeline_reaches_ready_once() -> None:
    # The hardware run of reference §2.3: ~5 s GPU, ~3 min clone, ~40 s address, ~20 s join,
    # ~35 s HAMi -> Ready at 4 m 45 s.
    timeline = [
        (0.0, OuterStatus(), NodeStatus(), P.PENDING),
        (1.0, GUEST, NodeStatus(), P.ALLOCATING_GPU),
        (5.0, GPU, NodeStatus(), P.GUEST_PROVISIONING),
        (185.0, RUNNING, NodeStatus(), P.BOOTING),
        (225.0, UP, NodeStatus(), P.JOINING),
        (235.0, UP, NODE, P.JOINING),
        (245.0, UP, replace(NODE, ready=True), P.AWAITING_GPU_CAPACITY),
        (285.0, UP, replace(NODE, ready=True, capacity=HAMI), P.READY),
        (315.0, UP, replace(NODE, ready=True, capacity=HAMI), P.READY),
    ]
    row, firsts = CellRow(), []
    for now, outer, node, expected in timeline:
        d = decide_cell(row, CellObservation(outer, node, True), Budgets(), now)
        assert d.row.phase is expected, (now, d.row)
        assert not d.failed
        firsts.append(d.first_ready)
        row = d.row
    assert firsts.count(True) == 1 and row.last_transition_s == 285.0


def test_regression_then_recovery_then_failure_after_the_budget() -> None:
    ready = CellRow(P.READY, "CellReady", "", "u1", 100.0, True, 0)
    not_ready = CellObservation(UP, NODE, True)
    d = decide_cell(ready, not_ready, Budgets(), 1000.0)
    assert d.row.phase is P.JOINING and not d.failed
    recovered = decide_cell(
        d.row,
        CellObservation(UP, replace(NODE, ready=True, capacity=HAMI), True),
        Budgets(),
        1500.0,
    )
    assert recovered.row.phase is P.READY
    again = decide_cell(recovered.row, not_ready, Budgets(), 2000.0)
    held = decide_cell(again.row, not_ready, Budgets(), 2000.0 + 900.0)
    assert held.row.phase is P.JOINING
    failed = decide_cell(held.row, not_ready, Budgets(), 2000.0 + 901.0)
    assert failed.failed and failed.row.reason == R.JOIN_TIMEOUT and failed.row.failure_count == 1


def test_outage_longer_than_the_budget_does_not_fail_cells() -> None:
    joining = CellRow(P.JOINING, "NodeNotReady", "", "u1", 0.0, True, 0)
    frozen = decide_cell(joining, CellObservation(UP, NODE, False), Budgets(), 600.0)
    still = decide_cell(frozen.row, CellObservation(UP, NODE, False), Budgets(), 5000.0)
    assert still.row.phase is P.JOINING and still.row.reason == R.UNREACHABLE
    back = decide_cell(still.row, CellObservation(UP, NODE, True), Budgets(), 5001.0)
    assert not back.failed and back.row.last_transition_s == 5001.0


def test_replacement_loop_with_backoff_until_give_up() -> None:
    history: dict[int, IndexHistory] = {}
    now = 0.0
    waits = []
    for _ in range(6):
        history = record_failure(history, 1, now)
        failed_at = now
        rows = (MemberRow("gpu-0", 0, P.READY, ready_once=True), MemberRow("gpu-1", 1, P.FAILED))
        while True:
            plan = plan_membership(MembershipInput("gpu", 2, rows, history, now))
            if plan.replace or plan.stall:
                break
            assert plan.requeue_after_s is not None
            now += plan.requeue_after_s
        if plan.stall:
            break
        waits.append(now - failed_at)
        now += 600.0  # the new incarnation boots and fails again
    assert plan.stall is S.CELL_REPLACEMENT_EXHAUSTED
    assert history[1].failure_count == 5
    assert waits == [30.0, 60.0, 120.0, 240.0]


def test_two_never_registered_cells_stall_on_the_credential_and_keep_their_vms() -> None:
    rows = tuple(MemberRow(f"gpu-{i}", i, P.FAILED, reason=R.NODE_NEVER_REGISTERED) for i in (0, 1))
    history = {0: IndexHistory(1, 0.0), 1: IndexHistory(1, 0.0)}
    plan = plan_membership(MembershipInput("gpu", 2, rows, history, 10_000.0, pool_ever_ready=True))
    assert plan.stall is S.BOOTSTRAP_CREDENTIAL_SUSPECT and plan.replace == () and plan.create == ()
