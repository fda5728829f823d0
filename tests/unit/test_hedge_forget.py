"""With hedged boots, a scale-up whose cells all went before running a pod is forgotten: it
restarts no ``scaleDownDelayAfterScaleUp`` and leaves no recommendation above the count it
returned to in the stabilisation window (``autoscaler.policy.hedge.forget_cancelled``). A pod
that waited seconds for a GPU another pod was freeing must not hold an idle cell for the
whole window after its boots were cancelled."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.hedge import forget_cancelled
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
CONFIG = PolicyConfig(
    max_replicas=100,
    shape=CellShape(gpus=1),
    boot_hedge_fraction=0.5,
    boot_hedge_min_wave=1,
    boot_hedge_delay_boots=0.0,
)
GIB = 1024


def _ready(i: int, memory_gib: int) -> CellView:
    gpus = (GPUUsage(memory_gib * GIB, 0, 1 if memory_gib else 0),)
    pods = 1 if memory_gib else 0
    return CellView(f"c{i}", i, CellState.READY, 0.0, gpus=gpus, pods=pods, ready_at=0.0)


def _booting(i: int) -> CellView:
    return CellView(f"c{i}", i, CellState.BOOTING, NOW + 1.0)


def _pod(memory_gib: int) -> PendingPod:
    return PendingPod("ns/p", GPUAsk(1, memory_gib * GIB, 0), NOW - 5.0)


# c0 runs a 14 GiB pod, c1 a full one, c2 a 7 GiB pod below the utilisation threshold since
# 550 s ago (its pod would re-pack onto c0); the recommendation was 2 cells all along
BEFORE = (_ready(0, 14), _ready(1, 24), _ready(2, 7))
MEMORY = PolicyMemory(
    boots_proven=True, idle_since={"c2": NOW - 550.0}, recommendations=((NOW - 500.0, 2),)
)


def _scale_up() -> Decision:
    """A 20 GiB pod fits no cell: one cell and one spare are started (3 -> 5)."""
    return decide(Observation((_pod(20),), BEFORE), MEMORY, CONFIG, NOW)


def _cancel(memory: PolicyMemory, first_new_cell: CellView) -> Decision:
    """20 s later c1's pod has ended and the 20 GiB pod runs there; nothing waits."""
    cells = (_ready(0, 14), _ready(1, 20), _ready(2, 7), first_new_cell, _booting(4))
    return decide(Observation((), cells), memory, CONFIG, NOW + 20.0)


def test_a_scale_up_is_recorded_with_the_count_it_started_from() -> None:
    up = _scale_up()
    assert (up.reason, up.desired_replicas) == (Reason.SCALED_UP, 5)
    assert up.memory.scale_ups == ((NOW, 3, None),)
    off = decide(
        Observation((_pod(20),), BEFORE), MEMORY, replace(CONFIG, boot_hedge_fraction=0), NOW
    )
    assert off.memory.scale_ups == ()  # a pool without the hedge keeps its memory as it was


def test_cancelling_every_cell_of_a_scale_up_forgets_it() -> None:
    cancel = _cancel(_scale_up().memory, _booting(3))
    assert (cancel.reason, cancel.desired_replicas) == (Reason.SPARES_CANCELLED, 3)
    assert cancel.memory.last_scale_up_at is None
    assert cancel.memory.scale_ups == ()
    assert all(r <= 3 for t, r in cancel.memory.recommendations if t < NOW + 20.0)
    # recorded as the count after the cancel, less c2 (idle, its pod re-packs): 2, not 5 - 1
    assert cancel.memory.recommendations[-1] == (NOW + 20.0, 2)


def test_the_idle_cell_then_goes_when_its_window_ends_not_a_delay_later() -> None:
    cancel = _cancel(_scale_up().memory, _booting(3))
    cells = (_ready(0, 14), _ready(1, 20), _ready(2, 7))
    down = decide(Observation((), cells), cancel.memory, CONFIG, NOW + 60.0)
    assert (down.reason, down.desired_replicas, down.victims) == (Reason.SCALED_DOWN, 2, ("c2",))


