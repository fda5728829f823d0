"""Outer-node drain decisions: which cells leave a drained host, within the disruption budget."""

from __future__ import annotations

from provisioner.fsm.drain_outer import (
    REASON_NONE,
    REASON_REQUESTED,
    REASON_UNKNOWN,
    HostNode,
    OuterCell,
    plan_outer_drain,
)

A_CORDONED = HostNode("host-a", unschedulable=True)
B_OK = HostNode("host-b")
HOSTS = {"host-a": A_CORDONED, "host-b": B_OK}


def cells(*spec: tuple[str, int, str | None, bool]) -> tuple[OuterCell, ...]:
    return tuple(OuterCell(name, index, host, draining) for name, index, host, draining in spec)


def test_no_drained_host_means_no_request() -> None:
    plan = plan_outer_drain(cells(("p-0", 0, "host-b", False)), HOSTS, budget=1)
    assert plan.drain == () and plan.held == ()
    assert plan.condition[:2] == ("False", REASON_NONE)


def test_budget_one_drains_lowest_index_first_and_holds_the_rest() -> None:
    placed = cells(("p-1", 1, "host-a", False), ("p-0", 0, "host-a", False))
    plan = plan_outer_drain(placed, HOSTS, budget=1)
    assert plan.drain == ("p-0",) and plan.held == ("p-1",)
    status, reason, message = plan.condition
    assert (status, reason) == ("True", REASON_REQUESTED)
    assert "host-a (cordoned): p-0, p-1" in message and "held by the disruption budget" in message


def test_a_cell_already_draining_uses_the_budget() -> None:
    placed = cells(("p-0", 0, "host-a", True), ("p-1", 1, "host-a", False))
    plan = plan_outer_drain(placed, HOSTS, budget=1)
    assert plan.drain == () and plan.held == ("p-1",)
    other = cells(("p-0", 0, "host-b", True), ("p-1", 1, "host-a", False))
    assert plan_outer_drain(other, HOSTS, budget=1).drain == ()  # a scale-down counts too
    assert plan_outer_drain(other, HOSTS, budget=2).drain == ("p-1",)


def test_drain_taints_count_as_drained_and_other_taints_do_not() -> None:
    hosts = {
        "host-a": HostNode("host-a", taint_keys=frozenset({"karpenter.sh/disrupted"})),
        "host-b": HostNode("host-b", taint_keys=frozenset({"nvidia.com/gpu"})),
    }
    placed = cells(("p-0", 0, "host-a", False), ("p-1", 1, "host-b", False))
    plan = plan_outer_drain(placed, hosts, budget=5)
    assert plan.drain == ("p-0",)
    assert "tainted karpenter.sh/disrupted" in plan.condition[2]


def test_unplaced_cells_and_vanished_hosts_are_not_requests() -> None:
    placed = cells(("p-0", 0, None, False), ("p-1", 1, "host-gone", False))
    assert plan_outer_drain(placed, HOSTS, budget=1).condition[1] == REASON_NONE


def test_unreadable_hosts_start_nothing_and_say_unknown() -> None:
    plan = plan_outer_drain(cells(("p-0", 0, "host-a", False)), None, budget=1)
    assert plan.drain == () and plan.condition[:2] == ("Unknown", REASON_UNKNOWN)


def test_unreachable_workload_starts_no_drain_but_reports_the_request() -> None:
    plan = plan_outer_drain(
        cells(("p-0", 0, "host-a", False)), HOSTS, budget=1, workload_reachable=False
    )
    assert plan.drain == () and plan.held == ("p-0",)
    assert plan.condition[0] == "True" and "unreachable" in plan.condition[2]
