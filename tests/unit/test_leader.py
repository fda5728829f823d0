"""Lease leader election on an in-memory Lease store and a virtual clock.

What these prove: of two candidates exactly one leads; a standby takes over only after the
record stood still for the lease duration (measured on its own clock), never earlier; a leader
that cannot renew steps down before a standby may take over (no overlap); a clean release
hands over at the standby's next retry; a lost race (stale resourceVersion) does not win; the
term a leader is told it has left ends no later than a standby could take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from dataclasses import replace
from typing import Any

from gpucellpool.runtime.leader import ElectionSettings, LeaderElector, LeaseConflict
from simulations.simulator.engine.clock import VirtualClock

JSON = dict[str, Any]


class MemoryLease:
    def __init__(self) -> None:
        self.lease: JSON | None = None
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("apiserver down")

    async def get(self) -> JSON | None:
        self._check()
        return copy.deepcopy(self.lease)

    async def create(self, lease: JSON) -> JSON:
        self._check()
        if self.lease is not None:
            raise LeaseConflict("exists")
        return self._store(lease)

    async def replace(self, lease: JSON) -> JSON:
        self._check()
        assert self.lease is not None
        if lease["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise LeaseConflict("stale")
        return self._store(lease)

    def _store(self, lease: JSON) -> JSON:
        self.version += 1
        self.lease = copy.deepcopy(lease)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)


def pair(store: MemoryLease, clock: VirtualClock) -> tuple[LeaderElector, LeaderElector]:
    def make(identity: str) -> LeaderElector:
        settings = ElectionSettings("ops", identity=identity, lease_s=15, renew_deadline_s=10)
        return LeaderElector(store, clock, settings)

    return make("a"), make("b")


async def test_exactly_one_leads_and_standby_waits_the_whole_lease() -> None:
    store, clock = MemoryLease(), VirtualClock(1000.0, jump_on_sleep=True)
    a, b = pair(store, clock)
    await a.step()
    await b.step()
    assert (a.is_leader, b.is_leader) == (True, False) and a.known and b.known
    for _ in range(10):  # a renews every 2 s; b never takes over
        clock.t += 2
        await a.step()
        await b.step()
        assert (a.is_leader, b.is_leader) == (True, False)
    # a dies (no more renewals). b must wait the full lease from when it last saw a change.
    died_at = clock.t
    while not b.is_leader:
        clock.t += 1
        await b.step()
    assert 15 <= clock.t - died_at <= 16
    assert store.lease is not None and store.lease["spec"]["leaseTransitions"] == 1


async def test_leader_that_cannot_renew_steps_down_before_takeover() -> None:
    store, clock = MemoryLease(), VirtualClock(1000.0, jump_on_sleep=True)
    a, _ = pair(store, clock)
    await a.step()
    last_renewal = clock.t
    store.down = True
    while a.is_leader:
        clock.t += 1
        await a.step()
    assert clock.t - last_renewal == 10  # renew deadline, strictly below the 15 s lease


async def test_release_hands_over_at_next_retry() -> None:
    store, clock = MemoryLease(), VirtualClock(1000.0, jump_on_sleep=True)
    a, b = pair(store, clock)
    await a.step()
    await b.step()
    await a.release()
    assert not a.is_leader
    clock.t += 2
    await b.step()
    assert b.is_leader


async def test_stale_write_loses_the_race() -> None:
    store, clock = MemoryLease(), VirtualClock(1000.0, jump_on_sleep=True)
    a, b = pair(store, clock)
    await a.step()
    clock.t += 30  # a's lease has expired from b's point of view once b has observed it
    await b.step()
    clock.t += 16
    stale = await store.get()
    await a.step()  # a renews first
    assert stale is not None
    try:
        await store.replace(stale)  # b's write based on the old read
    except LeaseConflict:
        pass
    else:
        raise AssertionError("a stale resourceVersion must not win")
    assert a.is_leader


class SlowLease(MemoryLease):
    """A GET that takes ``latency_s`` on the clock; the record is read as it was at its end."""

    def __init__(self, clock: VirtualClock, latency_s: float) -> None:
        super().__init__()
        self.clock, self.latency_s = clock, latency_s

    async def get(self) -> JSON | None:
        self.clock.t += self.latency_s
        return await super().get()


async def test_a_renewal_is_timed_from_the_answer_that_showed_it_not_the_request() -> None:
    """A renewal a slow GET returned may have been written just before the answer: the standby
    times the record from the answer, so it never expires the lease early (client-go does)."""
    clock = VirtualClock(1000.0, jump_on_sleep=True)
    store = SlowLease(clock, latency_s=0.0)
    a, b = pair(store, clock)
    await a.step()
    store.latency_s = 8.0  # b's first look: asked at t, answered (with a's record) at t + 8
    await b.step()
    assert not b.is_leader
    store.latency_s = 0.0
    clock.t += 8.0  # 16 s after b asked, 8 s after the answer: a's lease (15 s) still stands
    await b.step()
    assert not b.is_leader, "took over 8 s into a 15 s lease, timed from the request"
    clock.t += 7.0  # 15 s after the answer
    await b.step()
    assert b.is_leader


class HungView:
    """One candidate's view of the store while its apiserver is silent: each request hangs
    ``timeout_s`` on the clock, then fails, as the door's per-request timeout ends it."""

    def __init__(self, store: MemoryLease, clock: VirtualClock, timeout_s: float) -> None:
        self.store, self.clock, self.timeout_s = store, clock, timeout_s
        self.hung = False

    async def _wait(self) -> None:
        if self.hung:
            await self.clock.sleep(self.timeout_s)
            raise TimeoutError("timed out")

    async def get(self) -> JSON | None:
        await self._wait()
        return await self.store.get()

    async def create(self, lease: JSON) -> JSON:
        await self._wait()
        return await self.store.create(lease)

    async def replace(self, lease: JSON) -> JSON:
        await self._wait()
        return await self.store.replace(lease)


