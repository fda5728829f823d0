"""The warm spare's default rule (``autoscaler.policy.warm_spare``, session 19): the spare is
kept only while ``warm_spare_lone_arrivals`` lone arrivals in a pool that shares GPUs ended
within ``warm_spare_seconds``. Scale-ups less than a boot apart are one growth episode; it is
lone when its pending pods needed at most ``warm_spare_cells`` new cells. A burst, or a pool
of whole-GPU pods, keeps no spare."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.policy import warm_spare
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Decision, Reason
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
from autoscaler.policy_memory import decode_memory, encode_memory, memory_field

NOW = 100_000.0
GIB = 1024
# the hedge off: its spares would blur which cells the warm spare asks for
CONFIG = PolicyConfig(max_replicas=50, shape=CellShape(gpus=1), boot_hedge_fraction=0.0)
HALF = GPUAsk(1, 12 * GIB, 50)  # half a 24 GiB GPU
WHOLE = GPUAsk()  # no memory asked: the whole GPU


def _cell(i: int, *usage: GPUUsage) -> CellView:
    pods = sum(u.slots for u in usage)
    return CellView(f"c{i}", i, CellState.READY, 0.0, gpus=usage, pods=pods, ready_at=0.0)


def _shared_full(i: int) -> CellView:  # two half-GPU pods
    return _cell(i, GPUUsage(24 * GIB, 100, 2))


def _whole_full(i: int) -> CellView:  # one whole-GPU pod
    return _cell(i, GPUUsage(24 * GIB, 100, 1))


def test_the_defaults_are_one_cell_for_90_minutes_after_two_lone_arrivals() -> None:
    config = PolicyConfig()
    assert (config.warm_spare_cells, config.warm_spare_seconds) == (1, 5400.0)
    assert config.warm_spare_lone_arrivals == 2


def test_scale_ups_less_than_a_boot_apart_are_one_episode() -> None:
    boot = CONFIG.boot_seconds
    one = warm_spare.grown((), CONFIG, NOW, 1, True)
    assert one == ((NOW, NOW, 1, True),)
    # a second scale-up within a boot extends it: the most cells, shared only if both shared
    two = warm_spare.grown(one, CONFIG, NOW + boot - 1, 3, False)
    assert two == ((NOW, NOW + boot - 1, 3, False),)
    # a boot after the episode's last scale-up starts another
    three = warm_spare.grown(two, CONFIG, NOW + 2 * boot - 1, 0, True)
    assert three == (*two, (NOW + 2 * boot - 1, NOW + 2 * boot - 1, 0, True))
    # episodes that ended warm_spare_seconds ago or more are forgotten
    late = NOW + boot - 1 + CONFIG.warm_spare_seconds
    assert warm_spare.grown(three, CONFIG, late, 1, True)[0] == three[1]


def test_the_spare_holds_from_the_second_lone_shared_arrival_until_it_ages_out() -> None:
    lone_a, lone_b = (NOW - 3000.0, NOW - 3000.0, 1, True), (NOW - 600.0, NOW - 590.0, 0, True)
    memory = PolicyMemory(last_scale_up_at=NOW - 590.0, growth_episodes=(lone_a,))
    assert warm_spare.warm_until(memory, CONFIG) is None  # one arrival is not yet a trickle
    assert warm_spare.headroom_cells(memory, CONFIG, NOW) == 0
    memory = replace(memory, growth_episodes=(lone_a, lone_b))
    until = NOW - 3000.0 + CONFIG.warm_spare_seconds  # the older of the two ages out
    assert warm_spare.warm_until(memory, CONFIG) == until
    assert warm_spare.headroom_cells(memory, CONFIG, until - 1) == 1
    assert warm_spare.headroom_cells(memory, CONFIG, until) == 0


def test_bursts_and_whole_gpu_arrivals_do_not_count() -> None:
    burst = (NOW - 900.0, NOW - 800.0, 2, True)  # needed 2 new cells: more than the spare
    whole = (NOW - 400.0, NOW - 400.0, 1, False)  # the pool shared no GPU
    lone = (NOW - 60.0, NOW - 60.0, 1, True)
    memory = PolicyMemory(last_scale_up_at=NOW - 60.0, growth_episodes=(burst, whole, lone))
    assert warm_spare.warm_until(memory, CONFIG) is None
    # with two spare cells the burst would have been absorbed: it counts
    assert warm_spare.warm_until(memory, replace(CONFIG, warm_spare_cells=2)) is not None


def test_pool_shares_reads_pending_asks_and_the_cells_gpus() -> None:
    shape = CONFIG.shape
    whole_pod = PendingPod("ns/w", WHOLE, NOW)
    half_pod = PendingPod("ns/h", HALF, NOW)
    assert not warm_spare.pool_shares((_whole_full(0),), (whole_pod,), shape)
    assert warm_spare.pool_shares((_whole_full(0),), (half_pod,), shape)
    assert warm_spare.pool_shares((_shared_full(0),), (whole_pod,), shape)
    one_half = _cell(0, GPUUsage(12 * GIB, 50, 1))  # one fractional pod leaves room
    assert warm_spare.pool_shares((one_half,), (), shape)
    two_gpus = PendingPod("ns/2", GPUAsk(2, 12 * GIB, 50), NOW)  # 2 GPUs: not a share
    assert not warm_spare.pool_shares((), (two_gpus,), shape)
    booting = CellView("c1", 1, CellState.BOOTING, 0.0, gpus=(GPUUsage(12 * GIB, 50, 1),))
    assert not warm_spare.pool_shares((booting,), (), shape)  # only Ready and Draining count


def _arrive(memory: PolicyMemory, cells: tuple[CellView, ...], ask: GPUAsk, at: float) -> Decision:
    pod = PendingPod(f"ns/p{at:g}", ask, at - 5.0)
    return decide(Observation((pod,), cells), memory, CONFIG, at)


def test_two_lone_fractional_arrivals_start_a_spare_whole_gpu_ones_do_not() -> None:
    """A full pool, a lone pod 20 minutes apart, twice, each pod taking a new cell: once both
    have landed, a pool that shares GPUs keeps a spare (Headroom); with whole-GPU pods it
    keeps none."""
    start = PolicyMemory(boots_proven=True)
    for full, ask, spare in ((_shared_full, HALF, 1), (_whole_full, WHOLE, 0)):
        cells: tuple[CellView, ...] = (full(0),)
        first = _arrive(start, cells, ask, NOW)
        assert (first.reason, first.desired_replicas) == (Reason.SCALED_UP, 2)
        cells = (full(0), full(1))  # the first pod's cell is Ready and taken
        second = _arrive(first.memory, cells, ask, NOW + 1200.0)
        assert second.reason is Reason.SCALED_UP
        assert second.desired_replicas == 3
        settled = Observation((), (*cells, full(2)))
        after = decide(settled, second.memory, CONFIG, NOW + 1500.0)
        assert after.desired_replicas == 3 + spare, after.message
        if spare:
            assert after.reason is Reason.HEADROOM
            assert "2+ lone arrivals in a pool sharing GPUs" in after.message


def test_a_burst_keeps_no_spare() -> None:
    """Two bursts of fractional pods, each needing three new cells: no spare after them."""
    cells = (_shared_full(0),)
    memory = PolicyMemory(boots_proven=True)
    for at in (NOW, NOW + 1200.0):
        pods = tuple(PendingPod(f"ns/b{at:g}-{i}", HALF, at - 5.0) for i in range(6))
        memory = decide(Observation(pods, cells), memory, CONFIG, at).memory
    assert [e[2] for e in memory.growth_episodes] == [3, 3]
    assert warm_spare.warm_until(memory, CONFIG) is None


def test_episodes_survive_a_restart_and_go_first_when_memory_is_too_long() -> None:
    episodes = ((NOW - 600.0, NOW - 500.0, 1, True), (NOW - 60.0, NOW - 60.0, 3, False))
    memory = PolicyMemory(last_scale_up_at=NOW - 60.0, growth_episodes=episodes)
    assert decode_memory(encode_memory(memory)).growth_episodes == episodes
    assert '"ge"' not in encode_memory(PolicyMemory())  # nothing written without episodes
    slim = decode_memory(memory_field(memory, limit=len(encode_memory(memory)) - 1))
    assert slim.growth_episodes == () and slim.last_scale_up_at == NOW - 60.0
