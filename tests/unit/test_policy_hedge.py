"""Hedged boots (``autoscaler.policy.hedge``): a wave starts ``ceil(fraction x cells waited
for)`` spare cells; empty Booting cells beyond that are cancelled at once, newest first, never
below the floor, the forecast or the headroom; no spares when scale-down could not remove them
or when what is pending cannot be trusted (issue 14)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.policy.config import validate_config
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.hedge import (
    MIN_WAVE_CELLS,
    Hedge,
    cancellable,
    hedge,
    pods_waiting,
    unused_grace_seconds,
)
from autoscaler.policy.policy_config import PolicyConfig, ScalingRules
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

NOW = 10_000.0
# the hedge's own rules: spares start with the wave (the delay has its own tests)
# (waves of three cells or more, sized by cells: the per-pod basis and a lone pod's spare have
# their own tests below)
CONFIG = PolicyConfig(
    max_replicas=100,
    shape=CellShape(gpus=1),
    boot_hedge_fraction=0.5,
    boot_hedge_delay_boots=0.0,
    boot_hedge_min_wave=3,
    boot_hedge_per_pod=False,
)
PROVEN = PolicyMemory(boots_proven=True)
ONE_GPU = (GPUUsage(24576, 100, 1),)


def _ready(i: int) -> CellView:
    return CellView(f"c{i}", i, CellState.READY, 0.0, gpus=ONE_GPU, pods=1, ready_at=0.0)


def _booting(i: int, age_s: float = 60.0) -> CellView:
    return CellView(f"c{i}", i, CellState.BOOTING, NOW - age_s)


def _pods(n: int) -> tuple[PendingPod, ...]:
    return tuple(PendingPod(f"ns/p{i}", GPUAsk(1, 24576, 100), NOW - 5) for i in range(n))


def test_hedge_counts_waited_cells_and_cancels_the_newest_spares() -> None:
    cells = [_booting(i, age_s=100.0 + i) for i in range(5)]  # c4 is the oldest
    usage = {"c0": ONE_GPU, "c1": ONE_GPU}  # two booting cells hold packed pods
    h = hedge(cells, usage, new_cells=0, fraction=0.5)
    assert (h.waiting, h.wanted, h.spares, h.missing) == (2, 1, 3, 0)
    assert h.surplus == ("c2", "c3")  # c4 (oldest) is kept as the spare; newest go first


@pytest.mark.parametrize(
    ("held", "new", "fraction", "wanted"),
    [(0, 0, 0.5, 0), (0, 1, 0.5, 1), (0, 40, 0.5, 20), (3, 4, 0.5, 4), (0, 10, 0.0, 0)],
)
def test_hedge_wants_the_ceiling_of_the_fraction(
    held: int, new: int, fraction: float, wanted: int
) -> None:
    cells = [_booting(i) for i in range(held)]
    usage = {c.name: ONE_GPU for c in cells}
    h = hedge(cells, usage, new_cells=new, fraction=fraction)
    started = wanted if held + new >= MIN_WAVE_CELLS else 0  # no spare for a cell or two
    assert (h.waiting, h.wanted, h.missing) == (held + new, wanted, started)


def test_cancellable_keeps_the_floor_the_forecast_and_the_headroom() -> None:
    h = Hedge(waiting=0, wanted=0, spares=4, surplus=("a", "b", "c", "d"))
    assert cancellable(h, current=10, keep=0, empty_cells=4, headroom=0) == 4
    assert cancellable(h, current=10, keep=8, empty_cells=4, headroom=0) == 2  # floor/forecast
    assert cancellable(h, current=10, keep=0, empty_cells=4, headroom=3) == 1  # headroom
    assert cancellable(h, current=10, keep=12, empty_cells=4, headroom=0) == 0


def test_a_burst_starts_its_cells_and_half_as_many_spares() -> None:
    cells = tuple(_ready(i) for i in range(10))
    d = decide(Observation(_pods(40), cells), PROVEN, CONFIG, NOW)
    assert (d.reason, d.cells_needed, d.desired_replicas) == (Reason.SCALED_UP, 40, 70)
    off = decide(Observation(_pods(40), cells), PROVEN, replace(CONFIG, boot_hedge_fraction=0), NOW)
    assert off.desired_replicas == 50


@pytest.mark.parametrize(("pending", "desired"), [(1, 11), (2, 12), (3, 15), (4, 16)])
def test_with_a_min_wave_of_three_smaller_waves_start_no_spares(pending: int, desired: int) -> None:
    cells = tuple(_ready(i) for i in range(10))
    d = decide(Observation(_pods(pending), cells), PROVEN, CONFIG, NOW)
    assert (d.cells_needed, d.desired_replicas) == (pending, desired)


def test_spares_are_cancelled_once_their_pods_found_cells_even_right_after_a_scale_up() -> None:
    # 6 cells booting for 4 pods; 3 pods found Ready cells: 1 still waits, 1 spare hedges it
    cells = (*(_ready(i) for i in range(3)), *(_booting(3 + i, age_s=60.0 + i) for i in range(6)))
    memory = replace(PROVEN, last_scale_up_at=NOW - 20)  # scale-down delay not over
    d = decide(Observation(_pods(1), cells), memory, CONFIG, NOW)
    assert d.reason is Reason.SPARES_CANCELLED
    assert d.desired_replicas == 9 - 4
    # c3 (newest) holds the pod as packed; c8 (oldest empty) is the spare; the rest go
    assert d.victims == ("c4", "c5", "c6", "c7")
    assert d.empty_victims == d.victims  # ran no pod: kept if one runs on it by then
    assert d.memory.scale_events[-1] == (NOW, -4)
    assert d.memory.last_scale_down_at is None
    assert d.steady is None  # a scale event was recorded: no promise to skip ticks


def test_nothing_pending_cancels_every_empty_boot_above_the_floor() -> None:
    cells = tuple(_booting(i) for i in range(3))
    d = decide(Observation((), cells), PROVEN, replace(CONFIG, min_replicas=1), NOW)
    assert (d.reason, d.desired_replicas) == (Reason.SPARES_CANCELLED, 1)
    assert d.victims == ("c2", "c1")  # newest (highest index at equal age) first


@pytest.mark.parametrize(
    "config",
    [
        replace(CONFIG, scale_down_enabled=False),
        replace(CONFIG, scale_down=ScalingRules(600.0, (), "Disabled")),
        replace(CONFIG, boot_hedge_fraction=0.0),
    ],
    ids=["scale-down-off", "select-policy-disabled", "fraction-0"],
)
def test_no_spares_when_they_could_not_be_removed_or_are_off(config: PolicyConfig) -> None:
    d = decide(Observation(_pods(10), ()), PROVEN, config, NOW)
    assert d.desired_replicas == 10
    empty_boots = tuple(_booting(i) for i in range(3))
    held = decide(Observation((), empty_boots), PROVEN, config, NOW)
    assert held.desired_replicas == 3 and not held.victims


def test_no_cancellation_when_pending_pods_cannot_be_seen() -> None:
    cells = tuple(_booting(i) for i in range(3))
    unreachable = Observation(_pods(3), cells, workload_cluster_reachable=False)
    assert decide(unreachable, PROVEN, CONFIG, NOW).desired_replicas == 3
    stale = Observation((), cells, metrics=MetricsHealth(fresh=False))
    assert decide(stale, PROVEN, CONFIG, NOW).desired_replicas == 3


@pytest.mark.parametrize(("fraction", "ok"), [(0.0, True), (0.5, True), (-0.1, False), (11, False)])
def test_the_fraction_is_validated_by_name(fraction: float, ok: bool) -> None:
    errors = validate_config(replace(CONFIG, boot_hedge_fraction=fraction))
    assert (errors == ()) is ok
    assert ok or any("boot_hedge_fraction" in e for e in errors)


def test_no_spares_nor_cancellations_before_boots_are_proven() -> None:
    unproven = decide(
        Observation(_pods(10), ()), PolicyMemory(), replace(CONFIG, max_cells_in_flight=20), NOW
    )
    assert unproven.desired_replicas == 10  # a new pool's first wave: exactly the need
    failed = CellView("c9", 9, CellState.FAILED, NOW - 900)
    boots = (*(_booting(i) for i in range(3)), failed)
    kept = decide(Observation((), boots), PROVEN, CONFIG, NOW)
    assert kept.desired_replicas == 3 and not kept.victims  # a Failed cell: boots not trusted


@pytest.mark.parametrize(("min_wave", "pending", "desired"), [(1, 1, 12), (1, 2, 13), (2, 1, 11),
                                                              (2, 2, 13), (3, 2, 12)])  # fmt: skip
def test_the_smallest_wave_that_starts_spares_is_a_setting(
    min_wave: int, pending: int, desired: int
) -> None:
    config = replace(CONFIG, boot_hedge_min_wave=min_wave)
    cells = tuple(_ready(i) for i in range(10))
    d = decide(Observation(_pods(pending), cells), PROVEN, config, NOW)
    assert (d.cells_needed, d.desired_replicas) == (pending, desired)


def test_a_single_pods_spare_is_cancelled_once_the_pod_has_a_cell() -> None:
    # min wave 1: one pod started two cells; it found a Ready cell, both boots are spares now
    config = replace(CONFIG, boot_hedge_min_wave=1)
    cells = (*(_ready(i) for i in range(3)), _booting(3, age_s=90.0), _booting(4, age_s=90.0))
    d = decide(Observation((), cells), PROVEN, config, NOW)
    assert (d.reason, d.desired_replicas, d.victims) == (Reason.SPARES_CANCELLED, 3, ("c4", "c3"))
    assert d.memory.last_scale_down_at is None  # not a scale-down of cells that served


@pytest.mark.parametrize(("min_wave", "ok"), [(1, True), (3, True), (0, False), (-2, False)])
def test_the_smallest_wave_is_validated_by_name(min_wave: int, ok: bool) -> None:
    errors = validate_config(replace(CONFIG, boot_hedge_min_wave=min_wave))
    assert (errors == ()) is ok
    assert ok or any("boot_hedge_min_wave" in e for e in errors)


def _pods_waiting(n: int, waited_s: float) -> tuple[PendingPod, ...]:
    return tuple(PendingPod(f"ns/p{i}", GPUAsk(1, 24576, 100), NOW - waited_s) for i in range(n))


def test_with_a_delay_spares_start_once_a_pod_has_waited_that_share_of_a_boot() -> None:
    """Delay 0.05 of a 300 s boot: pods pending 5 s get exactly their cells, no spare; at 15 s
    the spares start; the decision promises no hold past that instant (``steady.until``)."""
    config = replace(CONFIG, boot_hedge_delay_boots=0.05)
    cells = tuple(_ready(i) for i in range(10))
    young = decide(Observation(_pods_waiting(40, 5.0), cells), PROVEN, config, NOW)
    assert young.desired_replicas == 50  # the 40 cells pods wait for, no spare yet
    booting = (*cells, *(_booting(10 + i, age_s=5.0) for i in range(40)))
    later = Observation(_pods_waiting(40, 15.0), booting)
    due = decide(later, PROVEN, config, NOW)
    assert due.desired_replicas == 70  # then ceil(0.5 x 40) spares
    waiting = Observation(_pods_waiting(40, 5.0), booting)
    held = decide(waiting, PROVEN, config, NOW)
    assert held.desired_replicas == 50
    assert held.steady is not None and held.steady.until <= NOW + 10.0  # when p0 reaches 15 s
    assert decide(later, PROVEN, CONFIG, NOW).desired_replicas == 70  # no delay: as before


@pytest.mark.parametrize(("delay", "ok"), [(0.0, True), (0.5, True), (1.0, True), (-0.1, False)])
def test_the_hedge_delay_is_validated_by_name(delay: float, ok: bool) -> None:
    errors = validate_config(replace(CONFIG, boot_hedge_delay_boots=delay))
    assert ok == (not errors) and (ok or any("boot_hedge_delay_boots" in e for e in errors))


def test_the_hedge_delay_makes_no_promise_end_before_boots_are_proven() -> None:
    config = replace(CONFIG, boot_hedge_delay_boots=0.05)
    cells = tuple(_booting(i, age_s=5.0) for i in range(4))  # no cell has been Ready yet
    observation = Observation(_pods_waiting(4, 5.0), cells)
    proven = decide(observation, PROVEN, config, NOW)
    unproven = decide(observation, PolicyMemory(), config, NOW)
    assert proven.steady is not None and proven.steady.until == NOW + 10.0  # at 15 s waited
    assert unproven.steady is None or unproven.steady.until > NOW + 10.0  # no spare to start


def test_spares_for_a_wave_already_booting_say_so() -> None:
    """Four pods wait for four booting cells (the wave was started without spares, e.g. before
    the hedge's delay was over): the spares start now, and the decision says they are hedged
    boots for pending pods, not a forecast (it read 'Prewarmed, forecast 0.00 cells')."""
    cells = (*(_ready(i) for i in range(10)), *(_booting(10 + i) for i in range(4)))
    d = decide(Observation(_pods(4), cells), PROVEN, CONFIG, NOW)
    assert (d.reason, d.desired_replicas) == (Reason.SCALED_UP, 16)
    assert "4 pending pod(s) wait for booting cells; 2 spare boot(s) hedge them" in d.message
    burst = decide(Observation(_pods(40), cells[:10]), PROVEN, CONFIG, NOW)
    assert "need 40 new cell(s); 20 spare boot(s) hedge them" in burst.message


# --- boot_hedge_per_pod: spares sized by the pods waiting too, not only the cells -----------

PER_POD = replace(CONFIG, boot_hedge_min_wave=1, boot_hedge_per_pod=True)
PER_CELL = replace(PER_POD, boot_hedge_per_pod=False)
QUARTER = GPUAsk(memory_percent=25, cores_percent=25)  # four to a one-GPU cell
SCALED_UP = Reason.SCALED_UP


def _quarters(n: int, waited_s: float = 5.0) -> tuple[PendingPod, ...]:
    return tuple(PendingPod(f"ns/q{i}", QUARTER, NOW - waited_s) for i in range(n))


def test_pods_waiting_counts_placements_on_booting_and_new_cells() -> None:
    cells = (_ready(0), _booting(1), replace(_ready(2), state=CellState.DRAINING))
    placements = (("a", "c0"), ("b", "c1"), ("c", "c1"), ("d", "new-0"), ("e", "c2"))
    assert pods_waiting(cells, placements) == 3  # b, c on the Booting c1; d on a new cell
    assert pods_waiting(cells, ()) == 0


@pytest.mark.parametrize(
    ("held", "new", "pods", "fraction", "wanted"),
    [(0, 10, 40, 0.5, 20), (0, 10, 40, 0.75, 30), (2, 0, 8, 1.0, 8), (3, 0, 3, 0.5, 2),
     (0, 10, 0, 0.5, 5), (0, 0, 0, 0.5, 0)],
)  # fmt: skip
def test_per_pod_wants_the_fraction_of_the_larger_of_cells_and_pods(
    held: int, new: int, pods: int, fraction: float, wanted: int
) -> None:
    cells = [_booting(i) for i in range(held)]
    usage = {c.name: ONE_GPU for c in cells}
    h = hedge(cells, usage, new_cells=new, fraction=fraction, min_wave=1, waiting_pods=pods)
    assert (h.waiting, h.wanted, h.missing) == (held + new, wanted, wanted)


def test_a_burst_of_quarter_gpu_pods_gets_a_spare_per_pod_with_the_per_pod_basis() -> None:
    """40 quarter-GPU pods need 10 one-GPU cells: the cell basis adds ceil(0.5 x 10) = 5
    spares, the per-pod basis ceil(0.5 x 40) = 20, so 30 boots race for the 10 cells' pods."""
    cells = tuple(_ready(i) for i in range(10))  # full
    burst = Observation(_quarters(40), cells)
    by_cell, by_pod = decide(burst, PROVEN, PER_CELL, NOW), decide(burst, PROVEN, PER_POD, NOW)
    assert (by_cell.cells_needed, by_cell.desired_replicas) == (10, 25)
    assert (by_pod.reason, by_pod.cells_needed, by_pod.desired_replicas) == (SCALED_UP, 10, 40)


def test_per_pod_changes_nothing_for_whole_gpu_pods_on_one_gpu_cells() -> None:
    cells = tuple(_ready(i) for i in range(10))
    for pending in (1, 4, 40):
        wave = Observation(_pods(pending), cells)
        assert decide(wave, PROVEN, PER_POD, NOW) == decide(wave, PROVEN, PER_CELL, NOW)


def test_per_pod_spares_are_cancelled_while_booting_as_the_pods_find_cells() -> None:
    """Four quarter-GPU pods packed on one booting cell, five empty booting spares: the pods
    keep ceil(0.5 x 4) = 2 spares (the cell basis keeps 1) and the three newest go; once they
    run on a Ready cell, every spare still booting goes."""
    boots = tuple(_booting(1 + i, age_s=100.0 - i) for i in range(6))  # c1 oldest, c6 newest
    cells = (_ready(0), *boots)
    four = Observation(_quarters(4), cells)
    d = decide(four, PROVEN, PER_POD, NOW)
    assert (d.reason, d.desired_replicas) == (Reason.SPARES_CANCELLED, 4)
    assert d.victims == ("c6", "c5", "c4")  # c1 holds the pods; c2, c3 (oldest) are kept
    by_cell = decide(four, PROVEN, PER_CELL, NOW)
    assert (by_cell.desired_replicas, by_cell.victims) == (3, ("c6", "c5", "c4", "c3"))
    quarter_gpu = (GPUUsage(6144, 25, 1),)
    running = replace(_ready(0), gpus=quarter_gpu, pods=1)
    done = decide(Observation((), (running, *boots)), PROVEN, PER_POD, NOW)
    assert (done.reason, done.desired_replicas) == (Reason.SPARES_CANCELLED, 1)
    assert d.steady is None and done.steady is None


def test_by_default_the_hedge_gives_a_lone_pod_a_spare_and_counts_pods() -> None:
    """The defaults behind ``bootHedge``: 75 spares per 100 waited for (``sparePercent``),
    waves of one cell get spares (``minWaveCells: 1``), per pod (``per: Pods``)."""
    defaults = PolicyConfig()
    assert defaults.boot_hedge_fraction == 0.75
    assert (defaults.boot_hedge_min_wave, defaults.boot_hedge_per_pod) == (1, True)
    on = replace(defaults, max_replicas=100, boot_hedge_fraction=0.75, boot_hedge_delay_boots=0.0)
    lone = decide(Observation(_pods(1), tuple(_ready(i) for i in range(10))), PROVEN, on, NOW)
    assert (lone.cells_needed, lone.desired_replicas) == (1, 12)  # its cell and one spare


def test_a_cell_a_pending_pod_waited_for_is_not_retired_before_its_pod_shows() -> None:
    """Live, the pod a booting cell was started for binds as the cell turns Ready and may show
    on it a decision later: seen Ready and empty with nothing pending, it is kept for the
    grace (``unused_ready_grace_boots``), and a pod seen on it ends the bet for good."""
    config = replace(PER_POD, boot_hedge_fraction=0.75)
    grace = unused_grace_seconds(config)
    booting = _booting(0)
    waited = decide(Observation(_pods(1), (booting,)), PROVEN, config, NOW)
    assert "c0" in waited.memory.never_used  # no pod has run on it yet
    ready = CellView("c0", 0, CellState.READY, booting.created_at, gpus=(GPUUsage(0, 0, 0),))
    ready = replace(ready, ready_at=NOW + 10)
    soon = decide(Observation((), (ready,)), waited.memory, config, NOW + 10 + grace / 2)
    assert (soon.desired_replicas, soon.victims) == (1, ())
    assert soon.steady is not None and soon.steady.until == NOW + 10 + grace  # it wakes then
    shown = replace(ready, gpus=ONE_GPU, pods=1)
    ran = decide(Observation((), (shown,)), soon.memory, config, NOW + 10 + grace / 2 + 1)
    assert "c0" not in ran.memory.never_used


def test_a_cell_whose_pod_took_a_faster_cell_retires_after_the_grace() -> None:
    """Which booting cell a pending pod was packed on is a race of seconds (two worlds, or a
    faster spare): a cell started for a pod that then ran elsewhere is a bet that lost, and
    goes once it has been Ready for the grace, not after the scale-down window."""
    config = replace(PER_POD, boot_hedge_fraction=0.75)
    grace = unused_grace_seconds(config)
    busy = CellView("c1", 1, CellState.READY, NOW - 300, gpus=ONE_GPU, pods=1, ready_at=NOW)
    waited = decide(Observation(_pods(1), (_booting(0),)), PROVEN, config, NOW - 100)
    ready = CellView("c0", 0, CellState.READY, NOW - 200, gpus=(GPUUsage(0, 0, 0),))
    ready = replace(ready, ready_at=NOW)
    early = decide(Observation((), (ready, busy)), waited.memory, config, NOW + grace - 1)
    assert early.victims == ()
    late = decide(Observation((), (ready, busy)), early.memory, config, NOW + grace)
    assert (late.reason, late.victims, late.desired_replicas) == (
        Reason.SPARES_CANCELLED,
        ("c0",),
        1,
    )
