"""The in-flight limit: ``maxCellsInFlight`` until a cell has been Ready (boots work), and again
while a cell is Failed; no in-flight limit in between, even at zero cells (issue 14)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.limits import FAILING, PROVEN, UNPROVEN, boot_evidence, in_flight_limit
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
from autoscaler.policy_memory import decode_memory, encode_memory

NOW = 10_000.0
# exact waves here; spare boots on top of them: test_policy_hedge.py
CONFIG = PolicyConfig(
    max_replicas=100, shape=CellShape(gpus=1), max_cells_in_flight=4, boot_hedge_fraction=0.0
)


@pytest.mark.parametrize(
    ("configured", "ready", "failed", "before", "evidence", "limit"),
    [
        (4, 0, 0, False, UNPROVEN, 4),  # a new pool, or one whose boots never succeed: the cap
        (4, 1, 0, False, PROVEN, None),  # one Ready cell proves boots work: no in-flight limit
        (4, 40, 0, False, PROVEN, None),
        (4, 0, 0, True, PROVEN, None),  # scaled to zero after boots worked: still proven
        (4, 40, 1, False, FAILING, 4),  # one Failed cell: back to the cap
        (4, 40, 1, True, FAILING, 4),
        (4, 0, 3, True, FAILING, 4),
        (2, 0, 0, False, UNPROVEN, 2),
    ],
)
def test_in_flight_limit(
    configured: int, ready: int, failed: int, before: bool, evidence: str, limit: int | None
) -> None:
    assert boot_evidence(ready, failed, before) == evidence
    assert in_flight_limit(configured, ready, failed, before) == limit


def _cell(i: int, state: CellState, pods: int = 1) -> CellView:
    if state is not CellState.READY:
        return CellView(f"c{i}", i, state, NOW - 60)
    usage = (GPUUsage(24576, 100, pods),)
    return CellView(f"c{i}", i, state, 0.0, gpus=usage, pods=pods, ready_at=0.0)


def _burst(n: int) -> tuple[PendingPod, ...]:
    return tuple(PendingPod(f"ns/p{i}", GPUAsk(1, 24576, 100), NOW - 5) for i in range(n))


@pytest.mark.parametrize(
    ("ready", "booting", "failed", "burst", "desired", "reason"),
    [
        (0, 0, 0, 40, 4, Reason.IN_FLIGHT_LIMIT),  # cold pool: 4 at once
        (0, 4, 0, 40, 4, Reason.IN_FLIGHT_LIMIT),  # its first wave still booting: no more
        (1, 3, 0, 40, 41, Reason.SCALED_UP),  # one boot succeeded: the rest in one wave
        (10, 0, 0, 40, 50, Reason.SCALED_UP),  # a 40-GPU burst in one boot, not ten
        (10, 6, 0, 40, 50, Reason.SCALED_UP),  # booting cells are upcoming capacity
        (40, 0, 1, 40, 44, Reason.IN_FLIGHT_LIMIT),  # a Failed cell: back to 4 at once
        (40, 3, 1, 40, 44, Reason.IN_FLIGHT_LIMIT),  # 3 booting of 4
        (40, 4, 1, 40, 44, Reason.IN_FLIGHT_LIMIT),  # 4 booting of 4: nothing more
    ],
)
def test_burst_on_a_pool(
    ready: int, booting: int, failed: int, burst: int, desired: int, reason: Reason
) -> None:
    cells = [_cell(i, CellState.READY) for i in range(ready)]
    cells += [_cell(ready + i, CellState.BOOTING) for i in range(booting)]
    cells += [_cell(ready + booting + i, CellState.FAILED) for i in range(failed)]
    d = decide(Observation(_burst(burst), tuple(cells)), PolicyMemory(), CONFIG, NOW)
    assert (d.reason, d.desired_replicas) == (reason, desired), d.message


def test_message_says_why_the_cap_holds() -> None:
    d = decide(Observation(_burst(40), ()), PolicyMemory(), CONFIG, NOW)
    assert "0 booting of 4 in flight (no cell Ready yet)" in d.message
    cells = (*(_cell(i, CellState.READY) for i in range(10)), _cell(10, CellState.FAILED))
    d = decide(Observation(_burst(40), cells), PolicyMemory(), CONFIG, NOW)
    assert "0 booting of 4 in flight (1 Failed cell(s))" in d.message


def test_physical_gpus_still_bound_a_big_wave() -> None:
    cells = tuple(_cell(i, CellState.READY) for i in range(20))
    obs = Observation(_burst(40), cells, free_physical_gpus=3)
    d = decide(obs, PolicyMemory(), CONFIG, NOW)
    assert (d.reason, d.desired_replicas) == (Reason.INSUFFICIENT_PHYSICAL_GPU, 23)


def test_max_replicas_still_bounds_a_big_wave() -> None:
    cells = tuple(_cell(i, CellState.READY) for i in range(20))
    d = decide(
        Observation(_burst(40), cells), PolicyMemory(), replace(CONFIG, max_replicas=25), NOW
    )
    assert (d.reason, d.desired_replicas) == (Reason.AT_MAX_REPLICAS, 25)


def test_memory_keeps_the_proof_through_zero_cells_and_a_failure_drops_it() -> None:
    cells = tuple(_cell(i, CellState.READY) for i in range(2))
    d = decide(Observation((), cells), PolicyMemory(), CONFIG, NOW)
    assert d.memory.boots_proven
    cold = decide(Observation(_burst(40), ()), d.memory, CONFIG, NOW + 1)
    assert (cold.reason, cold.desired_replicas) == (Reason.SCALED_UP, 40)  # one wave
    fresh = decide(Observation(_burst(40), ()), PolicyMemory(), CONFIG, NOW + 1)
    assert (fresh.reason, fresh.desired_replicas) == (Reason.IN_FLIGHT_LIMIT, 4)
    failed = decide(Observation((), (_cell(0, CellState.FAILED),)), d.memory, CONFIG, NOW + 2)
    assert not failed.memory.boots_proven
    after = decide(Observation(_burst(40), ()), failed.memory, CONFIG, NOW + 3)
    assert (after.reason, after.desired_replicas) == (Reason.IN_FLIGHT_LIMIT, 4)


def test_the_proof_survives_an_operator_restart() -> None:
    for proven in (True, False):
        stored = encode_memory(PolicyMemory(boots_proven=proven))
        assert decode_memory(stored).boots_proven is proven
    assert not decode_memory('{"v": 1, "bp": "yes"}').boots_proven  # only a real true counts
