"""A decision that only follows from the action in force is not written; a real change is.

What these prove: after a scale-up, the next decision of the same asks at the same target
("the pods fit the booting cells", ``explain.follows_from``) writes no status and posts no
Event, while the status in force still says why the target is what it is; a new ask, a new
target and an unreachable workload cluster are written at once (and a second scale-up is
announced again); the rule itself refuses every other difference (target, asks, victims,
``act``, demand, a blocking guard such as max replicas, physical GPUs or lost credentials).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from autoscaler.explain import Outcome, follows_from
from autoscaler.loop import LoopSettings
from autoscaler.policy.decision import Reason
from tests.unit.test_loop_fakes import (
    FakeWriter,
    World,
    loop_world,
    pending_pod,
    pool_manifest,
    with_cells,
)

SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0, memory_persist_s=30.0, resync_s=10.0)
A = ("ns", "a")


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with loop_world(SETTINGS) as built:
        yield built


def decided(writer: FakeWriter) -> list[tuple[str, int, int]]:
    """(reason, desiredReplicas, pendingAsks) of every status written for pool a."""
    return [
        (
            s["status"]["lastDecision"]["reason"],
            s["status"]["desiredReplicas"],
            s["status"]["lastDecision"]["pendingAsks"],
        )
        for s in writer.for_pool("a")
    ]


async def scaled_up(world: World) -> None:
    """Pool a with one pending 8 GB pod: ScaledUp 0 -> 1, written and announced."""
    scaler, workload, writer, clock = world
    workload.pods["p0"] = pending_pod("p0")
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    assert decided(writer) == [("ScaledUp", 1, 1)]
    assert [r for _, r, _ in writer.events] == ["ScaledUp"]


async def test_the_follow_up_of_a_scale_up_is_neither_written_nor_announced(world: World) -> None:
    scaler, _, writer, clock = world
    await scaled_up(world)
    await clock.advance(10.5)  # the tick: the requested (booting) cell now covers the pod
    state = scaler.pools[A]
    assert state.decisions == 2
    assert state.last_decision is not None
    assert state.last_decision.reason is Reason.DEMAND_SATISFIED
    assert decided(writer) == [("ScaledUp", 1, 1)], "the follow-up must not be written"
    assert [r for _, r, _ in writer.events] == ["ScaledUp"]
    # The status in force still explains the target; no drift is seen, so nothing re-writes it.
    assert state.published is not None and state.published.reason == "ScaledUp"
    await clock.advance(19.0)  # one more tick of the same follow-up, inside memory_persist_s
    assert decided(writer) == [("ScaledUp", 1, 1)]
    await clock.advance(10.0)  # past memory_persist_s: the memory save carries the newer words
    assert decided(writer) == [("ScaledUp", 1, 1), ("DemandSatisfied", 1, 1)]
    assert [r for _, r, _ in writer.events] == ["ScaledUp"]


async def test_a_new_ask_or_target_after_a_follow_up_is_written_at_once(world: World) -> None:
    scaler, workload, writer, clock = world
    await scaled_up(world)
    await clock.advance(10.5)  # the follow-up, not written
    workload.pods["p1"] = pending_pod("p1")  # fits the booting cell: a new ask, same target
    scaler.cluster_event("wl")
    await clock.advance(0.2)
    assert decided(writer)[-1] == ("DemandSatisfied", 1, 2)
    for k in (2, 3):  # the 4th 8 GB pod needs a second cell: a new target
        workload.pods[f"p{k}"] = pending_pod(f"p{k}")
    scaler.cluster_event("wl")
    await clock.advance(0.2)
    assert decided(writer)[-1] == ("ScaledUp", 2, 4)
    # The second scale-up is announced: the follow-up in between counts as told.
    assert [r for _, r, _ in writer.events] == ["ScaledUp", "ScaledUp"]


async def test_an_unreachable_cluster_after_a_scale_up_is_written_at_once(world: World) -> None:
    scaler, workload, writer, clock = world
    await scaled_up(world)
    # The provisioner's row for the cell asked for (with our status, as the watch shows it).
    raw = with_cells(pool_manifest("a"), [{"name": "a-0", "index": 0, "phase": "Booting"}])
    raw["status"] |= {k: v for k, v in writer.for_pool("a")[-1]["status"].items()}
    scaler.pool_event("MODIFIED", raw)
    await clock.advance(0.2)
    assert len(decided(writer)) == 1
    workload.synced = False  # e.g. the kubeconfig Secret's credentials stopped working
    scaler.cluster_event("wl")
    await clock.advance(0.2)
    status = writer.for_pool("a")[-1]["status"]
    assert status["conditions"][0]["reason"] == "WorkloadClusterUnreachable"
    assert status["desiredReplicas"] == 1
    assert [r for _, r, _ in writer.events][-1] == "WorkloadClusterUnreachable"


async def test_unsynced_caches_before_the_provisioners_row_keep_the_scale_up(
    world: World,
) -> None:
    """The cell just asked for has no row yet when the caches stop being synced: the hold
    the unreachable cluster leads to counts it, as a synced observation does, and keeps 1."""
    scaler, workload, writer, clock = world
    await scaled_up(world)
    workload.synced = False
    scaler.cluster_event("wl")
    await clock.advance(0.2)
    status = writer.for_pool("a")[-1]["status"]
    assert status["conditions"][0]["reason"] == "WorkloadClusterUnreachable"
    assert status["desiredReplicas"] == 1


SCALED_UP = Outcome(
    desired=3,
    reason="ScaledUp",
    message="2 pending pod(s) need 1 new cell(s); wanted +1, scaling 2 -> 3",
    act=True,
    cells_needed=1,
    pending_asks=2,
    condition_status="True",
    condition_reason="ScaledUp",
)
COVERED = replace(
    SCALED_UP,
    reason="DemandSatisfied",
    message="2 pending pod(s) fit free or booting cells; holding 3",
    condition_reason="DemandSatisfied",
    cells_needed=0,
)


def test_follows_from_accepts_only_the_covered_asks_of_the_scale_up() -> None:
    assert follows_from(SCALED_UP, COVERED)
    assert not follows_from(COVERED, SCALED_UP)  # a new scale-up is news
    assert not follows_from(COVERED, COVERED)  # equal outcomes are the writer's own rule


def guarded(reason: Reason) -> Outcome:
    return replace(COVERED, reason=reason.value, condition_reason=reason.value)


@pytest.mark.parametrize(
    "later",
    [
        replace(COVERED, desired=4),
        replace(COVERED, pending_asks=3),
        replace(COVERED, victims=("a-2",)),
        replace(COVERED, act=False, condition_status="False", condition_reason="ShadowMode"),
        replace(COVERED, cells_needed=1),
        replace(COVERED, unschedulable=1),
        replace(COVERED, demand_read=False),
        replace(COVERED, given_away=1),
        guarded(Reason.AT_MAX_REPLICAS),
        guarded(Reason.INSUFFICIENT_PHYSICAL_GPU),
        guarded(Reason.WORKLOAD_CLUSTER_UNREACHABLE),
        guarded(Reason.IN_FLIGHT_LIMIT),
    ],
    ids=[
        "target",
        "asks",
        "victims",
        "shadow",
        "still-needs-cells",
        "unschedulable",
        "read-failed",
        "shared",
        "max-replicas",
        "physical-gpus",
        "unreachable",
        "in-flight",
    ],
)
def test_any_real_change_is_not_a_follow_up(later: Outcome) -> None:
    assert not follows_from(SCALED_UP, later)
