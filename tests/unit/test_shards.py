"""Sharding pools across processes: the stable hash, the Lease names, the takeover rule, and
per-shard elections on in-memory Leases with a virtual clock.

What these prove: a pool's shard is the same in every process (no salted ``hash()``) and the
pools spread evenly; unsharded, the Lease keeps today's name and no annotation is ever written;
a process takes its own shard at once and another's only after that Lease stood still for a
whole lease; a process standing in for another's shard hands it back when asked, without both
ever holding it and without a third process snatching it; a shard released on shutdown is taken
over within seconds; a killed process's shard is taken over after one lease; the gate answers
per pool, in the tasks a pool's event created.
"""

from __future__ import annotations

import asyncio
import collections
import os
import subprocess
import sys

import pytest

from gpucellpool.cli import build_parser, main
from gpucellpool.operator.run import settings_from
from gpucellpool.operator.shard_gate import ShardGate, current_pool, for_pool, key_of
from gpucellpool.runtime.leader import ElectionSettings, LeaderElector, ShardedElection
from gpucellpool.runtime.shards import (
    STANDING_IN_ANNOTATION,
    WANTED_BY_ANNOTATION,
    Action,
    LeaseSeen,
    ShardPlan,
    claim,
    lease_name,
    shard_of,
)
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_leader import MemoryLease

LEASE_S = 15.0


def test_shard_of_is_pinned_and_unsalted() -> None:
    # Pinned: a change of the hash would move every pool to another process on upgrade.
    assert [shard_of("ns", f"p{i}", 2) for i in range(8)] == [0, 0, 0, 1, 1, 0, 1, 0]
    assert shard_of("default", "gpu-a", 4) == 2
    assert shard_of("team-a", "pool", 16) == 11
    code = "from gpucellpool.runtime.shards import shard_of; print(shard_of('team-a', 'pool', 16))"
    for seed in ("1", "2"):  # another process, another str hash salt: the same shard
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "11"


def test_pools_spread_evenly_and_namespace_counts() -> None:
    counts = collections.Counter(shard_of("ns", f"pool-{i}", 2) for i in range(200))
    assert min(counts.values()) >= 80, counts
    spread = {shard_of(ns, "same-name", 8) for ns in (f"team-{i}" for i in range(40))}
    assert len(spread) >= 6  # the namespace is part of the key


def test_lease_names_keep_todays_name_unsharded() -> None:
    assert lease_name("gpucellpool-autoscaler", 1, 0) == "gpucellpool-autoscaler"
    assert lease_name("gpucellpool-autoscaler", 3, 2) == "gpucellpool-autoscaler-shard-2"


def test_bad_plans_name_the_problem() -> None:
    with pytest.raises(ValueError, match="shards must be at least 1"):
        ShardPlan(0, 0)
    with pytest.raises(ValueError, match=r"shard index must be in 0\.\.1, not 2"):
        ShardPlan(2, 2)
    assert ShardPlan(4, 1).of(("default", "gpu-a")) == 2


@pytest.mark.parametrize(
    ("seen", "preferred", "action"),
    [
        (LeaseSeen("me", 0.0, LEASE_S), True, Action.RENEW),
        (LeaseSeen("me", 0.0, LEASE_S, wanted_by="own"), False, Action.YIELD),
        (LeaseSeen("me", 0.0, LEASE_S, wanted_by="own"), True, Action.RENEW),
        (LeaseSeen("other", 14.9, LEASE_S), True, Action.WAIT),  # a leader, not standing in
        (LeaseSeen("other", 14.9, LEASE_S, standing_in=True), True, Action.ASK),
        (LeaseSeen("other", 1.0, LEASE_S, "me", standing_in=True), True, Action.WAIT),  # asked
        (LeaseSeen("other", 1.0, LEASE_S, standing_in=True), False, Action.WAIT),
        (LeaseSeen("other", 15.0, LEASE_S), False, Action.TAKE),
        (LeaseSeen("other", 15.0, LEASE_S), True, Action.TAKE),
        (LeaseSeen("", 0.0, LEASE_S), True, Action.TAKE),
        (LeaseSeen("", 14.9, LEASE_S), False, Action.WAIT),
        (LeaseSeen("", 15.0, LEASE_S), False, Action.TAKE),
    ],
)
def test_takeover_rule(seen: LeaseSeen, preferred: bool, action: Action) -> None:
    decision = claim(seen, "me", preferred)
    assert decision.action is action, decision
    assert decision.reason


class Process:
    """One operator process's per-shard electors (two shards, one store per shard's Lease)."""

    def __init__(self, identity: str, index: int, stores: list[MemoryLease], clock: VirtualClock):
        def make(shard: int) -> LeaderElector:
            settings = ElectionSettings(
                "ops",
                lease_name("l", len(stores), shard),
                identity,
                LEASE_S,
                10.0,
                2.0,
                preferred=shard == index,
            )
            return LeaderElector(stores[shard], clock, settings)

        self.election = ShardedElection(ShardPlan(len(stores), index), make)

    async def step(self) -> None:
        for elector in self.election.electors:
            await elector.step()


async def rounds(clock: VirtualClock, count: int, *processes: Process) -> None:
    """``count`` rounds: each process steps once, then the clock moves on a retry (2 s)."""
    for _ in range(count):
        for process in processes:
            await process.step()
        clock.t += 2


