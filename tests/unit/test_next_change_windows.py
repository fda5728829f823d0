"""next_change: a stabilisation window's clock is when its bound can move, not each expiry.

``decide`` reads the down window's highest recommendation (the up window's lowest). Older
recommendations beyond ``raw`` leaving the window change nothing while a newer one with the
bound's value is still in it, so the decision's ``steady.until`` is when that newest one
leaves; the decision is the same just before then and changes just after.
"""

from __future__ import annotations

from dataclasses import replace

from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.policy_config import PolicyConfig, ScalingRules
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    Observation,
    PendingPod,
    PolicyMemory,
)

SHAPE = CellShape(gpus=1, memory_mib=24000, cores_percent=100, slots=10)
CONFIG = PolicyConfig(max_replicas=10, shape=SHAPE, boot_hedge_fraction=0.0)
NOW = 10_000.0


def _ready(name: str, index: int, memory_mib: int, pods: int) -> CellView:
    usage = GPUUsage(memory_mib, 0, pods)
    return CellView(name, index, CellState.READY, 0.0, gpus=(usage,), pods=pods, ready_at=0.0)


def _same(a: Decision, b: Decision) -> bool:
    keys = ("desired_replicas", "reason", "victims", "act")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def test_down_window_holds_until_its_highest_recommendation_leaves() -> None:
    config = replace(
        CONFIG, scale_down=ScalingRules(300.0), scale_down_delay_after_scale_up_seconds=0
    )
    cells = (_ready("a", 0, 0, 0), _ready("b", 1, 21600, 3))  # a idle, b 90 % used: raw 1
    observation = Observation((), cells)
    recs = ((NOW - 250, 3), (NOW - 200, 2), (NOW - 100, 3))
    memory = PolicyMemory(recommendations=recs, idle_since={"a": 0.0})
    first = decide(observation, memory, config, NOW)
    assert (first.reason, first.desired_replicas) == (Reason.STABILIZING, 2)
    assert first.steady is not None
    assert first.steady.until == NOW + 200  # (NOW - 100, 3) leaves; not NOW + 50 nor + 100
    before = decide(observation, first.memory, config, NOW + 199)
    assert _same(before, first)
    after = decide(observation, first.memory, config, NOW + 201)
    assert (after.reason, after.desired_replicas) == (Reason.SCALED_DOWN, 1)


def test_up_window_holds_until_its_lowest_recommendation_leaves() -> None:
    config = replace(CONFIG, scale_up=ScalingRules(60.0))
    pending = tuple(PendingPod(f"ns/p{i}", GPUAsk(1, 12000), NOW - 5) for i in range(2))
    observation = Observation(pending, ())  # both pods pack on one new cell: raw 1
    recs = ((NOW - 50, 0), (NOW - 40, 1), (NOW - 20, 0))
    first = decide(observation, PolicyMemory(recommendations=recs), config, NOW)
    assert (first.reason, first.desired_replicas) == (Reason.STABILIZING, 0)
    assert first.steady is not None
    assert first.steady.until == NOW + 40  # (NOW - 20, 0) leaves; not NOW + 10
    before = decide(observation, first.memory, config, NOW + 39)
    assert _same(before, first)
    after = decide(observation, first.memory, config, NOW + 41)
    assert after.desired_replicas == 1


def test_a_decision_at_the_window_end_promises_the_next_instant_not_nothing() -> None:
    # The simulator and the live loop wake at ``until``; deciding exactly there, the window
    # still holds its boundary recommendation, so the answer is the same and changes right
    # after. A promise of ``now`` itself read as "none" and left the change to the next tick
    # (30 trace s late in the fidelity demo); the promise is the next instant instead.
    config = replace(
        CONFIG, scale_down=ScalingRules(300.0), scale_down_delay_after_scale_up_seconds=0
    )
    cells = (_ready("a", 0, 0, 0), _ready("b", 1, 21600, 3))
    observation = Observation((), cells)
    memory = PolicyMemory(recommendations=((NOW - 100, 3),), idle_since={"a": 0.0})
    at_end = decide(observation, memory, config, NOW + 200)
    assert (at_end.reason, at_end.desired_replicas) == (Reason.STABILIZING, 2)
    assert at_end.steady is not None
    assert NOW + 200 < at_end.steady.until < NOW + 200.001
    after = decide(observation, at_end.memory, config, at_end.steady.until)
    assert (after.reason, after.desired_replicas) == (Reason.SCALED_DOWN, 1)
