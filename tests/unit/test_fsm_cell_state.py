"""Table-driven tests of the cell state machine: every phase, every reason, budgets, freezes."""
# ruff: noqa: E501  (the tables below keep one case per line on purpose)

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from provisioner.fsm.cell_state import (
    Budgets,
    CellDecision,
    CellObservation,
    CellRow,
    GPUCapacity,
    NodeStatus,
    OuterStatus,
    decide_cell,
)
from provisioner.fsm.identity import Liveness
from provisioner.fsm.vocabulary import CellPhase as P
from provisioner.fsm.vocabulary import CellReason as R

NOW = 10_000.0
UID = "uid-1"
HAMI_OK = GPUCapacity(gate_label_on=True, healthy_devices=1, allocatable_gpus=10)
NO_GUEST = OuterStatus()
ALLOCATING = OuterStatus(exists=True, uid=UID, created_at_s=NOW - 10)
PROVISIONING = replace(ALLOCATING, gpu_devices=("0000:01:00.0",))
BOOTING = replace(PROVISIONING, running=True)
UP = replace(BOOTING, address="10.0.0.5")
NO_NODE = NodeStatus()
NODE_NOT_READY = NodeStatus(exists=True, instance_label=UID, liveness=Liveness.LIVE)
NODE_READY_NO_GPU = replace(NODE_NOT_READY, ready=True)
NODE_READY = replace(NODE_READY_NO_GPU, capacity=HAMI_OK)


def obs(outer: OuterStatus, node: NodeStatus = NO_NODE, reachable: bool = True) -> CellObservation:
    return CellObservation(outer=outer, node=node, workload_reachable=reachable)


def row(phase: P, since: float = NOW - 1, **kw: Any) -> CellRow:
    return CellRow(phase=phase, guest_uid=UID, last_transition_s=since, **kw)


def run(prev: CellRow, o: CellObservation, budgets: Budgets | None = None) -> CellDecision:
    return decide_cell(prev, o, budgets or Budgets(), NOW)


