"""The provisioner's in-flight cap follows the autoscaler's: a sized scale-up is not throttled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autoscaler.policy.policy_config import PolicyConfig
from gpucellpool.api import GPUCellPool
from provisioner.fsm.membership import MembershipLimits
from provisioner.reconciler import membership_limits

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"


def _pool(name: str, **autoscaling: Any) -> GPUCellPool:
    body = yaml.safe_load((SAMPLES / name).read_text())
    body["spec"].setdefault("autoscaling", {}).update(autoscaling)
    return GPUCellPool.model_validate(body)


def test_autoscaled_pool_uses_its_own_in_flight_cap() -> None:
    base = MembershipLimits()
    limits = membership_limits(_pool("autoscaling-on.yaml", maxCellsInFlight=7), base)
    assert limits.max_in_flight == 7
    assert limits.max_failures_per_index == base.max_failures_per_index  # the rest is kept


def test_autoscaled_pool_without_the_field_gets_the_policy_default() -> None:
    body = yaml.safe_load((SAMPLES / "autoscaling-on.yaml").read_text())
    del body["spec"]["autoscaling"]["maxCellsInFlight"]
    limits = membership_limits(GPUCellPool.model_validate(body), MembershipLimits())
    assert limits.max_in_flight == PolicyConfig().max_cells_in_flight == 4


def test_pool_without_autoscaling_keeps_the_base_limits() -> None:
    base = MembershipLimits(max_in_flight=2)
    assert membership_limits(_pool("autoscaling-off.yaml"), base) is base
