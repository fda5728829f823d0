"""The autoscaling loop on in-memory ports and a virtual clock.

What these prove: a burst of watch events on a quiet pool is its head decided at once (the
runner's leading edge) and then one decision that packs the whole burst (a pool with a scale-up
cooldown waits for the whole burst); the periodic tick decides with no event; one pool's failing
writes do not stop another pool (and the failing pool keeps retrying, backing off from 1 s to
the tick); Shadow mode publishes without touching desiredReplicas; the ScalingActive transition
time is kept while its status is unchanged; an Event is posted only when the reason changes; a
standby (non-leader) writes nothing; the policy memory survives a restart through
``status.policyMemory`` (written with the status, no second write), and a pool last written by
an earlier version (the memory annotation) resumes from that.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from autoscaler.loop import Autoscaler, LoopSettings
from autoscaler.policy.decision import Reason
from autoscaler.policy.types import PolicyMemory
from autoscaler.policy_memory import (
    MEMORY_ANNOTATION,
    MEMORY_FIELD,
    decode_memory,
    encode_memory,
    memory_field,
)
from simulations.simulator.engine.clock import VirtualClock, settle
from tests.unit.test_loop_fakes import (
    FakeWorkload,
    FakeWriter,
    loop_world,
    pending_pod,
    pool_manifest,
)

# resync_s = tick_s: these tests are about the tick; the longer requeue of a held decision is
# tests/unit/test_loop_requeue.py.
SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0, memory_persist_s=30.0, resync_s=10.0)


@pytest.fixture
async def world() -> AsyncIterator[tuple[Autoscaler, FakeWorkload, FakeWriter, VirtualClock]]:
    async with loop_world(SETTINGS) as built:
        yield built


def last_decision(writer: FakeWriter, name: str) -> dict[str, object]:
    return writer.for_pool(name)[-1]["status"]["lastDecision"]  # type: ignore[no-any-return]


async def test_burst_is_its_head_at_once_then_one_decision_packing_everything(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.5)  # the first look after the debounce, then quiet
    assert scaler.pools[("ns", "a")].decisions == 1  # the first look
    for i in range(30):
        workload.pods[f"p{i}"] = pending_pod(f"p{i}")
        scaler.cluster_event("wl")
        await clock.advance(0.003)  # 30 events over 90 ms, all inside one debounce
    # The pool was quiet: the first event decided at once (leading edge), seeing its one pod.
    assert scaler.pools[("ns", "a")].decisions == 2, "the burst's head waited"
    assert last_decision(writer, "a")["desiredReplicas"] == 1
    await clock.advance(0.1)
    assert scaler.pools[("ns", "a")].decisions == 2, "decided before the burst went quiet"
    await clock.advance(0.15)
    state = scaler.pools[("ns", "a")]
    assert state.decisions == 3
    decision = last_decision(writer, "a")
    # 8000 MiB each on 24576 MiB GPUs, 10 slots: 3 per cell -> 10 cells in one decision.
    assert decision["reason"] == "ScaledUp" and decision["desiredReplicas"] == 10
    assert writer.for_pool("a")[-1]["status"]["desiredReplicas"] == 10


async def test_a_new_pools_first_decision_waits_out_the_debounce(world) -> None:  # type: ignore[no-untyped-def]
    """No leading edge before the first decision: a new pool's workload connection is still
    opening, and a decision at once would publish it as unreachable (the integration test
    test_loop_provision::test_pending_pod_becomes_a_ready_cell saw exactly that)."""
    scaler, _, _, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.1)
    assert scaler.pools[("ns", "a")].decisions == 0, "decided before the debounce"
    await clock.advance(0.1)
    assert scaler.pools[("ns", "a")].decisions == 1


async def test_a_pool_with_a_scale_up_cooldown_waits_for_the_whole_burst(world) -> None:  # type: ignore[no-untyped-def]
    """No leading edge: deciding the burst's head would start the cooldown on one pod."""
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("a", stabilizationWindow="5m"))
    await clock.advance(0.2)
    assert scaler.pools[("ns", "a")].decisions == 1
    for i in range(30):
        workload.pods[f"p{i}"] = pending_pod(f"p{i}")
        scaler.cluster_event("wl")
        await clock.advance(0.003)
    assert scaler.pools[("ns", "a")].decisions == 1, "decided inside the burst"
    await clock.advance(0.25)
    assert scaler.pools[("ns", "a")].decisions == 2
    assert last_decision(writer, "a")["desiredReplicas"] == 10  # the whole burst at once