def test_a_scale_up_whose_cell_ran_a_pod_is_kept() -> None:
    served = CellView("c3", 3, CellState.READY, NOW + 1.0, gpus=(GPUUsage(GIB, 0, 1),), pods=1)
    cancel = _cancel(_scale_up().memory, served)
    assert (cancel.reason, cancel.desired_replicas) == (Reason.SPARES_CANCELLED, 4)
    assert cancel.memory.last_scale_up_at == NOW
    cells = (_ready(0, 14), _ready(1, 20), _ready(2, 7), served)
    later = decide(Observation((), cells), cancel.memory, CONFIG, NOW + 60.0)
    assert later.reason is Reason.SCALE_DOWN_DELAYED


def test_two_scale_ups_taken_back_together_restore_the_one_before_them() -> None:
    memory = PolicyMemory(
        last_scale_up_at=300.0,
        scale_ups=((100.0, 2, None), (200.0, 3, 100.0), (300.0, 4, 200.0)),
        recommendations=((150.0, 3), (250.0, 5), (300.0, 6), (310.0, 3)),
    )
    forgot = forget_cancelled(memory, count=3, now=310.0)
    assert forgot.last_scale_up_at == 100.0
    assert forgot.scale_ups == ((100.0, 2, None),)
    assert forgot.recommendations == ((150.0, 3), (310.0, 3))


def test_memory_from_an_earlier_version_is_left_alone() -> None:
    stored = PolicyMemory(last_scale_up_at=300.0, recommendations=((300.0, 6),))
    assert forget_cancelled(stored, count=3, now=310.0) == stored
    stale = replace(stored, scale_ups=((200.0, 3, None),))  # the last scale-up is not recorded
    assert forget_cancelled(stale, count=3, now=310.0) == stale


def test_the_scale_ups_survive_a_restart() -> None:
    memory = PolicyMemory(last_scale_up_at=300.0, scale_ups=((100.0, 2, None), (300.0, 4, 100.0)))
    assert decode_memory(encode_memory(memory)) == memory
    assert "ups" not in encode_memory(PolicyMemory())


def test_a_decision_inside_the_bet_holds_nothing_after_it() -> None:
    """The operator decides on every event, the simulator on fewer. A decision made while the
    pod still waited counted the booting cells: six cells less the idle c2 and c3 (their pods
    re-pack onto c0) is 4, exactly the count the cancel returns to. That recommendation must
    not keep the idle cells past their window where a world without that decision lets them
    go (the twin held one for 30 s more: 93 % within +/-1 cell instead of >= 98 %)."""
    before = (_ready(0, 13), _ready(1, 24), _ready(2, 7), _ready(3, 4))
    memory = replace(MEMORY, idle_since={"c2": NOW - 550.0, "c3": NOW - 550.0})
    up = decide(Observation((_pod(21),), before), memory, CONFIG, NOW)
    assert (up.reason, up.desired_replicas) == (Reason.SCALED_UP, 6)
    booting = (_booting(4), _booting(5))
    inside = decide(Observation((_pod(21),), before + booting), up.memory, CONFIG, NOW + 10.0)
    assert inside.memory.recommendations[-1] == (NOW + 10.0, 4)
    served = (_ready(0, 13), _ready(1, 21), _ready(2, 7), _ready(3, 4))
    cancel = decide(Observation((), served + booting), inside.memory, CONFIG, NOW + 20.0)
    assert (cancel.reason, cancel.desired_replicas) == (Reason.SPARES_CANCELLED, 4)
    assert all(r < 4 for t, r in cancel.memory.recommendations if NOW <= t < NOW + 20.0)
    down = decide(Observation((), served), cancel.memory, CONFIG, NOW + 60.0)
    assert (down.reason, down.desired_replicas) == (Reason.SCALED_DOWN, 3)
