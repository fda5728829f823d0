"""The indexes a decision reads at scale give what a full scan gives, on randomised clusters.

What these prove: the pod index kept one event at a time (``pod_index.PodIndexer``) holds after
every event exactly the unbound pods, per-Node pods and per-label pods a full ``index_pods`` of
the same pods holds, never changes an index already handed out, and hands out again the Node
and label tuples an event did not touch (what ``observe.annotated_usage`` remembers by); the
routes filed by a ``matchLabels`` pair wake the same pools as asking every route; the rivals
kept per cluster (``sharing.RivalBoard``) share every pending pod exactly as the full list of
the cluster's other pools (``rivals_of``) does, across Secrets reaching one cluster, Shadow,
disabled and deleted pools and spec changes; and a loop reading the kept index publishes the
same decisions as one re-indexing every pod at each decision.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from autoscaler.loop import Autoscaler, LoopSettings, WorkloadSnapshot
from autoscaler.pod_index import PodIndex, PodIndexer, index_pods
from autoscaler.policy.pool_demand import pending_for_pool
from autoscaler.routing import index_routes, pod_demand, pool_route
from autoscaler.sharing import RivalBoard, rivals_of, share_pending
from gpucellpool.api.pool import GPUCellPool
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop_fakes import FakeWorkload, FakeWriter, pending_pod, pool_manifest

JSON = dict[str, Any]
TEAMS = ["ml", "web", "db"]
NAMESPACES = {"a": {"gpu": "yes"}, "b": {}, "c": {"gpu": "no"}}


def key_of(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def random_pod(rng: random.Random, name: str) -> JSON:
    """A pod in any state the Pods cache may hold, with 0-3 of a few labels."""
    labels = {k: rng.choice(v) for k, v in (("team", TEAMS), ("trial", ["x", "y"]), ("app", ["z"]))}
    kept = dict(rng.sample(sorted(labels.items()), rng.randrange(4)))
    pod = pending_pod(name, rng.choice([4000, 12000, 30000]), rng.choice(sorted(NAMESPACES)))
    pod["metadata"]["labels"] = kept
    roll = rng.random()
    if roll < 0.35:  # bound: running, or not started yet
        pod["spec"]["nodeName"] = f"n{rng.randrange(6)}"
        if rng.random() < 0.7:
            pod["status"] = {"phase": "Running"}
    elif roll < 0.45:
        pod["status"] = {"phase": rng.choice(["Succeeded", "Failed"])}
    elif roll < 0.5:
        del pod["status"]
    elif roll < 0.55:
        pod["spec"]["schedulerName"] = "other"
    return pod


def change(rng: random.Random, name: str, where: dict[str, str]) -> tuple[str, JSON | None]:
    """A random event for the pod ``name``: deleted (None) or a new object under its key
    (``where``: each live pod's key by name, updated)."""
    old = where.get(name)
    if old is not None and rng.random() < 0.25:
        del where[name]
        return old, None
    pod = random_pod(rng, name)
    if old is not None:  # the same pod changed: it keeps its namespace
        pod["metadata"]["namespace"] = old.split("/")[0]
    where[name] = key_of(pod)
    return key_of(pod), pod


def content(index: PodIndex) -> tuple[Any, ...]:
    """An index as sorted keys (order within a list is not part of the contract)."""

    def keys(pods: Iterable[Mapping[str, Any]]) -> list[str]:
        return sorted(key_of(p) for p in pods)

    return (
        keys(index.unbound),
        {node: keys(pods) for node, pods in index.by_node.items()},
        {pair: keys(pods) for pair, pods in (index.by_label or {}).items()},
    )


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_pod_index_equals_a_full_index_after_every_event(seed: int) -> None:
    rng = random.Random(seed)
    indexer, live, where = PodIndexer(), dict[str, JSON](), dict[str, str]()
    handed_out: list[tuple[PodIndex, tuple[Any, ...]]] = []
    for step in range(500):
        key, pod = change(rng, f"p{rng.randrange(60)}", where)
        if pod is None:
            del live[key]
        else:
            live[key] = pod
        indexer.apply(key, pod)
        index = indexer.index()
        assert content(index) == content(index_pods(live.values())), step
        assert indexer.pods == len(live)
        if step % 40 == 0:
            handed_out.append((index, content(index)))
    for index, then in handed_out:  # an index handed out never moves
        assert content(index) == then


def test_an_event_rebuilds_only_the_groups_it_touched() -> None:
    indexer = PodIndexer()
    for i in range(4):
        on_node = pending_pod(f"run{i}", team="ml")
        on_node["spec"]["nodeName"] = f"n{i % 2}"
        indexer.apply(key_of(on_node), on_node)
        waiting = pending_pod(f"wait{i}", team=TEAMS[i % 2])
        indexer.apply(key_of(waiting), waiting)
    before = indexer.index()
    assert indexer.index() is before  # nothing applied: the same index
    moved = pending_pod("run0", team="ml")
    moved["spec"]["nodeName"] = "n0"
    indexer.apply(key_of(moved), moved)  # a pod of n0 changed
    after = indexer.index()
    assert after is not before and after.by_node["n1"] is before.by_node["n1"]
    assert after.by_node["n0"] is not before.by_node["n0"]
    assert after.unbound is before.unbound and after.by_label is before.by_label
    waiting = pending_pod("wait1", mem_mib=9000, team="web")  # a pending pod of team=web
    indexer.apply(key_of(waiting), waiting)
    last = indexer.index()
    assert last.by_node is after.by_node and last.unbound is not after.unbound
    assert last.by_label is not None and after.by_label is not None
    assert last.by_label[("team", "ml")] is after.by_label[("team", "ml")]
    assert last.by_label[("team", "web")] is not after.by_label[("team", "web")]


def random_demand(rng: random.Random) -> JSON:
    """A demand selection: none, one or two matchLabels pairs, expressions, a namespace
    selector or another scheduler, alone or together."""
    demand: JSON = {}
    pairs = {k: rng.choice(v) for k, v in (("team", TEAMS), ("trial", ["x", "y", "w"]))}
    labels = dict(rng.sample(sorted(pairs.items()), rng.randrange(3)))
    selector: JSON = {"matchLabels": labels} if labels else {}
    if rng.random() < 0.3:
        selector["matchExpressions"] = [
            {"key": "team", "operator": rng.choice(["In", "NotIn"]), "values": ["ml", "db"]}
        ]
    if selector:
        demand["podSelector"] = selector
    if rng.random() < 0.25:
        demand["namespaceSelector"] = {"matchLabels": {"gpu": "yes"}}
    if rng.random() < 0.1:
        demand["schedulerName"] = "other"
    return demand


@pytest.mark.parametrize("seed", range(5))
def test_routes_filed_by_label_wake_the_pools_every_route_would(seed: int) -> None:
    rng = random.Random(seed)
    raws = [pool_manifest(f"q{i}", demand=random_demand(rng)) for i in range(12)]
    routes = index_routes(pool_route(("ns", r["metadata"]["name"]), "wl", r) for r in raws)
    every = replace(routes, by_pair=None)
    assert routes.by_pair  # some routes are filed by a pair
    woken = 0
    for i in range(300):
        pod = random_pod(rng, f"p{i}")
        labels = NAMESPACES.get(pod["metadata"]["namespace"])
        found = pod_demand(pod, routes, labels)
        assert found == pod_demand(pod, every, labels)
        woken += len(found)
    assert woken  # the pods did count for some pools


def random_pool(rng: random.Random, i: int, secrets: list[str]) -> GPUCellPool:
    raw = pool_manifest(
        f"q{i}",
        secret=rng.choice(secrets),
        mode=rng.choice(["Active", "Active", "Shadow"]),
        demand=random_demand(rng),
        priority=rng.randrange(3),
    )
    raw["spec"]["autoscaling"]["enabled"] = rng.random() < 0.9
    if rng.random() < 0.1:
        raw["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    if rng.random() < 0.3:
        raw["spec"]["autoscaling"]["cellShape"]["gpuMemoryMiB"] = 49152
    return GPUCellPool.model_validate(raw)


def same_cluster(secrets: Mapping[str, str]) -> Any:
    return lambda cluster: secrets.get(str(cluster), cluster)


@pytest.mark.parametrize("seed", range(6))
def test_the_rival_board_shares_every_pod_as_the_full_list_does(seed: int) -> None:
    rng = random.Random(seed)
    secrets = ["wl-a", "wl-b", "wl-c"]
    reached = {"wl-a": "uid-1", "wl-b": "uid-1"}  # two Secrets to one cluster; wl-c its own
    identity = same_cluster(reached)
    pools = {i: random_pool(rng, i, secrets) for i in range(14)}
    board = RivalBoard()

    def secret(pool: GPUCellPool) -> str:
        return pool.spec.workload_cluster.kubeconfig_secret_ref.name

    for i, pool in pools.items():
        board.put(("ns", f"q{i}"), secret(pool), pool)
    pods = [random_pod(rng, f"p{j}") for j in range(80)]
    seen = {p["metadata"]["uid"]: float(j) for j, p in enumerate(pods)}
    shared = 0
    for change in range(4):
        for pool in pools.values():
            pending, _ = pending_for_pool(pool, pods, NAMESPACES, seen)
            others = [p for p in pools.values() if identity(secret(p)) == identity(secret(pool))]
            full = share_pending(pool, pending, pods, NAMESPACES, rivals_of(pool, others))
            kept = board.rivals(secret(pool), identity)
            assert share_pending(pool, pending, pods, NAMESPACES, kept) == full
            shared += len(full.given_away) + len(full.taken)
        i = rng.randrange(len(pools))  # a spec change (a new generation), or a pool gone
        if change == 2:
            board.remove(("ns", f"q{i}"))
            del pools[i]
        else:
            pools[i] = random_pool(rng, i, secrets)
            board.put(("ns", f"q{i}"), secret(pools[i]), pools[i])
    assert shared  # pools did share pods (the rule was exercised, not only skipped)


def test_the_board_keeps_its_index_while_no_rival_changes() -> None:
    identity = same_cluster({})
    board = RivalBoard()
    raw = pool_manifest("a", demand={"podSelector": {"matchLabels": {"team": "ml"}}})
    board.put(("ns", "a"), "wl", GPUCellPool.model_validate(raw))
    board.put(("ns", "b"), "wl", GPUCellPool.model_validate(pool_manifest("b")))
    first = board.rivals("wl", identity)
    assert board.rivals("wl", identity) is first
    status_write = copy.deepcopy(raw)
    status_write["status"] = {"desiredReplicas": 3}  # a new object, the same Rival
    board.put(("ns", "a"), "wl", GPUCellPool.model_validate(status_write))
    assert board.rivals("wl", identity) is first
    raw["spec"]["autoscaling"]["priority"] = 5
    board.put(("ns", "a"), "wl", GPUCellPool.model_validate(raw))
    changed = board.rivals("wl", identity)
    assert changed is not first
    assert [r.option.priority for r in changed.by_pair[("team", "ml")]] == [5]
    assert [r.option.key for r in changed.near(frozenset(), "ns/b")] == []  # b: itself only
    assert board.rivals("wl", same_cluster({"wl": "elsewhere"})).by_pair == changed.by_pair


class IndexedWorkload(FakeWorkload):
    """The fake cluster, read through a ``PodIndexer`` fed with every change (as the app's
    routed view is), instead of ``index_pods`` over every pod at each decision."""

    def __init__(self) -> None:
        super().__init__()
        self.indexer = PodIndexer()

    def put(self, pod: JSON | None, key: str) -> None:
        if pod is None:
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        self.indexer.apply(key, pod)

    def snapshot(self, pool: GPUCellPool) -> WorkloadSnapshot:
        return WorkloadSnapshot(True, (), self.nodes, {}, pod_index=self.indexer.index())


def decisions(scaler: Autoscaler) -> dict[tuple[str, str], tuple[Any, ...]]:
    out = {}
    for key, state in scaler.pools.items():
        d = state.last_decision
        assert d is not None
        out[key] = (d.desired_replicas, d.reason, d.message, d.victims, d.pending_asks, state.share)
    return out


@pytest.mark.parametrize("seed", range(3))
async def test_a_loop_on_the_kept_index_decides_as_one_reindexing_every_pod(seed: int) -> None:
    rng = random.Random(seed)
    clock = VirtualClock()
    settings = LoopSettings(tick_s=3600.0, resync_s=3600.0)
    full, kept = FakeWorkload(), IndexedWorkload()
    scalers = [Autoscaler(w, FakeWriter(), clock, settings=settings) for w in (full, kept)]
    try:
        for i in range(8):
            raw = pool_manifest(f"q{i}", demand=random_demand(rng), priority=rng.randrange(2))
            for scaler in scalers:
                scaler.pool_event("ADDED", copy.deepcopy(raw))
        where: dict[str, str] = {}
        for _ in range(6):
            for j in rng.sample(range(120), 30):
                key, pod = change(rng, f"p{j}", where)
                kept.put(pod, key)
                if pod is None:
                    del full.pods[key]
                else:
                    full.pods[key] = pod
            await clock.advance(1.0)
            for scaler in scalers:
                for pool in list(scaler.pools):
                    await scaler.decide_once(pool)
            assert decisions(scalers[0]) == decisions(scalers[1])
        assert any(d[4] for d in decisions(scalers[1]).values())  # pods were counted
    finally:
        for scaler in scalers:
            await scaler.close()
