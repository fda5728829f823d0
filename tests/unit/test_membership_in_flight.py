"""The provisioner follows the policy's in-flight rule for an autoscaled pool (issue 14):
``max_in_flight`` until a cell has been Ready and while one is Failed, lifted in between."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucellpool.api import GPUCellPool
from provisioner.fsm.membership import (
    MemberRow,
    MembershipInput,
    MembershipLimits,
    plan_membership,
)
from provisioner.fsm.vocabulary import CellPhase as P
from provisioner.planning import membership_limits

NOW = 100_000.0
LIFTED = MembershipLimits(max_in_flight=4, lift_in_flight_when_proven=True)
SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"


def _rows(*phases: P) -> tuple[MemberRow, ...]:
    return tuple(
        MemberRow(f"gpu-{i}", i, phase, ready_once=phase is P.READY)
        for i, phase in enumerate(phases)
    )


@pytest.mark.parametrize(
    ("phases", "desired", "limits", "created"),
    [
        ((), 40, LIFTED, 4),  # a cold pool: its first wave is capped
        ((P.BOOTING,) * 4, 40, LIFTED, 0),  # ... and waits for it
        ((P.READY,) + (P.BOOTING,) * 3, 40, LIFTED, 36),  # one Ready cell: the rest at once
        ((P.READY,) * 10, 50, LIFTED, 40),
        ((P.READY,) * 10 + (P.FAILED,), 51, LIFTED, 4),  # a Failed cell: back to the cap
        ((P.READY,) * 10, 50, MembershipLimits(max_in_flight=4), 4),  # not lifted: the cap
    ],
)
def test_in_flight_rule(
    phases: tuple[P, ...], desired: int, limits: MembershipLimits, created: int
) -> None:
    inp = MembershipInput("gpu", desired, _rows(*phases), {}, NOW, limits=limits)
    assert len(plan_membership(inp).create) == created


def test_a_pool_that_was_ready_before_lifts_the_cap_from_zero_cells() -> None:
    inp = MembershipInput("gpu", 40, (), {}, NOW, limits=LIFTED, pool_ever_ready=True)
    assert len(plan_membership(inp).create) == 40
    inp = MembershipInput("gpu", 40, (), {}, NOW, limits=LIFTED)
    assert len(plan_membership(inp).create) == 4


def test_physical_gpus_still_bound_a_lifted_wave() -> None:
    inp = MembershipInput(
        "gpu", 50, _rows(*(P.READY,) * 10), {}, NOW, limits=LIFTED, free_physical_gpus=3
    )
    assert len(plan_membership(inp).create) == 3


def _pool(sample: str, **autoscaling: Any) -> GPUCellPool:
    body = yaml.safe_load((SAMPLES / sample).read_text())
    body["spec"].setdefault("autoscaling", {}).update(autoscaling)
    return GPUCellPool.model_validate(body)


def test_only_autoscaled_pools_lift_the_cap() -> None:
    base = MembershipLimits()
    assert membership_limits(_pool("autoscaling-on.yaml"), base).lift_in_flight_when_proven
    assert not membership_limits(_pool("autoscaling-off.yaml"), base).lift_in_flight_when_proven