async def test_steady_stream_cannot_starve_the_decision(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, _, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    start = clock.now()
    for i in range(40):  # an event every 0.1 s for 4 s: never quiet for the 0.15 s debounce
        workload.pods[f"p{i}"] = pending_pod(f"p{i}")
        scaler.cluster_event("wl")
        await clock.advance(0.1)
        if scaler.pools[("ns", "a")].decisions == 2:
            break
    assert scaler.pools[("ns", "a")].decisions == 2
    assert clock.now() - start <= SETTINGS.max_debounce_s + 0.2


async def test_tick_decides_without_events(world) -> None:  # type: ignore[no-untyped-def]
    scaler, _, _, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    assert scaler.pools[("ns", "a")].decisions == 1
    await clock.advance(9.0)
    assert scaler.pools[("ns", "a")].decisions == 1
    await clock.advance(1.5)
    assert scaler.pools[("ns", "a")].decisions == 2


async def test_one_pool_failing_does_not_stop_another(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    writer.fail_for.add("bad")
    for name in ("bad", "good"):  # each its own pod (one pod two pools match goes to one)
        selection = {"podSelector": {"matchLabels": {"pool": name}}}
        scaler.pool_event("ADDED", pool_manifest(name, demand=selection))
    await clock.advance(0.2)
    workload.pods["p"] = pending_pod("p", pool="good")
    workload.pods["q"] = pending_pod("q", pool="bad")
    scaler.cluster_event("wl")
    await clock.advance(0.2)
    assert last_decision(writer, "good")["reason"] == "ScaledUp"
    bad = scaler.runner.keys[("ns", "bad")]  # the runner counts failed steps
    assert bad.errors == 2 and bad.task is not None and not bad.task.done()
    writer.fail_for.clear()  # the failing pool recovers on its next wake-up
    scaler.cluster_event("wl")
    await clock.advance(0.2)
    assert last_decision(writer, "bad")["reason"] == "ScaledUp"


async def test_a_failing_decision_backs_off_from_1_s_to_the_tick(world) -> None:  # type: ignore[no-untyped-def]
    """No event: the failed pool retries after 1, 2, 4, 8 s, then every tick (10 s)."""
    scaler, _, writer, clock = world
    writer.fail_for.add("bad")
    scaler.pool_event("ADDED", pool_manifest("bad"))
    await clock.advance(0.15)  # a new pool's first decision waits out the debounce
    state = scaler.runner.keys[("ns", "bad")]
    errors = [state.errors]
    for step_s in (1.0, 2.0, 4.0, 8.0, 10.0, 10.0):
        await clock.advance(step_s - 0.01)
        errors.append(state.errors)  # not yet
        await clock.advance(0.01)
        errors.append(state.errors)
    assert errors == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7]
    writer.fail_for.clear()
    await clock.advance(10.0)
    assert state.failures == 0 and state.steps == 1 and writer.for_pool("bad")  # written


async def test_shadow_publishes_but_leaves_desired_replicas(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    workload.pods["p"] = pending_pod("p")
    raw = pool_manifest("s", mode="Shadow")
    raw["status"] = {"desiredReplicas": 0}
    scaler.pool_event("ADDED", raw)
    await clock.advance(0.2)
    status = writer.for_pool("s")[-1]["status"]
    assert status["lastDecision"]["act"] is False
    assert status["lastDecision"]["desiredReplicas"] == 1
    assert status["desiredReplicas"] == 0  # re-applied unchanged, never the shadow target
    cond = status["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "ScalingActive",
        "False",
        "ShadowMode",
    )
    assert writer.events[-1][1] == "ScaledUp" and "Shadow" in writer.events[-1][2]


async def test_condition_time_kept_and_event_only_on_reason_change(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    raw = pool_manifest("a")
    scaler.pool_event("ADDED", raw)
    await clock.advance(0.2)
    first = writer.for_pool("a")[-1]["status"]["conditions"][0]
    assert first["reason"] == Reason.IDLE.value
    # The provisioner's status now carries our condition; a later change keeps its time.
    raw = {**raw, "status": {"conditions": [first]}}
    scaler.pool_event("MODIFIED", raw)
    await clock.advance(100.0)
    workload.pods["p"] = pending_pod("p")
    scaler.cluster_event("wl")
    await clock.advance(0.2)
    second = writer.for_pool("a")[-1]["status"]["conditions"][0]
    assert second["reason"] == "ScaledUp" and second["status"] == "True"
    assert second["lastTransitionTime"] == first["lastTransitionTime"]
    reasons = [r for n, r, _ in writer.events if n == "a"]
    assert reasons == ["Idle", "ScaledUp"]
    writes = len(writer.statuses)
    await clock.advance(60.0)  # ticks: the pod fits the requested (booting) cell, a follow-up
    saved = writer.statuses[writes:]  # of the scale-up (tests/unit/test_loop_follow_ups.py):
    assert len(saved) <= 60.0 / SETTINGS.memory_persist_s  # only memory saves write it
    decided = [
        (s["status"]["lastDecision"]["reason"], s["status"]["desiredReplicas"]) for s in saved
    ]
    assert decided and set(decided) <= {("DemandSatisfied", 1)}, "must not undo its scale-up"
    events = [r for n, r, _ in writer.events if n == "a"]
    assert events == ["Idle", "ScaledUp"]


async def test_standby_writes_nothing(world) -> None:  # type: ignore[no-untyped-def]
    _, workload, writer, clock = world
    standby = Autoscaler(workload, writer, clock, settings=SETTINGS, is_leader=lambda: False)
    workload.pods["p"] = pending_pod("p")
    standby.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    assert standby.pools[("ns", "a")].decisions == 1
    assert writer.statuses == [] and writer.events == [] and writer.annotations == {}
    await standby.close()


@pytest.mark.parametrize("where", ["status", "annotation"])
async def test_memory_survives_restart(world, where: str) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    workload.pods["p"] = pending_pod("p")
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    assert last_decision(writer, "a")["reason"] == "ScaledUp"
    stored = writer.for_pool("a")[-1]["status"][MEMORY_FIELD]  # in the same write
    assert writer.annotations == {}  # no second write on the pool
    assert decode_memory(stored).last_scale_up_at == pytest.approx(clock.now(), abs=1)
    await scaler.close()
    # Restart: demand is gone and the cell is Ready and empty. Without memory the new process
    # would scale down at once; with it, the scale-down delay after scale-up holds. An earlier
    # version kept the same memory in an annotation: it is read when the status has none.
    workload.pods.clear()
    raw = pool_manifest("a")
    raw["status"] = {
        "desiredReplicas": 1,
        "cells": [{"name": "a-0", "index": 0, "phase": "Ready", "nodeName": "a-0"}],
    }
    if where == "status":
        raw["status"][MEMORY_FIELD] = stored
    else:
        raw["metadata"]["annotations"] = {MEMORY_ANNOTATION: stored}
    workload.nodes = [{"metadata": {"name": "a-0"}}]
    restarted = Autoscaler(workload, FakeWriter(), clock, settings=SETTINGS)
    restarted.pool_event("ADDED", raw)
    await clock.advance(0.2)
    decision = restarted.pools[("ns", "a")].last_decision
    assert decision is not None and decision.desired_replicas == 1
    assert decision.reason is not Reason.SCALED_DOWN
    fresh = Autoscaler(workload, FakeWriter(), clock, settings=SETTINGS)
    raw["metadata"]["annotations"] = {}
    raw["status"].pop(MEMORY_FIELD, None)
    fresh.pool_event("ADDED", raw)
    await clock.advance(0.2)
    forgetful = fresh.pools[("ns", "a")].last_decision
    assert forgetful is not None and forgetful.reason is not decision.reason  # memory mattered
    await restarted.close()
    await fresh.close()


def test_memory_codec_round_trips_and_never_raises() -> None:
    memory = PolicyMemory(1.0, 2.0, ((3.0, 4),), {"a-0": 5.0}, ((6.0, 1.5),), ((7.0, -1),))
    assert decode_memory(encode_memory(memory)) == memory
    for junk in (None, "", "{", "[]", '{"v": 99}', '{"v": 1, "rec": [[1]]}'):
        assert decode_memory(junk) == PolicyMemory()


async def test_unsynced_workload_reads_as_unreachable_not_idle(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    workload.synced = False
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    cond = writer.for_pool("a")[-1]["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "WorkloadClusterUnreachable")
    await settle()


async def test_changed_decision_persists_memory_at_once(world) -> None:  # type: ignore[no-untyped-def]
    scaler, workload, writer, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)  # Idle: memory written
    workload.pods["p"] = pending_pod("p")
    scaler.cluster_event("wl")
    await clock.advance(0.2)  # well inside memory_persist_s, but the decision changed
    stored = decode_memory(writer.for_pool("a")[-1]["status"][MEMORY_FIELD])
    assert stored.last_scale_up_at is not None


async def test_overwritten_status_is_republished_without_a_duplicate_event(world) -> None:  # type: ignore[no-untyped-def]
    scaler, _, writer, clock = world
    raw = pool_manifest("a")
    scaler.pool_event("ADDED", raw)
    await clock.advance(0.2)
    ours = writer.for_pool("a")[-1]["status"]
    assert ours["lastDecision"]["reason"] == "Idle"
    # A whole-list status write from an older read drops our condition and lastDecision.
    scaler.pool_event("MODIFIED", {**raw, "status": {"desiredReplicas": 0, "conditions": []}})
    await clock.advance(0.2)
    assert len(writer.for_pool("a")) == 2
    again = writer.for_pool("a")[-1]["status"]
    assert again["conditions"][0]["reason"] == "Idle"
    assert [r for _, r, _ in writer.events] == ["Idle"]  # republished, not re-announced
    # A new leader reads the last reason from status and does not announce it again either.
    scaler.pool_event("MODIFIED", {**raw, "status": again})
    scaler.wake_all()
    await clock.advance(0.2)
    assert len(writer.for_pool("a")) == 3
    assert [r for _, r, _ in writer.events] == ["Idle"]


async def test_first_event_survives_the_watch_echo_of_our_own_write() -> None:
    """The watch event of our status write can arrive before the write call returns."""
    clock, workload = VirtualClock(), FakeWorkload()
    raw = pool_manifest("a")

    class EchoingWriter(FakeWriter):
        async def apply_status(self, body: dict[str, Any]) -> None:
            await super().apply_status(body)
            scaler.pool_event("MODIFIED", {**raw, "status": body["status"]})

    writer = EchoingWriter()
    scaler = Autoscaler(workload, writer, clock, settings=SETTINGS)
    try:
        scaler.pool_event("ADDED", raw)
        await clock.advance(0.2)
        assert [r for _, r, _ in writer.events] == ["Idle"]
    finally:
        await scaler.close()


def test_memory_field_drops_the_samples_before_the_scaling_facts() -> None:
    idle = {f"a-{i}": float(i) for i in range(2000)}
    memory = PolicyMemory(1.0, 2.0, ((3.0, 4),), idle, ((6.0, 1.5),), ((7.0, -1),), True)
    assert decode_memory(memory_field(memory)) == memory  # fits: kept whole
    limit = len(encode_memory(PolicyMemory(1.0, 2.0, scale_events=((7.0, -1),)))) + 20
    trimmed = decode_memory(memory_field(memory, limit))
    assert (trimmed.last_scale_up_at, trimmed.last_scale_down_at) == (1.0, 2.0)
    assert trimmed.scale_events == ((7.0, -1),) and trimmed.boots_proven
    assert not trimmed.idle_since and not trimmed.recommendations
    tight = decode_memory(memory_field(memory, 80))  # not even the rate events fit
    assert (tight.last_scale_up_at, tight.scale_events) == (1.0, ())
