"""Each peer baseline follows its documented rule, on tiny hand-made observations."""

from __future__ import annotations

import pytest

from autoscaler.policy.decision import Reason
from autoscaler.policy.policy_config import PolicyConfig
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
from simulations.simulator.baselines import (
    ClusterAutoscalerStyle,
    HPAStyle,
    OriginalGpucellpool,
    oracle,
)
from simulations.simulator.traces import TracePod

CONFIG = PolicyConfig(max_replicas=50)
SMALL = GPUAsk(memory_percent=10, cores_percent=10)
IDLE = GPUUsage()


def pending(count: int, ask: GPUAsk = SMALL, at: float = 0.0) -> tuple[PendingPod, ...]:
    return tuple(PendingPod(f"p{i}", ask, at) for i in range(count))


def cell(
    index: int, used: GPUUsage = IDLE, state: CellState = CellState.READY, pods: int = 0
) -> CellView:
    asks = tuple((SMALL,) for _ in range(pods))
    gpus = (used,) if state is CellState.READY else ()
    return CellView(f"cell-{index}", index, state, 0.0, gpus, pods, pods, 0.0, asks)


def test_ca_sees_each_fractional_pod_as_a_whole_gpu() -> None:
    ca = ClusterAutoscalerStyle()
    decision = ca.decide(Observation(pending(4), ()), PolicyMemory(), CONFIG, 0.0)
    assert decision.desired_replicas == 4  # four 10 % pods -> four 1-GPU nodes
    booting = tuple(cell(i, state=CellState.BOOTING) for i in range(4))
    again = ca.decide(Observation(pending(4), booting), decision.memory, CONFIG, 10.0)
    assert again.desired_replicas == 4  # upcoming nodes count as capacity


def test_ca_removes_an_unneeded_node_after_ten_minutes_not_after_a_scale_up() -> None:
    ca = ClusterAutoscalerStyle()
    busy = cell(0, GPUUsage(2458, 10, 1), pods=1)  # 1 of 1 GPU requested: 100 % in CA's view
    empty = cell(1)
    obs = Observation((), (busy, empty))
    memory = PolicyMemory(last_scale_up_at=-1000.0)
    first = ca.decide(obs, memory, CONFIG, 0.0)
    assert first.desired_replicas == 2 and first.victims == ()
    early = ca.decide(obs, first.memory, CONFIG, 599.0)
    assert early.victims == ()
    ripe = ca.decide(obs, early.memory, CONFIG, 600.0)
    assert ripe.reason is Reason.SCALED_DOWN and ripe.victims == ("cell-1",)
    after_add = PolicyMemory(last_scale_up_at=500.0, idle_since={"cell-1": 0.0})
    assert ca.decide(obs, after_add, CONFIG, 700.0).reason is Reason.SCALE_DOWN_DELAYED


def test_hpa_formula_tolerance_and_activation() -> None:
    hpa = HPAStyle(target_utilisation=0.7)
    full = GPUUsage(24576, 100, 1)
    obs = Observation((), (cell(0, full, pods=1), cell(1, full, pods=1)))
    assert hpa.decide(obs, PolicyMemory(), CONFIG, 0.0).desired_replicas == 3  # ceil(2/0.7)
    near = GPUUsage(int(24576 * 0.75), 75, 1)  # 0.75 / 0.7 = 1.07: inside the tolerance
    obs = Observation((), (cell(0, near, pods=1), cell(1, near, pods=1)))
    assert hpa.decide(obs, PolicyMemory(), CONFIG, 0.0).desired_replicas == 2
    assert (
        hpa.decide(Observation(pending(3), ()), PolicyMemory(), CONFIG, 0.0).desired_replicas == 1
    )


def test_hpa_down_stabilisation_keeps_the_highest_recent_recommendation() -> None:
    hpa = HPAStyle(target_utilisation=0.7)
    cells = tuple(cell(i) for i in range(4))
    memory = PolicyMemory(recommendations=((0.0, 4),))
    held = hpa.decide(Observation((), cells), memory, CONFIG, 299.0)
    assert held.desired_replicas == 4 and held.reason is Reason.STABILIZING
    down = hpa.decide(Observation((), cells), held.memory, CONFIG, 600.0)
    assert down.desired_replicas == 0 and len(down.victims) == 4


def test_original_one_cell_per_ten_minutes() -> None:
    policy = OriginalGpucellpool()
    first = policy.decide(Observation(pending(20), ()), PolicyMemory(), CONFIG, 0.0)
    assert first.desired_replicas == 1  # one cell, however large the backlog
    booting = (cell(0, state=CellState.BOOTING),)
    held = policy.decide(Observation(pending(20), booting), first.memory, CONFIG, 599.0)
    assert held.reason is Reason.STABILIZING and held.desired_replicas == 1
    later = policy.decide(Observation(pending(20), (cell(0),)), first.memory, CONFIG, 600.0)
    assert later.desired_replicas == 2


def test_original_scales_down_one_idle_cell_after_thirty_quiet_minutes() -> None:
    policy = OriginalGpucellpool()
    cells = (cell(0), cell(1), cell(2, GPUUsage(100, 10, 1), pods=1))
    memory = PolicyMemory(last_scale_up_at=-5000.0)
    assert policy.decide(Observation((), cells), memory, CONFIG, 0.0).victims == ()
    assert policy.decide(Observation((), cells), memory, CONFIG, 1799.0).victims == ()
    down = policy.decide(Observation((), cells), memory, CONFIG, 1800.0)
    assert down.desired_replicas == 2 and down.victims == ("cell-0",)


def test_original_unsatisfiable_pod_blocks_scale_down() -> None:
    policy = OriginalGpucellpool()
    shape2 = PolicyConfig(max_replicas=50, shape=CellShape(gpus=2))
    two_gpu = pending(1, GPUAsk(gpu_count=2))
    cells = (cell(0), cell(1))
    for now in (0.0, 1000.0, 5000.0):
        decision = policy.decide(Observation(two_gpu, cells), PolicyMemory(), shape2, now)
        assert decision.reason is Reason.DEMAND_UNSATISFIABLE and decision.victims == ()


def test_oracle_packs_running_pods_with_zero_wait() -> None:
    half = GPUAsk(memory_percent=50, cores_percent=50)
    pods = (
        TracePod("a", 0.0, 100.0, half),
        TracePod("b", 50.0, 100.0, half),  # shares a's GPU from 50 to 100
        TracePod("c", 60.0, 20.0, half),  # needs a second cell from 60 to 80
    )
    result = oracle(pods, CellShape())
    assert result.cost_cell_hours * 3600 == pytest.approx(150.0 + 20.0)
    assert set(result.waits_seconds) == {0.0}
