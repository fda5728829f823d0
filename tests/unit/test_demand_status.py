"""``status.demand``, ``demandFreeSince`` and ``CellShapeKnown`` as the autoscaler publishes them.

What these prove: ``demandFreeSince`` is set the first pass with no pending pod, kept while that
lasts, cleared when demand reappears and untouched by a failed read; the apply body carries
``demand`` (all counted pods, and those one fresh cell could host) only from a successful read,
re-applying the stored one otherwise; the loop publishes the shape it packed with in
``CellShapeKnown`` and decides with a remembered shape when no cell is Ready (two 6000 MiB pods
need two 8192 MiB GPUs where HAMi's default 24576 MiB would take both on one); a brand-new pool
with no shape anywhere holds at zero with reason ``CellShapeUnknown``.
"""

from __future__ import annotations

from typing import Any

from autoscaler.explain import (
    demand_free_since,
    outcome,
    parse_rfc3339,
    rfc3339,
    status_apply_body,
    with_cell_shape,
    with_demand,
)
from autoscaler.policy.decision import Decision, Reason, Unschedulable
from autoscaler.policy.types import PolicyMemory
from gpucellpool.api.pool import GPUCellPool
from tests.unit import test_loop
from tests.unit.test_loop_fakes import FakeWriter, pending_pod, pool_manifest

JSON = dict[str, Any]
NOW = 1_800_000_000.0
T4 = {"model": "Tesla-T4", "memoryMiB": 8192, "corePercent": 100}


def test_demand_free_since_transitions() -> None:
    assert demand_free_since(None, True, 0, NOW) == NOW  # first pass with no demand: set
    assert demand_free_since(NOW, True, 0, NOW + 60) == NOW  # still none: kept
    assert demand_free_since(NOW, True, 1, NOW + 60) is None  # demand reappeared: cleared
    assert demand_free_since(None, True, 3, NOW) is None
    assert demand_free_since(NOW, False, 0, NOW + 60) == NOW  # failed read: unchanged
    assert demand_free_since(None, False, 0, NOW + 60) is None


def test_rfc3339_round_trip_and_bad_values() -> None:
    assert parse_rfc3339(rfc3339(NOW)) == NOW
    for bad in (None, "", "yesterday", 12, "2026-13-01T00:00:00Z"):
        assert parse_rfc3339(bad) is None


def decision(pending: int, unfit: int) -> Decision:
    unschedulable = tuple(Unschedulable(f"ns/u{i}", "TooManyGPUs", "") for i in range(unfit))
    return Decision(
        1, Reason.IDLE, "m", PolicyMemory(), pending_asks=pending, unschedulable=unschedulable
    )


def body(d: Decision, read: bool, raw: JSON, previous: float | None = None) -> JSON:
    pool = GPUCellPool.model_validate(pool_manifest("p"))
    out = with_demand(outcome(d, read), d, read, previous, NOW)
    out = with_cell_shape(out, "Remembered", "8192 MiB: remembered")
    status: JSON = status_apply_body(pool, out, raw, NOW)["status"]
    return status


def test_demand_counts_every_pod_and_those_one_cell_could_host() -> None:
    status = body(decision(pending=3, unfit=2), True, {}, previous=NOW - 600)
    assert status["demand"] == {
        "pendingRequests": 5,
        "satisfiableByOneCell": 3,
        "lastObserved": rfc3339(NOW),
    }
    assert "demandFreeSince" not in status  # left out of the apply: removed (cleared)


def test_an_unschedulable_pod_alone_is_demand_too() -> None:
    # the original's meaning: "0 pending and 0 satisfiable" sets demandFreeSince
    status = body(decision(pending=0, unfit=1), True, {})
    assert status["demand"]["pendingRequests"] == 1 and "demandFreeSince" not in status


def test_no_demand_sets_then_keeps_demand_free_since() -> None:
    status = body(decision(0, 0), True, {})
    assert status["demandFreeSince"] == rfc3339(NOW)
    kept = body(decision(0, 0), True, {}, previous=NOW - 3600)
    assert kept["demandFreeSince"] == rfc3339(NOW - 3600)


