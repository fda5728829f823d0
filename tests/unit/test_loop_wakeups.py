"""When the loop decides and writes: targeted wake-ups, unchanged inputs, message-only changes.

What these prove: ``wake(keys)`` wakes only those pools; an event that leaves a pool's decision
inputs unchanged decides nothing and writes nothing, yet a steady stream of such events still
lets the tick decide every ``tick_s``; a changed input decides at once; a decision whose only
change is its message's text (a hold counting seconds) is written at most every
``message_refresh_s``; a pool whose workload caches were not synced retries every
``unsynced_retry_s`` (no routed event may come once they sync).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from autoscaler.loop import LoopSettings
from autoscaler.policy.types import PolicyMemory
from autoscaler.policy_memory import MEMORY_FIELD, decode_memory, encode_memory
from tests.unit.test_loop_fakes import (
    World,
    loop_world,
    pending_pod,
    pool_manifest,
)

# resync_s = tick_s: these tests are about write cadence against the tick; the longer requeue of
# a held decision (and its no-op stream) is tests/unit/test_loop_requeue.py.
SETTINGS = LoopSettings(debounce_s=0.15, tick_s=10.0, message_refresh_s=30.0, resync_s=10.0)
A, B = ("ns", "a"), ("ns", "b")


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with loop_world(SETTINGS) as built:
        yield built


async def test_wake_reaches_only_the_named_pools(world: World) -> None:
    scaler, workload, _, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))
    scaler.pool_event("ADDED", pool_manifest("b"))
    await clock.advance(0.2)
    workload.pods["p"] = pending_pod("p")
    scaler.wake([A, ("ns", "gone")])
    await clock.advance(0.2)
    assert scaler.pools[A].decisions == 2 and scaler.pools[B].decisions == 1


async def test_no_op_event_decides_and_writes_nothing(world: World) -> None:
    scaler, workload, writer, clock = world
    workload.pods["p"] = pending_pod("p")
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    scaler.wake([A])  # the follow-up: it sees its requested cell booting (a changed input)
    await clock.advance(0.2)
    state, writes = scaler.pools[A], len(writer.statuses)
    decided = state.decisions
    for _ in range(3):
        scaler.wake([A])
        await clock.advance(0.5)
    assert state.decisions == decided and state.skipped == 3
    assert len(writer.statuses) == writes
    workload.pods["q"] = pending_pod("q")  # a real change decides at once
    scaler.wake([A])
    await clock.advance(0.2)
    assert state.decisions == decided + 1


async def test_stream_of_no_op_events_still_decides_every_tick(world: World) -> None:
    scaler, _, _, clock = world
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    state = scaler.pools[A]
    start, decided = clock.now(), state.decisions
    for _ in range(50):  # an event every 0.5 s for 25 s, none of them changing anything
        scaler.wake([A])
        await clock.advance(0.5)
    assert state.skipped > 30
    assert state.decisions - decided >= 2  # ticks at ~10 s and ~20 s
    assert clock.now() - state.decided_at <= SETTINGS.tick_s + 1.0
    assert clock.now() - start >= 25.0


def _delayed_pool() -> dict[str, object]:
    """One Ready, empty cell just after a scale-up: the hold's message counts the seconds."""
    raw = pool_manifest("a")
    memory = PolicyMemory(last_scale_up_at=1_000_000.0 - 1.0)
    raw["status"] = {
        MEMORY_FIELD: encode_memory(memory),
        "desiredReplicas": 1,
        "cells": [{"name": "a-0", "index": 0, "phase": "Ready", "nodeName": "a-0"}],
    }
    return raw


async def test_message_only_change_is_written_at_most_every_refresh(world: World) -> None:
    scaler, workload, writer, clock = world
    workload.nodes = [{"metadata": {"name": "a-0"}}]
    scaler.pool_event("ADDED", _delayed_pool())
    await clock.advance(0.2)
    first = writer.for_pool("a")
    assert len(first) == 1 and "s ago" in first[0]["status"]["lastDecision"]["message"]
    await clock.advance(25.0)  # two ticks: new messages, same reason and target
    assert scaler.pools[A].decisions >= 3 and len(writer.for_pool("a")) == 1
    await clock.advance(10.0)
    statuses = writer.for_pool("a")
    assert len(statuses) == 2
    assert (
        statuses[1]["status"]["lastDecision"]["message"]
        != first[0]["status"]["lastDecision"]["message"]
    )


async def test_unsynced_caches_are_retried_quickly(world: World) -> None:
    scaler, workload, writer, clock = world
    workload.synced = False
    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    assert writer.for_pool("a")[-1]["status"]["lastDecision"]["reason"] == (
        "WorkloadClusterUnreachable"
    )
    workload.synced = True
    workload.pods["p"] = pending_pod("p")
    await clock.advance(1.1)  # no event: the 1 s retry notices the synced caches
    assert writer.for_pool("a")[-1]["status"]["lastDecision"]["reason"] == "ScaledUp"


async def test_memory_rides_on_the_status_write_when_it_scaled_else_every_persist_interval(
    world: World,
) -> None:
    scaler, workload, writer, clock = world

    def memories() -> list[PolicyMemory]:
        return [decode_memory(s["status"][MEMORY_FIELD]) for s in writer.for_pool("a")]

    scaler.pool_event("ADDED", pool_manifest("a"))
    await clock.advance(0.2)
    assert len(memories()) == 1  # the first decision
    workload.pods["p"] = pending_pod("p")
    scaler.wake([A])
    await clock.advance(0.2)
    assert len(memories()) == 2 and memories()[-1].last_scale_up_at is not None  # at once
    scaler.wake([A])  # the follow-up hold (not written: test_loop_follow_ups) keeps the facts
    await clock.advance(0.2)
    held = memories()
    assert len(held) == 2
    await clock.advance(31.0)  # three ticks: the samples are saved once, within persist_s
    later = memories()
    assert len(later) == 3 and later[-1] != held[-1]
    assert later[-1].last_scale_up_at == held[1].last_scale_up_at
    assert writer.annotations == {}  # never a second write on the pool object