async def test_own_shard_at_once_anothers_after_a_lease_then_handed_back() -> None:
    clock, stores = VirtualClock(1000.0, jump_on_sleep=True), [MemoryLease(), MemoryLease()]
    a = Process("a", 0, stores, clock)
    await a.step()
    assert a.election.held() == {0}, "its own shard at once, not another's"
    started = clock.t
    while a.election.held() != {0, 1}:
        assert clock.t - started < 3 * LEASE_S, "another's free shard never taken"
        clock.t += 2
        await a.step()
    assert LEASE_S <= clock.t - started <= LEASE_S + 2
    assert stores[1].lease is not None
    assert stores[1].lease["metadata"]["annotations"] == {STANDING_IN_ANNOTATION: "true"}
    b = Process("b", 1, stores, clock)  # shard 1's own process starts
    back_at = None
    for _ in range(5):
        clock.t += 2
        await b.step()
        await a.step()
        holders = {p: p.election.held() for p in (a, b)}
        assert not holders[a] & holders[b], "a shard held by two processes"
        if holders[b] == {1}:
            back_at = clock.t
            break
    assert back_at is not None and a.election.held() == {0}
    assert "annotations" not in stores[1].lease["metadata"], stores[1].lease
    assert stores[1].lease["spec"]["holderIdentity"] == "b"


async def test_killed_processs_shard_taken_over_after_one_lease() -> None:
    clock, stores = VirtualClock(1000.0, jump_on_sleep=True), [MemoryLease(), MemoryLease()]
    a, b = Process("a", 0, stores, clock), Process("b", 1, stores, clock)
    await rounds(clock, 3, a, b)
    assert a.election.held() == {0} and b.election.held() == {1}
    killed_at = clock.t - 2  # b's last renewal; from now on only a runs
    while 1 not in a.election.held():
        assert clock.t - killed_at < 3 * LEASE_S, "the killed process's shard never taken"
        clock.t += 1
        await a.step()
    # Timed from when a saw b's last renewal: up to a retry (2 s) after b wrote it, plus the
    # 1 s steps of this loop.
    assert LEASE_S <= clock.t - killed_at <= LEASE_S + 2 + 1
    pool = next(f"p{i}" for i in range(20) if shard_of("ns", f"p{i}", 2) == 1)
    assert a.election.owns(("ns", pool))


async def test_a_shard_handed_back_is_not_snatched_by_another_stand_in() -> None:
    clock, stores = VirtualClock(1000.0, jump_on_sleep=True), [MemoryLease(), MemoryLease()]
    a = Process("a", 0, stores, clock)
    c = Process("c", 0, stores, clock)  # a second replica of shard 0: a stand-in for shard 1
    await rounds(clock, 10, a, c)
    assert a.election.held() == {0, 1} and not c.election.held()
    b = Process("b", 1, stores, clock)
    await b.step()  # asks for its shard
    await a.step()  # hands it back
    assert a.election.held() == {0}
    await c.step()
    clock.t += 1.5  # longer than the 1 s of a released-on-shutdown Lease
    await c.step()
    assert c.election.held() == set(), "another stand-in took the shard handed to b"
    await b.step()
    assert b.election.held() == {1}


async def test_own_process_shutting_down_hands_its_shard_over_within_seconds() -> None:
    clock, stores = VirtualClock(1000.0, jump_on_sleep=True), [MemoryLease(), MemoryLease()]
    a, b = Process("a", 0, stores, clock), Process("b", 1, stores, clock)
    await rounds(clock, 3, a, b)
    await b.election.release()  # SIGTERM: a rolling update, say
    released_at = clock.t
    while 1 not in a.election.held():
        assert clock.t - released_at < LEASE_S, "a released shard waited a whole lease"
        clock.t += 2
        await a.step()
    assert clock.t - released_at <= 4


async def test_unsharded_writes_todays_lease() -> None:
    clock, store = VirtualClock(1000.0, jump_on_sleep=True), MemoryLease()
    a, b = Process("a", 0, [store], clock), Process("b", 0, [store], clock)
    await rounds(clock, 4, a, b)
    assert store.lease is not None
    assert store.lease["metadata"]["name"] == "l"
    assert "annotations" not in store.lease["metadata"]
    assert WANTED_BY_ANNOTATION not in str(store.lease)
    assert a.election.held() == {0} and not b.election.held()
    assert a.election.owns(("any", "pool")) and not b.election.owns(("any", "pool"))


async def test_gate_answers_for_the_pool_whose_task_asks() -> None:
    owned = {("ns", "mine")}
    cluster_wide = [False]
    gate = ShardGate(lambda key: key in owned, lambda: cluster_wide[0])
    answers: dict[str, bool] = {}

    async def task(name: str) -> None:
        await asyncio.sleep(0)
        answers[name] = gate.acting()

    with for_pool(key_of({"metadata": {"namespace": "ns", "name": "mine"}})):
        mine = asyncio.create_task(task("mine"))
        assert current_pool() == ("ns", "mine")
    with for_pool(("ns", "theirs")):
        theirs = asyncio.create_task(task("theirs"))
    outside = asyncio.create_task(task("outside"))
    await asyncio.gather(mine, theirs, outside)
    assert answers == {"mine": True, "theirs": False, "outside": False}
    assert current_pool() is None
    cluster_wide[0] = True
    assert gate.acting()


def test_shard_flags_reach_the_settings_and_bad_ones_are_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--shards", "4", "--shard-index", "3"]
    settings = settings_from(build_parser(argv).parse_args(argv))
    assert (settings.shards, settings.shard_index) == (4, 3)
    default = settings_from(build_parser(["run"]).parse_args(["run"]))
    assert (default.shards, default.shard_index) == (1, 0)  # today's single Lease
    for bad, complaint in (
        (["--shards", "0"], "argument --shards: '0': want a whole number, at least 1"),
        (["--shard-index", "x"], "argument --shard-index: 'x': want a whole number"),
        (["--shards", "2", "--shard-index", "2"], "--shard-index 2 must be below --shards 2"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["run", *bad])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and complaint in err, err
