"""The world's placement memos change no result: the same runs with and without them.

Why this file exists: the engine keeps Ready cells in HAMi's node order by moving only the
cells an event changed (``engine.node_order``), remembers ``find_cell``'s answer per ask and
each cell's GPU choice per ask until a cell changes, and keeps the cells' views and the Ready
cells' utilisation sum between changes (issue 14, simulator speed). Here every policy replays
the same traces in that world and in one that finds cells by a plain scan and sums utilisation
afresh (the rules before those memos): whole ``SimResult`` values and decide calls must agree.
The peers' numbers are also pinned to what they were before the speed work (the commit named),
so a faster path that changed a result fails here, not in a benchmark.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape, CellState, GPUAsk
from simulations.simulator.cli import POLICIES
from simulations.simulator.engine import BootModel, SimConfig
from simulations.simulator.engine.sim import Simulation
from simulations.simulator.engine.world import SimCell, World
from simulations.simulator.traces import TracePod, synthetic
from tests.bench.pool_trace import large_pool_month
from tests.unit.test_sim_speed_identity import _brute_find


class PlainWorld(World):
    """``World`` answering placement by a full scan and summing utilisation every time."""

    finds = 0

    def find_cell(self, ask: GPUAsk) -> tuple[SimCell, tuple[int, ...]] | None:
        PlainWorld.finds += 1
        return _brute_find(self, ask)

    def utilisation_sum(self) -> tuple[float, int]:
        ready = [c for c in self.cells.values() if c.state is CellState.READY]
        return sum(c.utilisation(self.shape) for c in ready), len(ready)


def _synthetic() -> tuple[list[TracePod], SimConfig]:
    shape = CellShape(gpus=4)
    boot = BootModel(failure_probability=0.05)
    config = SimConfig(policy_config=PolicyConfig(max_replicas=1000, shape=shape), boot=boot)
    return list(synthetic(500, days=1.5, seed=5)), config


def _large_pool() -> tuple[list[TracePod], SimConfig]:
    shape = CellShape(gpus=8)
    config = SimConfig(
        policy_config=PolicyConfig(max_replicas=1000, shape=shape),
        node_policy="spread",
        gpu_policy="binpack",
    )
    return large_pool_month(pods=250, days=2.0, seed=3), config


TRACES = {"synthetic-4gpu": _synthetic, "pool-8gpu": _large_pool}


def _run(pods: Sequence[TracePod], name: str, config: SimConfig, plain: bool) -> object:
    run = Simulation(pods, POLICIES[name](), config)
    if plain:
        run.world = PlainWorld(run.shape, config.node_policy, config.gpu_policy)
    return run.run(), run.decide_calls


@pytest.mark.parametrize("trace", sorted(TRACES))
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_memoised_world_gives_what_the_plain_scan_gives(trace: str, name: str) -> None:
    pods, config = TRACES[trace]()
    PlainWorld.finds = 0
    plain = _run(pods, name, config, plain=True)
    assert PlainWorld.finds > len(pods) / 2  # the plain world really placed the pods
    assert _run(pods, name, config, plain=False) == plain


# (events, decisions, decide calls, cells up, cells down, evictions, cell-hours, sum of waits s)
# of each peer on the traces above, as the engine and peers gave them at d22716b, before the
# node order, the per-ask answers and CA's shortcut for a tick with nothing pending
# fmt: off
BEFORE = {
    ("pool-8gpu", "cluster-autoscaler"):
        (104922, 103433, 1090, 95, 95, 0, 11032.891980792472, 33785.14869676647),
    ("pool-8gpu", "hpa-keda"):
        (70471, 68955, 1770, 109, 109, 0, 14009.268123141439, 108557.01953229704),
    ("pool-8gpu", "original-gpucellpool"):
        (35935, 34478, 957, 79, 78, 0, 11383.24478209229, 1045245.9482911625),
    ("synthetic-4gpu", "cluster-autoscaler"):
        (21482, 19636, 1110, 24, 23, 0, 174.31887164194453, 7614.786813245386),
    ("synthetic-4gpu", "hpa-keda"):
        (14972, 13091, 2538, 42, 41, 0, 188.28480189679604, 5454.220717479583),
    ("synthetic-4gpu", "original-gpucellpool"):
        (8384, 6546, 1026, 20, 18, 0, 161.11683464931252, 12804.220880413255),
}
# fmt: on


@pytest.mark.parametrize(("trace", "name"), sorted(BEFORE))
def test_peers_give_what_they_gave_before_the_speed_work(trace: str, name: str) -> None:
    pods, config = TRACES[trace]()
    run = Simulation(pods, POLICIES[name](), config)
    r = run.run()
    got = (r.events, r.decisions, run.decide_calls, r.scale_up_cells, r.scale_down_cells)
    assert (*got, r.evictions, r.cost_cell_hours, sum(r.waits_seconds)) == BEFORE[(trace, name)]
