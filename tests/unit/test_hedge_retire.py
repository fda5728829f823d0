"""With hedged boots, a cell that has never run a pod is a bet: once nothing waits for a booting
or new cell, such a cell that has been Ready for the grace (``unused_ready_grace_boots``)
retires instead of idling out the scale-down window (``autoscaler.policy.hedge``,
``PolicyMemory.never_used``). The memory follows each cell from its first Booting observation;
a pod seen running on it ends the bet for good."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.hedge import unused_grace_seconds
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    MetricsHealth,
    Observation,
    PendingPod,
    PolicyMemory,
)
from autoscaler.policy_memory import decode_memory, encode_memory, memory_field

NOW = 10_000.0
CONFIG = PolicyConfig(max_replicas=100, shape=CellShape(gpus=1), boot_hedge_fraction=0.75)
PROVEN = PolicyMemory(boots_proven=True)
ONE_GPU = (GPUUsage(24576, 100, 1),)
FREE = (GPUUsage(0, 0, 0),)
GRACE = unused_grace_seconds(CONFIG)  # Ready this long: may retire


def _busy(i: int) -> CellView:
    return CellView(f"c{i}", i, CellState.READY, 0.0, gpus=ONE_GPU, pods=1, ready_at=0.0)


def _booting(i: int) -> CellView:
    return CellView(f"c{i}", i, CellState.BOOTING, NOW - 200.0)


def _empty_ready(i: int, at: float = NOW) -> CellView:
    return CellView(f"c{i}", i, CellState.READY, NOW - 200.0, gpus=FREE, ready_at=at)


def _pods(n: int) -> tuple[PendingPod, ...]:
    return tuple(PendingPod(f"ns/p{i}", GPUAsk(1, 24576, 100), NOW - 5) for i in range(n))


def _seen_booting(config: PolicyConfig = CONFIG, memory: PolicyMemory = PROVEN) -> Decision:
    """A call that saw c1 booting for a pending pod and c2 booting as its spare (c0 busy)."""
    cells = (_busy(0), _booting(1), _booting(2))
    return decide(Observation(_pods(1), cells), memory, config, NOW - 100)


def test_booting_cells_are_remembered_as_never_used() -> None:
    # the spare is a bet, and so is the cell the pod waits for: the pod takes whichever is
    # Ready first (live, its pod may show on a cell a decision after it turned Ready, hence the
    # grace: tests/unit/test_policy_hedge.py)
    assert _seen_booting().memory.never_used == {"c1", "c2"}


def test_an_unused_cell_ready_for_the_grace_with_nothing_waiting_retires() -> None:
    # the pod found c1; its spare c2 became Ready a moment later, empty: the bet lost
    just_up = replace(_seen_booting().memory, last_scale_up_at=NOW - 100)  # delay not over
    cells = (_busy(0), replace(_busy(1), created_at=NOW - 200), _empty_ready(2, NOW - GRACE))
    early = decide(Observation((), cells), just_up, CONFIG, NOW - 1)
    assert early.desired_replicas == 3 and not early.victims  # within the grace
    assert early.steady is not None and early.steady.until == NOW  # it wakes at the grace's end
    d = decide(Observation((), cells), just_up, CONFIG, NOW)
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.SPARES_CANCELLED, 2, ("c2",))
    assert "retiring 1 Ready cell(s) that never ran a pod" in d.message
    assert d.memory.scale_events[-1] == (NOW, -1)
    assert d.memory.never_used == {"c2"}  # c1 ran a pod: no longer a bet


def test_without_the_hedge_the_same_cell_waits_out_the_idle_window() -> None:
    off = replace(CONFIG, boot_hedge_fraction=0.0)
    memory = _seen_booting(off).memory
    assert memory.never_used == frozenset()  # nothing kept: the status is as before
    cells = (_busy(0), _busy(1), _empty_ready(2))
    d = decide(Observation((), cells), memory, off, NOW)
    assert d.desired_replicas == 3 and not d.victims


def test_a_cell_that_ran_a_pod_is_no_bet_any_more() -> None:
    memory = _seen_booting().memory
    ran = decide(Observation((), (_busy(0), _busy(1), _busy(2))), memory, CONFIG, NOW - 50)
    assert ran.memory.never_used == frozenset()
    later = decide(Observation((), (_busy(0), _busy(1), _empty_ready(2))), ran.memory, CONFIG, NOW)
    assert later.desired_replicas == 3 and not later.victims


def test_a_cell_first_seen_ready_is_not_retired() -> None:
    d = decide(Observation((), (_busy(0), _empty_ready(1))), PROVEN, CONFIG, NOW)
    assert d.desired_replicas == 2 and not d.victims


def test_kept_while_pods_wait_for_booting_or_new_cells() -> None:
    memory = replace(PROVEN, never_used=frozenset({"c2", "c3"}))
    cells = (_busy(0), _busy(1), _empty_ready(2), _booting(3))
    # two pods: one is packed onto the empty Ready cell, the other waits for the booting one
    d = decide(Observation(_pods(2), cells), memory, CONFIG, NOW + GRACE)
    assert "c2" not in d.victims and d.desired_replicas >= 4
    # only a pod seen running ends a bet: the pods may yet bind elsewhere
    assert d.memory.never_used == {"c2", "c3"}


def test_the_floor_and_the_headroom_keep_unused_cells() -> None:
    memory = replace(PROVEN, never_used=frozenset({"c1", "c2"}))
    cells = (_busy(0), _empty_ready(1, NOW - GRACE), _empty_ready(2, NOW - GRACE))
    floor = decide(Observation((), cells), memory, replace(CONFIG, min_replicas=2), NOW)
    assert (floor.desired_replicas, floor.victims) == (2, ("c2",))
    head = decide(Observation((), cells), memory, replace(CONFIG, headroom_cells=2), NOW)
    assert head.desired_replicas == 3 and not head.victims
    both = decide(Observation((), cells), memory, CONFIG, NOW)
    assert both.victims == ("c2", "c1")  # newest first


def test_untrusted_pods_drop_ready_cells_from_the_memory() -> None:
    memory = replace(PROVEN, never_used=frozenset({"c1", "c2"}))
    cells = (_busy(0), _empty_ready(1), _booting(2))
    stale = Observation((), cells, metrics=MetricsHealth(fresh=False))
    d = decide(stale, memory, CONFIG, NOW)
    assert not d.victims and d.memory.never_used == {"c2"}


def test_the_memory_round_trips_through_the_status_and_is_dropped_first_when_long() -> None:
    memory = replace(PROVEN, never_used=frozenset({"pool-3", "pool-7"}))
    assert decode_memory(encode_memory(memory)).never_used == memory.never_used
    assert '"nu"' not in encode_memory(PROVEN)  # a pool without the hedge writes what it did
    crowded = replace(memory, idle_since={f"pool-{i}": float(i) for i in range(2000)})
    assert decode_memory(memory_field(crowded, limit=20_000)).never_used == frozenset()
    assert decode_memory(memory_field(memory, limit=20_000)).never_used == memory.never_used
