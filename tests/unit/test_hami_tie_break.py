"""HAMi's tie between nodes of equal score, in the twin and the simulator: the oldest pod wins.

Why this file exists: real HAMi breaks ties arbitrarily, and both worlds used to break them by
the node's name / the cell's index. Which cell holds which name depends on the sub-second
order a wave's Nodes became placeable in, so a later pod could join one pod in the twin and
another in the simulator, and the worlds diverged when the first of those pods ended (a loaded
fidelity run at 84 % within one cell). The tie-break is now the cells' oldest pod (the trace's
arrival order, which both worlds replay), then the name / index as before, for empty cells.
"""

from __future__ import annotations

import pytest

from autoscaler.policy.types import CellShape, CellState, GPUAsk, PlacementConstraints
from simulations.simulator.engine import hami as engine
from simulations.simulator.engine.world import SimCell, World
from simulations.simulator.traces import TracePod
from simulations.twin.hami_cache import book
from simulations.twin.hami_codec import Device
from simulations.twin.hami_placement import NodeState, Placement, place

NONE = PlacementConstraints()
POLICIES = [engine.BINPACK, engine.SPREAD]
BIG = GPUAsk(1, 4096, None, 81)  # 81 % of a GPU's cores: two of them never share a GPU
MID = GPUAsk(1, 2048, None, 30)
SMALL = GPUAsk(1, 1024, None, 16)


def _node(name: str) -> NodeState:
    return NodeState(name, (Device(f"{name}-g0", 0, 10, 24576, 100, "T", True),))


def _pod(name: str, created: str = "2025-01-01T00:00:00Z") -> dict[str, object]:
    meta = {"name": name, "namespace": "twin", "creationTimestamp": created}
    return {"metadata": meta, "spec": {"containers": [{"name": "main"}]}}


def _book(node: NodeState, pod: dict[str, object]) -> None:
    book(node, pod, f"{node.name}-g0,NVIDIA,4096,81:;")


@pytest.mark.parametrize("policy", POLICIES)
def test_twin_tie_goes_to_the_node_with_the_older_pod(policy: str) -> None:
    nodes = [_node("demo-4"), _node("demo-6")]  # demo-4 sorts first
    _book(nodes[0], _pod("trace-00011"))
    _book(nodes[1], _pod("trace-00010"))  # the same second: the name orders them
    assert nodes[0].usage == nodes[1].usage
    assert place([SMALL], NONE, nodes, policy) == Placement("demo-6", ((0,),))


@pytest.mark.parametrize("policy", POLICIES)
def test_twin_tie_reads_the_creation_time_before_the_name(policy: str) -> None:
    nodes = [_node("demo-4"), _node("demo-6")]
    _book(nodes[0], _pod("trace-00001", "2025-01-01T00:00:02Z"))
    _book(nodes[1], _pod("trace-00002", "2025-01-01T00:00:01Z"))
    assert place([SMALL], NONE, nodes, policy) == Placement("demo-6", ((0,),))


@pytest.mark.parametrize("policy", POLICIES)
def test_twin_tie_between_empty_nodes_goes_to_the_first_name(policy: str) -> None:
    nodes = [_node("demo-10"), _node("demo-2")]
    assert place([SMALL], NONE, nodes, policy) == Placement("demo-2", ((0,),))


def _world(policy: str, cells: int = 2) -> tuple[World, list[SimCell]]:
    world = World(CellShape(gpus=1), policy, engine.SPREAD)
    return world, [world.add_cell(0.0, CellState.READY) for _ in range(cells)]


def _bind(world: World, cell: SimCell, pod: TracePod) -> None:
    world.enqueue(pod, pod.arrival_seconds, pod.duration_seconds)
    world.bind(world.pending[pod.key], cell, (0,), pod.arrival_seconds, token=0)


@pytest.mark.parametrize("policy", POLICIES)
def test_simulator_tie_goes_to_the_cell_with_the_older_pod(policy: str) -> None:
    world, (low, high) = _world(policy)
    _bind(world, low, TracePod("trace-00011", 10.0, 600.0, BIG))
    _bind(world, high, TracePod("trace-00010", 10.0, 600.0, BIG))  # same arrival: the key
    assert low.score(world.shape) == high.score(world.shape)
    found = world.find_cell(SMALL)
    assert found is not None and found[0] is high


@pytest.mark.parametrize("policy", POLICIES)
def test_simulator_tie_follows_the_pods_as_they_end(policy: str) -> None:
    world, (low, high) = _world(policy)
    for cell, key, arrival in [(low, "a", 10.0), (high, "b", 20.0), (high, "c", 30.0)]:
        _bind(world, cell, TracePod(key, arrival, 600.0, MID))
    _bind(world, low, TracePod("d", 40.0, 600.0, MID))
    found = world.find_cell(SMALL)
    assert found is not None and found[0] is low  # "a" is the oldest
    world.unbind(low.pods["a"])
    world.unbind(high.pods["b"])
    found = world.find_cell(SMALL)
    assert found is not None and found[0] is high  # "c" is now older than "d"


@pytest.mark.parametrize("policy", POLICIES)
def test_simulator_tie_between_empty_cells_goes_to_the_lowest_index(policy: str) -> None:
    world, cells = _world(policy, cells=3)
    found = world.find_cell(SMALL)
    assert found is not None and found[0] is cells[0]
