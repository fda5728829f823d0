"""A cell's idle time survives a swap: the pool's idle cells count, not which one a pod took.

``scale_down.update_idle_since`` keeps each below-threshold cell's first idle time. When a pod
lands on an idle cell just as another cell's pod ends, the pool still has as many idle cells
as before; the cell that fell idle takes over the busy one's time, so the scale-down window is
not restarted by where HAMi happened to put the pod (a race of moments between two worlds).
``scale_down.hand_over_idle`` does the same when the two changes are seen in two observations
within ``PolicyConfig.idle_hand_over_boots`` of a boot, in either order's first half: the pod
landing first, the cell falling idle after (the time waits in ``PolicyMemory.idle_left``).
"""

from __future__ import annotations

from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.policy_config import PolicyConfig, ScalingRules
from autoscaler.policy.scale_down import hand_over_idle, update_idle_since
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUUsage,
    Observation,
    PolicyMemory,
)

SHAPE = CellShape(gpus=1, memory_mib=24000, cores_percent=100, slots=10)
NOW = 10_000.0
WINDOW = 30.0
CONFIG = PolicyConfig(
    max_replicas=10,
    shape=SHAPE,
    boot_hedge_fraction=0.0,
    scale_down=ScalingRules(WINDOW),
    scale_down_delay_after_scale_up_seconds=0,
)


def _cell(name: str, index: int, busy: bool, state: CellState = CellState.READY) -> CellView:
    usage = GPUUsage(24000, 100, 1) if busy else GPUUsage(0, 0, 0)
    return CellView(name, index, state, 0.0, gpus=(usage,), pods=int(busy), ready_at=0.0)


def test_a_cell_falling_idle_as_an_idle_one_fills_takes_its_time() -> None:
    cells = (_cell("a", 0, busy=True), _cell("b", 1, busy=False))
    assert update_idle_since({"a": NOW - 25}, [cells[1]], NOW, cells) == {"b": NOW - 25}


def test_the_oldest_time_goes_to_the_lowest_index_and_the_rest_start_now() -> None:
    cells = (
        _cell("a", 0, busy=True),
        _cell("b", 1, busy=False),
        _cell("c", 2, busy=False),
        _cell("d", 3, busy=False),
        _cell("e", 4, busy=True),
    )
    previous = {"a": NOW - 10, "e": NOW - 20}
    assert update_idle_since(previous, cells[1:4], NOW, cells) == {
        "b": NOW - 20,
        "c": NOW - 10,
        "d": NOW,
    }


def test_a_cell_that_stayed_idle_keeps_its_own_time() -> None:
    cells = (_cell("a", 0, busy=False), _cell("b", 1, busy=False))
    assert update_idle_since({"a": NOW - 5, "b": NOW - 9}, cells, NOW, cells) == {
        "a": NOW - 5,
        "b": NOW - 9,
    }


def test_a_cell_gone_or_draining_hands_nothing_over() -> None:
    idle = _cell("b", 1, busy=False)
    gone = update_idle_since({"a": NOW - 25}, [idle], NOW, (idle,))
    assert gone == {"b": NOW}  # a was removed: the pool lost that idle cell, not swapped it
    draining = _cell("a", 0, busy=True, state=CellState.DRAINING)
    assert update_idle_since({"a": NOW - 25}, [idle], NOW, (draining, idle)) == {"b": NOW}


def test_without_the_cells_nothing_is_handed_over() -> None:
    idle = _cell("b", 1, busy=False)
    assert update_idle_since({"a": NOW - 25}, [idle], NOW) == {"b": NOW}


def test_decide_scales_down_at_the_pools_window_end_across_a_swap() -> None:
    # a idle since NOW - 25 (its window ends at NOW + 5); at NOW a pod lands on a as b's ends
    busy = _cell("busy", 2, busy=True)
    before = (_cell("a", 0, busy=False), _cell("b", 1, busy=True), busy)
    first = decide(Observation((), before), PolicyMemory(idle_since={}), CONFIG, NOW - 25)
    assert first.memory.idle_since == {"a": NOW - 25}
    swapped = (_cell("a", 0, busy=True), _cell("b", 1, busy=False), busy)
    seen = decide(Observation((), swapped), first.memory, CONFIG, NOW)
    assert seen.memory.idle_since == {"b": NOW - 25}
    assert seen.desired_replicas == 3
    assert seen.steady is not None and seen.steady.until == NOW + 5  # the pool's window end
    at_end = decide(Observation((), swapped), seen.memory, CONFIG, NOW + 5)
    assert (at_end.reason, at_end.desired_replicas, at_end.victims) == (
        Reason.SCALED_DOWN,
        2,
        ("b",),
    )


def test_a_removed_idle_cell_does_not_make_the_next_one_old() -> None:
    # a was scaled down; b falling idle afterwards waits out a window of its own
    memory = PolicyMemory(idle_since={"a": NOW - 40})
    after = (_cell("b", 1, busy=False), _cell("busy", 2, busy=True))
    seen = decide(Observation((), after), memory, CONFIG, NOW)
    assert seen.memory.idle_since == {"b": NOW}
    assert seen.desired_replicas == 2 and seen.reason is not Reason.SCALED_DOWN


def test_a_cell_falling_idle_just_after_a_pod_took_an_idle_one_takes_its_time() -> None:
    # a pod lands on a (idle since NOW - 25) at NOW; b's pod ends 3 s later, seen apart
    took = (_cell("a", 0, busy=True), _cell("b", 1, busy=True))
    idle, left = hand_over_idle({"a": NOW - 25}, (), [], NOW, took, 15.0)
    assert idle == {} and left == ((NOW - 25, NOW),)
    fell = (_cell("a", 0, busy=True), _cell("b", 1, busy=False))
    idle, left = hand_over_idle(idle, left, [fell[1]], NOW + 3, fell, 15.0)
    assert idle == {"b": NOW - 25} and left == ()
    # past the grace the pool did lose an idle cell for a while: b's window starts anew
    _, late = hand_over_idle({"a": NOW - 25}, (), [], NOW, took, 15.0)
    assert hand_over_idle({}, late, [fell[1]], NOW + 16, fell, 15.0) == ({"b": NOW + 16}, ())


def test_decide_keeps_the_pools_window_across_a_swap_seen_in_two_observations() -> None:
    busy = _cell("busy", 2, busy=True)
    before = (_cell("a", 0, busy=False), _cell("b", 1, busy=True), busy)
    first = decide(Observation((), before), PolicyMemory(), CONFIG, NOW - 25)
    took = (_cell("a", 0, busy=True), _cell("b", 1, busy=True), busy)
    landed = decide(Observation((), took), first.memory, CONFIG, NOW)
    assert landed.memory.idle_since == {} and landed.memory.idle_left == ((NOW - 25, NOW),)
    fell = (_cell("a", 0, busy=True), _cell("b", 1, busy=False), busy)
    seen = decide(Observation((), fell), landed.memory, CONFIG, NOW + 2)
    assert seen.memory.idle_since == {"b": NOW - 25} and seen.memory.idle_left == ()
    at_end = decide(Observation((), fell), seen.memory, CONFIG, NOW + 5)
    assert (at_end.reason, at_end.victims) == (Reason.SCALED_DOWN, ("b",))
