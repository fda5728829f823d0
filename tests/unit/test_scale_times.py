"""``status.lastScaleUpTime`` / ``lastScaleDownTime``: the original's window anchors, which its
dashboards read, written by the autoscaler from its policy memory.

What these prove: a scale-up publishes ``lastScaleUpTime`` at the decision's time and no
scale-down time; a scale-down of cells that served publishes ``lastScaleDownTime``; Shadow mode
(nothing acted) re-applies the stored times instead of moving them or dropping them.
"""

from __future__ import annotations

from autoscaler.explain import rfc3339, scale_times
from autoscaler.policy.types import PolicyMemory
from tests.unit import test_loop
from tests.unit.test_loop_fakes import pending_pod, pool_manifest

NOW = 1_800_000_000.0


def test_times_come_from_the_policy_memory() -> None:
    memory = PolicyMemory(last_scale_up_at=NOW - 600, last_scale_down_at=NOW - 60)
    assert scale_times(memory, True, {}) == {
        "lastScaleUpTime": rfc3339(NOW - 600),
        "lastScaleDownTime": rfc3339(NOW - 60),
    }
    assert scale_times(PolicyMemory(), True, {"lastScaleUpTime": "x"}) == {}


def test_shadow_mode_re_applies_the_stored_times_only() -> None:
    stored = {"lastScaleUpTime": "2027-01-15T08:00:00Z", "lastScaleDownTime": 7, "x": "y"}
    memory = PolicyMemory(last_scale_up_at=NOW, last_scale_down_at=NOW)
    assert scale_times(memory, False, stored) == {"lastScaleUpTime": "2027-01-15T08:00:00Z"}


world = test_loop.world  # the loop's fixture: an Autoscaler on fakes and a virtual clock


async def test_the_loop_publishes_the_scale_up_time(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    workload.pods = {"p0": pending_pod("p0")}
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    status = writer.for_pool("a")[-1]["status"]
    assert status["lastDecision"]["reason"] == "ScaledUp"
    assert status["lastScaleUpTime"] == status["lastDecision"]["time"]
    assert "lastScaleDownTime" not in status


async def test_shadow_mode_publishes_no_scale_time(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    workload.pods = {"p0": pending_pod("p0")}
    scaler.pool_event("ADDED", pool_manifest("a", mode="Shadow"))
    await clock.advance(0.2)
    status = writer.for_pool("a")[-1]["status"]
    assert status["lastDecision"]["reason"] == "ScaledUp" and status["lastDecision"]["act"] is False
    assert "lastScaleUpTime" not in status