# (id, previous phase, observation, expected phase, expected reason)
LAYERS = [
    ("no-outer-object", P.PENDING, obs(NO_GUEST), P.PENDING, R.GUEST_NOT_CREATED),
    ("no-gpu-yet", P.PENDING, obs(ALLOCATING), P.ALLOCATING_GPU, R.WAITING_FOR_GPU_ALLOCATION),
    ("gpu-not-running", P.ALLOCATING_GPU, obs(PROVISIONING), P.GUEST_PROVISIONING, R.WAITING_FOR_GUEST),
    ("running-no-address", P.GUEST_PROVISIONING, obs(BOOTING), P.BOOTING, R.WAITING_FOR_ADDRESS),
    ("node-missing", P.BOOTING, obs(UP), P.JOINING, R.WAITING_FOR_NODE),
    ("node-not-ready", P.JOINING, obs(UP, NODE_NOT_READY), P.JOINING, R.NODE_NOT_READY),
    ("node-ready-no-gpu", P.JOINING, obs(UP, NODE_READY_NO_GPU), P.AWAITING_GPU_CAPACITY, R.WAITING_FOR_GPU_CAPACITY),
    ("three-layers-ready", P.AWAITING_GPU_CAPACITY, obs(UP, NODE_READY), P.READY, R.CELL_READY),
    ("straight-to-ready", P.PENDING, obs(UP, NODE_READY), P.READY, R.CELL_READY),
    ("regress-node-notready", P.READY, obs(UP, NODE_NOT_READY), P.JOINING, R.NODE_NOT_READY),
    ("regress-node-gone", P.READY, obs(UP, NO_NODE), P.JOINING, R.WAITING_FOR_NODE),
    ("regress-hami-restart", P.READY, obs(UP, NODE_READY_NO_GPU), P.AWAITING_GPU_CAPACITY, R.WAITING_FOR_GPU_CAPACITY),
    ("regress-vm-lost-address", P.READY, obs(BOOTING, NODE_READY), P.BOOTING, R.WAITING_FOR_ADDRESS),
    ("outer-failed", P.BOOTING, obs(replace(UP, failed=True, failure_message="VmFailed")), P.FAILED, R.GUEST_FAILED),
    ("dhcp-timeout", P.BOOTING, obs(replace(BOOTING, network_failed=True)), P.FAILED, R.GUEST_NETWORK_FAILED),
    ("outer-deleting", P.READY, obs(replace(UP, deleting=True), NODE_READY), P.DRAINING, R.CELL_DRAINING),
    ("foreign-node", P.BOOTING, obs(UP, replace(NODE_READY, owned=False)), P.JOINING, R.FOREIGN_NODE),
    ("unreachable-freezes-ready", P.READY, obs(UP, NO_NODE, reachable=False), P.READY, R.UNREACHABLE),
    ("unreachable-never-keeps-a-foreign-node-ready", P.READY, obs(UP, replace(NODE_READY, owned=False), reachable=False), P.JOINING, R.UNREACHABLE),
    ("unreachable-freezes-joining", P.JOINING, obs(UP, reachable=False), P.JOINING, R.UNREACHABLE),
    ("unreachable-outer-still-progresses", P.ALLOCATING_GPU, obs(BOOTING, reachable=False), P.BOOTING, R.WAITING_FOR_ADDRESS),
    ("unreachable-terminal-failure-wins", P.READY, obs(replace(UP, failed=True), reachable=False), P.FAILED, R.GUEST_FAILED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("prev", "o", "phase", "reason"), [c[1:] for c in LAYERS], ids=[c[0] for c in LAYERS]
)
def test_layers(prev: P, o: CellObservation, phase: P, reason: R) -> None:
    d = run(row(prev), o)
    assert (d.row.phase, d.row.reason) == (phase, reason)
    assert d.failed == (phase is P.FAILED)


# (id, phase held, observation, held for s, budgets, expected phase, expected reason)
B = Budgets(bootstrap_ready_timeout_s=900, capacity_ready_timeout_s=300, total_provision_s=10**6)
TIMEOUTS = [
    ("alloc-within", P.ALLOCATING_GPU, obs(ALLOCATING), 899, P.ALLOCATING_GPU, R.WAITING_FOR_GPU_ALLOCATION),
    ("alloc-over", P.ALLOCATING_GPU, obs(ALLOCATING), 901, P.FAILED, R.CELL_PROVISION_TIMEOUT),
    ("provisioning-over", P.GUEST_PROVISIONING, obs(PROVISIONING), 901, P.FAILED, R.CELL_PROVISION_TIMEOUT),
    ("booting-over", P.BOOTING, obs(BOOTING), 901, P.FAILED, R.CELL_PROVISION_TIMEOUT),
    ("never-registered", P.JOINING, obs(UP), 901, P.FAILED, R.NODE_NEVER_REGISTERED),
    ("join-timeout", P.JOINING, obs(UP, NODE_NOT_READY), 901, P.FAILED, R.JOIN_TIMEOUT),
    ("gpu-within", P.AWAITING_GPU_CAPACITY, obs(UP, NODE_READY_NO_GPU), 299, P.AWAITING_GPU_CAPACITY, R.WAITING_FOR_GPU_CAPACITY),
    ("gpu-not-advertised", P.AWAITING_GPU_CAPACITY, obs(UP, NODE_READY_NO_GPU), 301, P.FAILED, R.GPU_NOT_ADVERTISED),
    ("foreign-node-collision", P.JOINING, obs(UP, replace(NODE_READY, owned=False)), 901, P.FAILED, R.NODE_NAME_COLLISION),
    ("ready-never-times-out", P.READY, obs(UP, NODE_READY), 10**5, P.READY, R.CELL_READY),
    ("pending-never-times-out", P.PENDING, obs(NO_GUEST), 10**5, P.PENDING, R.GUEST_NOT_CREATED),
    ("new-phase-resets-clock", P.ALLOCATING_GPU, obs(PROVISIONING), 10**4, P.GUEST_PROVISIONING, R.WAITING_FOR_GUEST),
    ("frozen-never-times-out", P.JOINING, obs(UP, reachable=False), 10**5, P.JOINING, R.UNREACHABLE),
]  # fmt: skip


@pytest.mark.parametrize(
    ("prev", "o", "held_s", "phase", "reason"),
    [c[1:] for c in TIMEOUTS],
    ids=[c[0] for c in TIMEOUTS],
)
def test_per_phase_budgets(prev: P, o: CellObservation, held_s: float, phase: P, reason: R) -> None:
    d = run(row(prev, since=NOW - held_s), o, B)
    assert (d.row.phase, d.row.reason) == (phase, reason)


def test_total_budget_bounds_a_never_ready_incarnation() -> None:
    outer = replace(UP, created_at_s=NOW - 1801)
    d = run(row(P.JOINING, since=NOW - 5), obs(outer), Budgets(bootstrap_ready_timeout_s=900))
    assert (d.row.phase, d.row.reason, d.failed) == (P.FAILED, R.CELL_PROVISION_TIMEOUT, True)


def test_total_budget_does_not_apply_after_first_ready() -> None:
    outer = replace(UP, created_at_s=NOW - 10**5)
    d = run(row(P.JOINING, since=NOW - 5, ready_once=True), obs(outer))
    assert d.row.phase is P.JOINING


def test_regression_restarts_the_phase_clock_and_is_not_failure() -> None:
    d = run(row(P.READY, since=NOW - 10**5, ready_once=True), obs(UP, NODE_NOT_READY))
    assert d.row.phase is P.JOINING and not d.failed
    assert d.row.last_transition_s == NOW
    assert d.row.ready_once  # the latch survives regression


def test_first_clear_look_after_unreachable_restarts_the_clock() -> None:
    prev = row(P.JOINING, since=NOW - 10**5, reason=str(R.UNREACHABLE))
    d = run(prev, obs(UP, NODE_NOT_READY))
    assert (d.row.phase, d.row.reason) == (P.JOINING, R.NODE_NOT_READY)
    assert d.row.last_transition_s == NOW


def test_frozen_phase_keeps_its_transition_time() -> None:
    d = run(row(P.READY, since=NOW - 50), obs(UP, reachable=False))
    assert d.row.last_transition_s == NOW - 50


def test_failed_is_sticky_and_counted_once() -> None:
    first = run(row(P.BOOTING, failure_count=2), obs(replace(UP, failed=True)))
    assert first.failed and first.row.failure_count == 3
    again = run(first.row, obs(UP, NODE_READY))
    assert again.row.phase is P.FAILED and not again.failed and again.row.failure_count == 3
    assert again.row.reason == R.GUEST_FAILED


def test_failed_keeps_a_foreign_reason_string() -> None:
    d = run(row(P.FAILED, reason="MachineFailed", message="m"), obs(UP, NODE_READY))
    assert (d.row.phase, d.row.reason, d.row.message) == (P.FAILED, "MachineFailed", "m")


def test_new_incarnation_resets_row_but_keeps_failure_count() -> None:
    prev = CellRow(
        phase=P.FAILED, guest_uid="old", ready_once=True, failure_count=4, last_transition_s=1
    )
    d = run(prev, obs(replace(ALLOCATING, uid="new")))
    assert d.row.phase is P.ALLOCATING_GPU and d.row.guest_uid == "new"
    assert d.row.failure_count == 4 and not d.row.ready_once and d.row.last_transition_s == NOW


@pytest.mark.parametrize("phase", [P.DRAINING, P.DELETING])
def test_teardown_phases_are_owned_by_teardown(phase: P) -> None:
    d = run(row(phase, reason="CellDraining"), obs(UP, NODE_READY))
    assert d.row.phase is phase and d.row.reason == "CellDraining"


def test_replacement_never_inherits_draining() -> None:
    prev = CellRow(phase=P.DRAINING, guest_uid="old", last_transition_s=1)
    assert run(prev, obs(replace(ALLOCATING, uid="new"))).row.phase is P.ALLOCATING_GPU


# Stale / adopted Nodes: (id, instance label, liveness, phase, reason, reap, relabel)
NODES = [
    ("stale-dead-reaped", "old", Liveness.DEAD, P.JOINING, R.NODE_NAME_COLLISION, True, False),
    ("stale-live-adopted", "old", Liveness.LIVE, P.READY, R.CELL_READY, False, True),
    ("stale-unknown-adopted", "old", Liveness.UNKNOWN, P.READY, R.CELL_READY, False, True),
    ("no-instance-label-current", "", Liveness.DEAD, P.READY, R.CELL_READY, False, False),
    ("current-instance", UID, Liveness.DEAD, P.READY, R.CELL_READY, False, False),
]


@pytest.mark.parametrize(
    ("inst", "live", "phase", "reason", "reap", "relabel"),
    [c[1:] for c in NODES],
    ids=[c[0] for c in NODES],
)
def test_stale_nodes(
    inst: str, live: Liveness, phase: P, reason: R, reap: bool, relabel: bool
) -> None:
    node = replace(NODE_READY, instance_label=inst, liveness=live)
    d = run(row(P.JOINING), obs(UP, node))
    assert (d.row.phase, d.row.reason, d.reap_node, d.relabel_node) == (
        phase,
        reason,
        reap,
        relabel,
    )


# Third layer: (id, capacity, expected devices, ready?, message fragment)
CAPACITY = [
    ("all-good", HAMI_OK, 1, True, ""),
    ("no-gate-label", replace(HAMI_OK, gate_label_on=False), 1, False, "gpu=on label missing"),
    ("no-register-annotation", replace(HAMI_OK, healthy_devices=None), 1, False, "0 of 1"),
    ("too-few-devices", replace(HAMI_OK, healthy_devices=1), 2, False, "1 of 2"),
    (
        "allocatable-zero",
        replace(HAMI_OK, allocatable_gpus=0),
        1,
        False,
        "allocatable nvidia.com/gpu is 0",
    ),
    ("dra-mode-no-allocatable", replace(HAMI_OK, allocatable_gpus=None), 1, True, ""),
    (
        "preflight-in-message",
        GPUCapacity(preflight="nvidia-smi: no devices"),
        1,
        False,
        "preflight: nvidia-smi",
    ),
]


@pytest.mark.parametrize(
    ("cap", "want", "ready", "fragment"), [c[1:] for c in CAPACITY], ids=[c[0] for c in CAPACITY]
)
def test_third_layer(cap: GPUCapacity, want: int, ready: bool, fragment: str) -> None:
    o = CellObservation(
        outer=UP,
        node=replace(NODE_READY, capacity=cap),
        workload_reachable=True,
        expected_devices=want,
    )
    d = run(row(P.JOINING), o)
    assert (d.row.phase is P.READY) == ready
    assert fragment in d.row.message


def test_launcher_unschedulable_message_is_surfaced() -> None:
    outer = replace(ALLOCATING, waiting_message="Unschedulable: 0/3 nodes are available")
    d = run(row(P.ALLOCATING_GPU), obs(outer))
    assert "Unschedulable: 0/3" in d.row.message


def test_first_ready_is_reported_once() -> None:
    first = run(row(P.AWAITING_GPU_CAPACITY), obs(UP, NODE_READY))
    assert first.first_ready and first.row.ready_once
    second = decide_cell(first.row, obs(UP, NODE_READY), Budgets(), NOW + 30)
    assert not second.first_ready and second.row.last_transition_s == NOW


def test_new_row_gets_a_transition_time() -> None:
    d = decide_cell(CellRow(), obs(NO_GUEST), Budgets(), NOW)
    assert d.row.last_transition_s == NOW and d.row.phase is P.PENDING