def test_failed_read_reapplies_stored_demand_and_keeps_demand_free_since() -> None:
    stored = {"pendingRequests": 4, "satisfiableByOneCell": 4, "lastObserved": "x"}
    status = body(decision(0, 0), False, {"demand": stored}, previous=NOW - 60)
    assert status["demand"] == stored
    assert status["demandFreeSince"] == rfc3339(NOW - 60)
    assert "demand" not in body(decision(0, 0), False, {})


def test_shape_condition_is_published_with_scaling_active() -> None:
    conds = {c["type"]: c for c in body(decision(0, 0), True, {})["conditions"]}
    assert conds["CellShapeKnown"]["status"] == "True"
    assert conds["CellShapeKnown"]["reason"] == "Remembered"
    assert "ScalingActive" in conds


world = test_loop.world  # the loop's fixture: an Autoscaler on fakes and a virtual clock


def shape_condition(writer: FakeWriter, name: str) -> JSON:
    conds = writer.for_pool(name)[-1]["status"]["conditions"]
    return next(c for c in conds if c["type"] == "CellShapeKnown")


async def test_loop_decides_with_the_remembered_shape_at_zero_cells(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    manifest = pool_manifest("a", cellShape=None)
    manifest["status"] = {"cellDeviceShape": T4}  # learned earlier; the pool is at 0 cells
    workload.pods = {f"p{i}": pending_pod(f"p{i}", mem_mib=6000) for i in range(2)}
    scaler.pool_event("ADDED", manifest)
    await clock.advance(0.2)
    status = writer.for_pool("a")[-1]["status"]
    last = status["lastDecision"]
    assert (last["reason"], last["cellsNeeded"], last["desiredReplicas"]) == ("ScaledUp", 2, 2)
    cond = shape_condition(writer, "a")
    assert (cond["status"], cond["reason"]) == ("True", "Remembered")
    assert status["demand"]["pendingRequests"] == 2 and "demandFreeSince" not in status


async def test_loop_brand_new_pool_without_a_shape_holds_at_zero(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    workload.pods = {"p0": pending_pod("p0", mem_mib=6000)}
    scaler.pool_event("ADDED", pool_manifest("a", cellShape=None))
    await clock.advance(0.2)
    last = writer.for_pool("a")[-1]["status"]["lastDecision"]
    assert (last["reason"], last["desiredReplicas"]) == ("CellShapeUnknown", 0)
    cond = shape_condition(writer, "a")
    assert (cond["status"], cond["reason"]) == ("False", "CellShapeUnknown")


async def test_loop_sets_and_clears_demand_free_since(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    first = writer.for_pool("a")[-1]["status"]
    assert first["demandFreeSince"] == rfc3339(clock.now() - 0.2 + 0.15)  # the decision's time
    since = first["demandFreeSince"]
    await clock.advance(10.0)  # a tick later, still no demand: the same time
    assert writer.for_pool("a")[-1]["status"].get("demandFreeSince", since) == since
    workload.pods["p0"] = pending_pod("p0")
    scaler.cluster_event("wl")
    await clock.advance(0.5)
    status = writer.for_pool("a")[-1]["status"]
    assert "demandFreeSince" not in status and status["demand"]["pendingRequests"] == 1
    cond = shape_condition(writer, "a")
    assert (cond["status"], cond["reason"]) == ("True", "Declared")


async def test_loop_uses_a_shape_learned_meanwhile_at_once(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    workload.pods = {"p0": pending_pod("p0", mem_mib=6000)}
    manifest = pool_manifest("a", cellShape=None)
    scaler.pool_event("ADDED", manifest)
    await clock.advance(0.2)
    assert writer.for_pool("a")[-1]["status"]["lastDecision"]["reason"] == "CellShapeUnknown"
    decisions = scaler.pools[("ns", "a")].decisions
    # The provisioner writes the shape (the watch event); the decision inputs are otherwise
    # the same, yet the pool decides again at once (not at the next tick) with the shape.
    scaler.pool_event("MODIFIED", {**manifest, "status": {"cellDeviceShape": T4}})
    await clock.advance(0.2)
    assert scaler.pools[("ns", "a")].decisions == decisions + 1
    last = writer.for_pool("a")[-1]["status"]["lastDecision"]
    assert (last["reason"], last["desiredReplicas"]) == ("ScaledUp", 1)
    assert shape_condition(writer, "a")["reason"] == "Remembered"
