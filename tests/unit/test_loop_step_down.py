"""A process that steps down sends nothing more, whatever it had queued.

What these prove: the leadership gate is asked again right before each request of a decision's
publication, not only before the decision: a status write that waited for a write slot
(``writes_in_flight``) while the process lost the pool's Lease is dropped instead of landing
after the new holder's writes, and so is the Event that would follow a status written just
before stepping down; a request still unanswered when the term could end (the Lease's
``term_left``) is abandoned rather than left to land after the next holder's writes; nothing
dropped counts as published, so the pool writes again if this process leads it again. (Under
load, a shard's Lease lost once made both processes post Events for the same pools in turn.)
"""

from __future__ import annotations

import asyncio
from typing import Any

from autoscaler.loop import Autoscaler, LoopSettings
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import FakeWorkload, FakeWriter, pending_pod, pool_manifest

JSON = dict[str, Any]
SETTINGS = LoopSettings(writes_in_flight=1, tick_s=3600.0, resync_s=3600.0)


class HeldWriter(FakeWriter):
    """Holds the first status write until released (the one write slot stays taken)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.held = True

    async def apply_status(self, body: JSON) -> None:
        if self.held:
            self.held = False
            self.entered.set()
            await self.release.wait()
        await super().apply_status(body)


async def test_writes_queued_or_following_when_the_lease_is_lost_are_not_sent() -> None:
    clock, workload, writer = VirtualClock(), FakeWorkload(), HeldWriter()
    leading = [True]
    scaler = Autoscaler(workload, writer, clock, settings=SETTINGS, is_leader=lambda: leading[0])
    try:
        workload.pods["p"] = pending_pod("p")
        for name in ("a", "b"):
            scaler.pool_event("ADDED", pool_manifest(name))
        first = asyncio.create_task(scaler.decide_once(("ns", "a")))
        await writer.entered.wait()  # a's status is in flight, holding the one slot
        second = asyncio.create_task(scaler.decide_once(("ns", "b")))
        for _ in range(5):
            await asyncio.sleep(0)  # b decided and queued for the slot
        assert not second.done()
        leading[0] = False  # the Lease is lost meanwhile
        writer.release.set()
        await asyncio.gather(first, second)
        assert [s["metadata"]["name"] for s in writer.statuses] == ["a"]  # sent before
        assert writer.events == []  # a's Event came after the step-down: not posted
        assert scaler.pools[("ns", "b")].published is None  # nothing counts as published
        leading[0] = True  # leading again: b's outcome is written then
        await scaler.decide_once(("ns", "b"), skip_unchanged=True)
        assert [s["metadata"]["name"] for s in writer.statuses] == ["a", "b"]
        b = scaler.pools[("ns", "b")].last_decision
        assert b is not None and [(n, r) for n, r, _ in writer.events] == [("b", b.reason)]
    finally:
        await scaler.close()


class HungWriter(FakeWriter):
    """A status write that is never answered (a loaded apiserver), once."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = True

    async def apply_status(self, body: JSON) -> None:
        if self.hang:
            self.hang = False
            await asyncio.Event().wait()
        await super().apply_status(body)


async def test_a_write_unanswered_when_the_term_could_end_is_abandoned() -> None:
    clock, workload, writer = VirtualClock(), FakeWorkload(), HungWriter()
    term = [0.05]  # seconds of real time until a standby could take the Lease over
    scaler = Autoscaler(workload, writer, clock, settings=SETTINGS, term_left=lambda: term[0])
    try:
        workload.pods["p"] = pending_pod("p")
        scaler.pool_event("ADDED", pool_manifest("a"))
        decision = await scaler.decide_once(("ns", "a"))  # returns: no hang, no exception
        assert decision is not None and decision.reason == "ScaledUp"
        state = scaler.pools[("ns", "a")]
        assert writer.statuses == [] and writer.events == [] and state.published is None
        term[0] = 0.0  # the term is over: nothing is even sent
        await scaler.decide_once(("ns", "a"))
        assert writer.statuses == [] and state.published is None
        term[0] = 15.0  # renewed: the outcome is written, with its Event
        await scaler.decide_once(("ns", "a"))
        assert [s["metadata"]["name"] for s in writer.statuses] == ["a"]
        assert [(n, r) for n, r, _ in writer.events] == [("a", "ScaledUp")]
    finally:
        await scaler.close()
