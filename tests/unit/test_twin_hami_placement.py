"""The twin's HAMi placement: same choices as the simulator, HAMi's per-node reasons."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from autoscaler.policy.types import (
    CellShape,
    CellState,
    GPUAsk,
    GPUUsage,
    PlacementConstraints,
    Taint,
    Toleration,
)
from simulations.simulator.engine import hami as engine
from simulations.simulator.engine.world import World
from simulations.simulator.traces import TracePod
from simulations.twin.hami_cache import PodAsks, book, plan_for, pod_asks, rebuild
from simulations.twin.hami_codec import Device
from simulations.twin.hami_placement import (
    CORDONED,
    NOT_READY,
    SELECTOR_MISMATCH,
    NodeState,
    Placement,
    fits_some_empty_node,
    node_state,
    place,
)

NONE = PlacementConstraints()


def node(name: str, gpus: int = 1, memory: int = 24576, **kwargs: Any) -> NodeState:
    devices = tuple(Device(f"{name}-g{i}", i, 10, memory, 100, "T", True) for i in range(gpus))
    return NodeState(name, devices, **kwargs)


def manifest(
    name: str,
    ready: str = "True",
    allocatable: str = "10",
    health: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    register = [{"id": "GPU-0", "count": 10, "devmem": 8192, "devcore": 100, "health": health}]
    return {
        "metadata": {
            "name": name,
            "labels": {"zone": "a"},
            "annotations": {"hami.io/node-nvidia-register": json.dumps(register)},
        },
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "allocatable": {"nvidia.com/gpu": allocatable},
        },
    }


def test_node_state_reads_the_node_agents_node() -> None:
    fresh = manifest("n", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    state = node_state(fresh)
    assert state.blocked is None and state.taints == ()  # Ready: the lifecycle taint is moot
    assert state.shape == CellShape(1, 8192, 100, 10)
    assert node_state(manifest("n", ready="False")).blocked == NOT_READY
    assert node_state(manifest("n", unschedulable=True)).blocked == CORDONED
    assert node_state(manifest("n", allocatable="0")).blocked == "node unregistered"
    assert node_state(manifest("n", health=False)).blocked == "node unregistered"
    tainted = manifest("n", taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}])
    assert node_state(tainted).taints == (Taint("dedicated", "ml", "NoSchedule"),)


def test_binpack_takes_the_fuller_node_spread_the_emptier() -> None:
    nodes = [node("c-0"), node("c-1")]
    nodes[1].usage = [GPUUsage(4096, 10, 1)]
    ask = [GPUAsk(1, 2048, None, 10)]
    assert place(ask, NONE, nodes, engine.BINPACK) == Placement("c-1", ((0,),))
    assert place(ask, NONE, nodes, engine.SPREAD) == Placement("c-0", ((0,),))


def test_reasons_per_node() -> None:
    full = node("full")
    full.usage = [GPUUsage(24576, 100, 1)]
    two = node("two", gpus=2)
    two.usage = [GPUUsage(24576, 0, 1), GPUUsage()]
    nodes = [
        full,
        two,
        node("one"),
        node("off", blocked=CORDONED),
        node("tainted", taints=(Taint("dedicated", "ml"),)),
        node("other", labels={"zone": "b"}),
    ]
    result = place([GPUAsk(2, 1024)], NONE, nodes)
    assert result == [
        "NodeInsufficientDevice",
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
        "NodeInsufficientDevice",
        CORDONED,
        "node(s) had untolerated taint {dedicated: ml}",
        "NodeInsufficientDevice",
    ]
    one = place([GPUAsk(1, 1024)], PlacementConstraints(node_selector={"zone": "a"}), nodes)
    assert isinstance(one, list) and one[0] == SELECTOR_MISMATCH
    tolerated = PlacementConstraints(tolerations=(Toleration("dedicated", "Exists"),))
    assert place([GPUAsk(1, 1024, None, 0)], tolerated, nodes[4:5]) == Placement("tainted", ((0,),))


def test_containers_are_placed_one_after_another_on_one_node() -> None:
    nodes = [node("c-0", gpus=2, memory=8192)]
    asks = [GPUAsk(1, 6000), None, GPUAsk(2, 2000)]
    result = place(asks, NONE, nodes)
    assert isinstance(result, Placement)
    assert result.gpus[1] == () and sorted(result.gpus[2]) == [0, 1]
    assert isinstance(place([GPUAsk(2, 6000), GPUAsk(2, 6000)], NONE, nodes), list)


def test_fits_some_empty_node() -> None:
    nodes = [node("c-0", memory=8192)]
    assert fits_some_empty_node([GPUAsk(1, 8192)], nodes)
    assert not fits_some_empty_node([GPUAsk(1, 9000)], nodes)
    assert not fits_some_empty_node([GPUAsk(2, 10)], nodes)
    assert fits_some_empty_node([GPUAsk(1, 9000)], [node("x", blocked="node unregistered", gpus=0)])


def test_pod_asks_reads_containers_in_hami_order() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "containers": [
                {"name": "cpu"},
                {"name": "g", "resources": {"limits": {"nvidia.com/gpumem-percentage": "50"}}},
            ],
            "nodeSelector": {"zone": "a"},
        }
    }
    parsed = pod_asks(pod)
    assert isinstance(parsed, PodAsks)
    assert parsed.names == ("i", "cpu", "g")
    # Read as the scheduler reads a stored pod: no webhook, so "g" (no nvidia.com/gpu) asks none.
    assert parsed.asks == (GPUAsk(1, None, None, 0), None, None)
    assert parsed.constraints.node_selector == {"zone": "a"}


def test_rebuild_counts_bound_pods_and_pending_binds_but_not_terminal_pods() -> None:
    nodes = [manifest("n-0")]
    plan = "GPU-0,NVIDIA,1000,10:;"

    def pod(name: str, node: str | None, phase: str = "Running") -> dict[str, Any]:
        meta = {
            "name": name,
            "namespace": "ns",
            "annotations": {"hami.io/vgpu-node": "n-0", "hami.io/vgpu-devices-allocated": plan},
        }
        return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": {"phase": phase}}  # fmt: skip

    pods = [pod("bound", "n-0"), pod("binding", None, "Pending"), pod("done", "n-0", "Succeeded")]
    state = rebuild(nodes, pods)["n-0"]
    assert state.usage == [GPUUsage(2000, 20, 2)]
    assert [c.pod for c in state.containers] == ["bound", "binding"]
    assert state.containers[0].container == "c" and state.containers[0].vdevice_index == 0


@pytest.mark.parametrize("seed", range(5))
def test_the_twin_places_exactly_where_the_simulator_does(seed: int) -> None:
    rng = random.Random(seed)
    shape = CellShape(gpus=rng.choice([1, 2, 4]), memory_mib=24576, cores_percent=100, slots=10)
    policy = rng.choice([engine.BINPACK, engine.SPREAD])
    world = World(shape, policy, engine.SPREAD)
    cells = [world.add_cell(0.0, CellState.READY) for _ in range(rng.randint(1, 5))]
    nodes = [
        NodeState(c.name, tuple(Device(f"{c.name}-{i}", i, 10, 24576, 100, "T", True)
                                for i in range(shape.gpus)))
        for c in cells
    ]  # fmt: skip
    by_name = {n.name: n for n in nodes}
    for n in range(60):
        ask = GPUAsk(
            rng.randint(1, shape.gpus),
            rng.choice([None, 2048, 4096, 8192, 12288]),
            None,
            rng.choice([0, 10, 30, 50, 100]),
        )
        expected = world.find_cell(ask)
        got = place([ask], NONE, nodes, policy, engine.SPREAD)
        if expected is None:
            assert isinstance(got, list)
            continue
        cell, gpus = expected
        assert got == Placement(cell.name, (gpus,))
        pod = TracePod(f"p{n}", 0.0, 3600.0, ask)
        world.enqueue(pod, 0.0, 3600.0)  # book as the simulator does, so its memos follow
        world.bind(world.pending[pod.key], cell, gpus, 0.0, token=n)
        engine.allocate(by_name[cell.name].usage, shape, ask, gpus)


def test_book_ignores_devices_the_node_does_not_have() -> None:
    state = node("n", gpus=1)
    book(state, {"metadata": {"name": "p"}, "spec": {}}, "GPU-x,NVIDIA,5,5:;n-g0,NVIDIA,7,3:;")
    assert state.usage == [GPUUsage(7, 3, 1)]
    assert state.containers[0].container_index == 1


def test_plan_resolves_a_memory_percentage_on_the_chosen_device() -> None:
    state = node("n", gpus=2, memory=24576)
    asks = [GPUAsk(1, None, 50, 10), None, GPUAsk(2, 1000, None, 150)]
    placement = Placement("n", ((1,), (), (0, 1)))
    assert plan_for(placement, state, asks) == (
        "n-g1,NVIDIA,12288,10:;;n-g0,NVIDIA,1000,100:n-g1,NVIDIA,1000,100:;"
    )