async def test_a_leader_whose_round_hangs_stops_leading_at_the_renew_deadline() -> None:
    """A renewal that hangs (10 s per request, the operator's API timeout) must not keep the
    leader leading past its renew deadline: the standby takes over after the 15 s lease."""
    clock, store = VirtualClock(1000.0), MemoryLease()
    settings = ElectionSettings("ops", identity="a", lease_s=15, renew_deadline_s=10)
    view = HungView(store, clock, timeout_s=10)
    a = LeaderElector(view, clock, settings)
    b = LeaderElector(store, clock, replace(settings, identity="b"))
    await a.step()
    await b.step()
    renewed = clock.t
    view.hung = True
    running = asyncio.create_task(a.run())
    both, a_until = [], renewed
    while clock.t < renewed + 30:
        await clock.advance(0.5)
        await b.step()
        if a.is_leader:
            a_until = clock.t
        if a.is_leader and b.is_leader:
            both.append(clock.t - renewed)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    assert both == [], f"two leaders {both[0]:g}..{both[-1]:g} s after the last renewal"
    assert b.is_leader and a_until - renewed < 10


async def test_a_renewal_landing_after_the_deadline_starts_a_new_term() -> None:
    """A round slower than the renew deadline (a loaded machine) that still renews: is_leader
    lapsed meanwhile (writes stopped), so the term ends and a new one starts (on_change False
    then True: the composition root wakes every pool), instead of leading on silently."""
    clock, store = VirtualClock(1000.0), MemoryLease()
    changes: list[bool] = []
    settings = ElectionSettings("ops", identity="a", lease_s=15, renew_deadline_s=10)
    view = HungView(store, clock, timeout_s=0)
    a = LeaderElector(view, clock, settings, changes.append)
    await a.step()
    assert changes == [True]
    read = view.get

    async def slow_get() -> JSON | None:
        await clock.sleep(12)  # the round's read outlasts the deadline, then succeeds
        return await read()

    view.get = slow_get  # type: ignore[method-assign]
    round_ = asyncio.create_task(a.step())
    await clock.advance(11)
    assert not a.is_leader and changes == [True]  # lapsed while the round runs
    await clock.advance(2)
    await round_
    assert not a.is_leader and changes == [True, False]  # that renewal landed stale: a lapse
    view.get = read  # type: ignore[method-assign]
    await a.step()
    assert a.is_leader and changes == [True, False, True]


async def test_the_term_left_ends_when_a_standby_could_first_take_over() -> None:
    store, clock = MemoryLease(), VirtualClock(1000.0, jump_on_sleep=True)
    a, b = pair(store, clock)
    assert a.term_left() == 0.0  # not leading: no term
    await a.step()
    await b.step()
    renewed = clock.t
    assert a.term_left() == 15.0
    store.down = True  # a cannot renew any more
    clock.t += 9
    await a.step()
    assert a.is_leader and a.term_left() == 6.0
    clock.t += 1  # the renew deadline: a stops leading, its term is over for its writes
    await a.step()
    assert not a.is_leader and a.term_left() == 0.0
    store.down = False
    while not b.is_leader:
        clock.t += 1
        await b.step()
    assert clock.t >= renewed + 15  # no standby held it within any term a was told of
