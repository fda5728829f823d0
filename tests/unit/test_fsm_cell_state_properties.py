"""Property tests: the cell state machine never fails a cell without a cause."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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
from provisioner.fsm.vocabulary import CellPhase, CellReason

NOW = 100_000.0
BUDGETS = Budgets(bootstrap_ready_timeout_s=900, capacity_ready_timeout_s=300)

outers = st.builds(
    OuterStatus,
    exists=st.booleans(),
    uid=st.sampled_from(["", "u1", "u2"]),
    created_at_s=st.one_of(st.none(), st.floats(NOW - 5000, NOW)),
    deleting=st.booleans(),
    gpu_devices=st.sampled_from([(), ("0000:01:00.0",)]),
    running=st.booleans(),
    address=st.sampled_from(["", "10.0.0.1"]),
    failed=st.booleans(),
    network_failed=st.booleans(),
)
nodes = st.builds(
    NodeStatus,
    exists=st.booleans(),
    ready=st.booleans(),
    owned=st.booleans(),
    instance_label=st.sampled_from(["", "u1", "u2"]),
    liveness=st.sampled_from(list(Liveness)),
    capacity=st.builds(
        GPUCapacity,
        gate_label_on=st.booleans(),
        healthy_devices=st.one_of(st.none(), st.integers(0, 2)),
        allocatable_gpus=st.one_of(st.none(), st.integers(0, 10)),
    ),
)
rows = st.builds(
    CellRow,
    phase=st.sampled_from(list(CellPhase)),
    reason=st.sampled_from(["", "Unreachable", "JoinTimeout"]),
    guest_uid=st.sampled_from(["", "u1", "u2"]),
    last_transition_s=st.one_of(st.none(), st.floats(NOW - 5000, NOW)),
    ready_once=st.booleans(),
    failure_count=st.integers(0, 6),
)


@settings(max_examples=600, deadline=None)
@given(rows, outers, nodes, st.booleans())
def test_cell_state_invariants(
    prev: CellRow, outer: OuterStatus, node: NodeStatus, reachable: bool
) -> None:
    d = decide_cell(prev, CellObservation(outer, node, reachable), BUDGETS, NOW)
    new_incarnation = bool(
        prev.guest_uid and outer.exists and outer.uid and prev.guest_uid != outer.uid
    )
    # Counters only move forward, by at most one failure per pass.
    assert d.row.failure_count - prev.failure_count in (0, 1)
    if not new_incarnation:
        assert d.row.ready_once >= prev.ready_once
    assert d.failed == (d.row.failure_count == prev.failure_count + 1)
    # Entering Failed always has a cause: the outer object, its network, or a budget.
    if d.failed:
        outer_cause = outer.exists and (outer.failed or outer.network_failed)
        budget_cause = d.row.reason in {
            CellReason.CELL_PROVISION_TIMEOUT,
            CellReason.NODE_NEVER_REGISTERED,
            CellReason.JOIN_TIMEOUT,
            CellReason.GPU_NOT_ADVERTISED,
            CellReason.NODE_NAME_COLLISION,
        }
        assert outer_cause or budget_cause
        if not outer_cause and not new_incarnation:
            assert prev.reason != CellReason.UNREACHABLE  # doubt never fails a cell
    # Teardown phases are never left by the state machine (same incarnation).
    if prev.phase in (CellPhase.DRAINING, CellPhase.DELETING) and not new_incarnation:
        assert d.row.phase is prev.phase
    # A foreign Node is never reaped, relabelled or accepted as Ready.
    if node.exists and not node.owned and outer.exists and not outer.failed:
        assert not d.reap_node and not d.relabel_node
        assert d.row.phase is not CellPhase.READY
    # The clock moves only on a phase change or the first clear look after a freeze.
    if d.row.last_transition_s != prev.last_transition_s:
        assert (
            d.row.phase is not prev.phase
            or prev.last_transition_s is None
            or prev.reason == CellReason.UNREACHABLE
            or new_incarnation
        )
