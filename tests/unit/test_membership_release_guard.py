"""The release-guard annotation: its value, and when the shell removes it (one wave)."""

from __future__ import annotations

import pytest

from provisioner.fsm.identity import RELEASE_GUARD_ANNOTATION
from provisioner.fsm.membership import (
    CellToCreate,
    IndexHistory,
    MembershipInput,
    MembershipPlan,
    plan_membership,
    release_guard_requested,
    release_guard_used,
)
from provisioner.fsm.vocabulary import StallReason as S


@pytest.mark.parametrize(
    ("value", "requested"),
    [("true", True), ("True", True), (" TRUE ", True), ("yes", False), ("", False)],
)
def test_only_true_requests_the_release(value: str, requested: bool) -> None:
    assert release_guard_requested({RELEASE_GUARD_ANNOTATION: value}) is requested
    assert release_guard_requested({}) is False


def test_hopeless_stall_tells_how_to_release_it() -> None:
    inp = MembershipInput("gpu", 1, (), {0: IndexHistory(3, 0.0)}, 1e6)
    held = plan_membership(inp)
    assert held.stall is S.FAULT_NOT_IN_THE_CELL and held.create == ()
    assert f'{RELEASE_GUARD_ANNOTATION}="true"' in held.stall_message


def test_spent_once_cells_were_created_and_no_replacement_is_pending() -> None:
    created = MembershipPlan(create=(CellToCreate("gpu-1", 1),))
    assert release_guard_used(True, created, replacing=False)
    assert not release_guard_used(False, created, replacing=False)
    assert not release_guard_used(True, MembershipPlan(), replacing=False)
    assert not release_guard_used(True, created, replacing=True)  # its new incarnation first
    both = MembershipPlan(create=created.create, replace=("gpu-0",))
    assert not release_guard_used(True, both, replacing=False)
