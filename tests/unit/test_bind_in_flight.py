"""A pending pod HAMi has already placed (bind in flight) is no demand for its grace.

What this proves (``autoscaler.policy.bind_in_flight``): an unbound pod with HAMi's
``vgpu-node`` and ``bind-phase: allocating`` whose ``bind-time`` is within the grace of now is
left out of a pool's pending pods, so a decision taken between HAMi's filter and the Binding
does not start a cell for a pod whose own allocation already fills the cell it is going to
(it did on the twin under load: a boot and a spare, cancelled 0.8 s later). A stale or
malformed annotation, or a pod without them, is judged as before: a pod never waits on one for
longer than the grace.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.observe import cell_nodes
from autoscaler.policy.bind_in_flight import BIND_GRACE_SECONDS, bind_in_flight
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.pool_demand import pending_for_pool
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUUsage,
    Observation,
    PolicyMemory,
)
from gpucellpool.api.pool import GPUCellPool
from tests.unit.test_loop_fakes import pending_pod, pool_manifest

JSON = dict[str, Any]
NOW = 1_800_000_000.0  # Unix seconds, as the operator's clock and HAMi's bind-time read
POOL = GPUCellPool.model_validate(pool_manifest("p"))


def placed(name: str, bind_time: object = int(NOW), phase: str = "allocating") -> JSON:
    """A pod HAMi's filter sent to cell c0 and whose bind started at ``bind_time``."""
    pod = pending_pod(name)
    pod["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "c0",
        "hami.io/bind-phase": phase,
        "hami.io/bind-time": str(bind_time),
    }
    return pod


def test_a_pod_whose_bind_started_just_now_is_in_flight() -> None:
    assert bind_in_flight(placed("a"), NOW + 0.4)
    assert bind_in_flight(placed("a"), NOW - 0.5)  # HAMi's clock a little ahead of ours
    assert bind_in_flight(placed("a"), NOW + BIND_GRACE_SECONDS)


@pytest.mark.parametrize(
    "pod",
    [
        pending_pod("plain"),  # HAMi's filter found no node: no annotations
        placed("stale", int(NOW - BIND_GRACE_SECONDS - 1)),  # a bind that never landed
        placed("future", int(NOW + 10 * BIND_GRACE_SECONDS)),
        placed("done", phase="success"),
        placed("failed", phase="failed"),
        placed("garbled", "soon"),
        placed("nan", "nan"),
    ],
    ids=lambda p: p["metadata"]["name"],
)
def test_anything_else_is_judged_as_before(pod: JSON) -> None:
    assert not bind_in_flight(pod, NOW)


def test_a_bound_pod_or_one_without_a_node_is_not_in_flight() -> None:
    bound = placed("b")
    bound["spec"]["nodeName"] = "c0"
    assert not bind_in_flight(bound, NOW)
    nowhere = placed("n")
    del nowhere["metadata"]["annotations"]["hami.io/vgpu-node"]
    assert not bind_in_flight(nowhere, NOW)


def test_a_pod_placed_on_a_node_gone_or_not_the_pools_is_not_in_flight() -> None:
    """A bind fails most often because its Node went (a cancelled boot drained as it turned
    Ready); the pod, placed again on nothing, must count at once, not after the grace."""
    assert bind_in_flight(placed("a"), NOW, frozenset({"c0", "c1"}))
    assert not bind_in_flight(placed("a"), NOW, frozenset({"c1"}))
    assert not bind_in_flight(placed("a"), NOW, frozenset())


def test_the_pools_cell_nodes_are_those_of_its_rows_that_exist() -> None:
    rows = [
        {"name": "c0", "index": 0, "phase": "Ready", "nodeName": "node-c0"},
        {"name": "c1", "index": 1, "phase": "Booting"},
        {"name": "c2", "index": 2, "phase": "Ready", "nodeName": "node-c2"},
    ]
    manifest = pool_manifest("p")
    manifest["status"] = {"cells": rows}
    pool = GPUCellPool.model_validate(manifest)
    assert cell_nodes(pool, {"node-c0", "c1", "elsewhere"}) == {"node-c0", "c1"}


def _pending(
    pods: list[JSON], now: float | None, on: frozenset[str] | None = None
) -> tuple[str, ...]:
    seen = {p["metadata"]["uid"]: NOW - 5.0 for p in pods}
    pending, bad = pending_for_pool(POOL, pods, {}, seen, now=now, cell_nodes=on)
    assert bad == ()
    return tuple(p.key for p in pending)


def test_pool_demand_leaves_out_pods_being_bound_only_while_the_grace_lasts() -> None:
    pods = [placed("going"), pending_pod("waiting"), placed("stuck", int(NOW - 100))]
    assert _pending(pods, NOW) == ("default/stuck", "default/waiting")
    assert _pending(pods, None) == ("default/going", "default/stuck", "default/waiting")
    assert _pending(pods, NOW + BIND_GRACE_SECONDS + 1) == _pending(pods, None)
    assert _pending(pods, NOW, frozenset({"c0"})) == _pending(pods, NOW)
    assert _pending(pods, NOW, frozenset({"c9"})) == _pending(pods, None)  # c0 is gone


def test_no_cell_is_started_for_a_pod_already_placed() -> None:
    """c0 is full with the pod's own allocation (HAMi's metrics count it from the filter on);
    before the change the pod also counted as pending and a cell was started for it."""
    config = PolicyConfig(max_replicas=10, shape=CellShape(gpus=1))
    full = (GPUUsage(24 * 1024, 100, 1),)
    cells = (CellView("c0", 0, CellState.READY, 0.0, gpus=full, pods=0, ready_at=0.0),)
    seen = {"uid-default-going": NOW - 5.0}
    for now, expected in ((NOW, False), (None, True)):
        pending, _ = pending_for_pool(POOL, [placed("going")], {}, seen, now=now)
        decision = decide(Observation(pending, cells), PolicyMemory(), config, NOW)
        assert (decision.reason is Reason.SCALED_UP) is expected, decision.message
