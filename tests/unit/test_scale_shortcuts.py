"""The decision's shortcuts at scale give the answers of the full scans they replace.

What these prove: a pool's demand read through the unbound pods' label index
(``pod_index.demand_candidates``) equals the demand read from every unbound pod, whatever the
selection, and the router's incremental index labels the same pods as ``index_pods``;
``share_pending`` with the rivals' ``matchLabels`` shortcut gives every pod to the same pool as
without it; a Node's annotation usage is remembered only while its pods are the same tuple
(a changed pod, which the index hands out as a new tuple, is read again), and a pending pod's
parsed asks are reused only while it is the same object with the same first-seen time. These
shortcuts took
a decision at 50 pools / 10,000 pods from ~12 ms to ~4 ms (docs/benchmarks.md, live-scale).
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Any

import pytest

from autoscaler.observe import annotated_usage, usage_from_pods
from autoscaler.pod_index import PodIndexer, demand_candidates, index_pods, label_index
from autoscaler.policy.pool_demand import ParseMemo, pending_for_pool
from autoscaler.policy.types import GPUUsage
from autoscaler.sharing import rivals_of, share_pending
from gpucellpool.api.pool import GPUCellPool
from tests.unit.test_loop_fakes import pending_pod, pool_manifest
from tests.unit.test_pod_index import SELECTIONS, variant

JSON = dict[str, Any]
NARROW = [
    *SELECTIONS,
    {"podSelector": {"matchLabels": {"team": "ml", "absent": "x"}}},
    {"podSelector": {"matchLabels": {"team": "web"}, "matchExpressions": []}},
    {
        "podSelector": {
            "matchLabels": {"team": "ml"},
            "matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}],
        }
    },
]


def key_of(pod: JSON) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("demand", NARROW)
def test_demand_through_the_label_index_equals_the_full_scan(seed: int, demand: JSON) -> None:
    rng = random.Random(seed)
    pods = [variant(rng, i) for i in range(300)]
    pool = GPUCellPool.model_validate(pool_manifest("p", demand=demand))
    labels = {"a": {"gpu": "yes"}, "b": {}}
    seen = {p["metadata"]["uid"]: 1.0 for p in pods}
    index = index_pods(pods)
    selector = pool.spec.autoscaling.demand.pod_selector
    narrowed = demand_candidates(index, selector)
    assert pending_for_pool(pool, narrowed, labels, seen) == pending_for_pool(
        pool, index.unbound, labels, seen
    )
    if selector is not None and selector.match_labels:  # it really narrows
        assert len(narrowed) < len(index.unbound)
    unindexed = replace(index, by_label=None)  # e.g. after the gang controller's placeholders
    assert demand_candidates(unindexed, selector) is unindexed.unbound


def test_the_routers_index_labels_the_same_pods_as_a_full_index() -> None:
    rng = random.Random(7)
    pods = [variant(rng, i) for i in range(200)]
    indexer = PodIndexer()
    for pod in pods:
        indexer.apply(key_of(pod), pod)
    for pod in pods[:50]:  # some bind, some go
        moved = dict(pod, spec={**pod["spec"], "nodeName": "n9"})
        indexer.apply(key_of(pod), moved if rng.random() < 0.5 else None)
    built = indexer.index()
    assert built.by_label is not None
    again = label_index(built.unbound)
    assert {k: {key_of(p) for p in v} for k, v in built.by_label.items()} == {
        k: {key_of(p) for p in v} for k, v in again.items()
    }
    assert built.by_label[("team", "ml")]  # the variants carry this label


def test_labels_that_are_not_strings_are_left_out_of_the_index() -> None:
    pod = pending_pod("odd", team="ml")
    pod["metadata"]["labels"]["bad"] = ["not", "a", "string"]
    assert set(label_index([pod])) == {("team", "ml")}


@pytest.mark.parametrize("seed", range(6))
def test_sharing_with_the_match_labels_shortcut_gives_each_pod_to_the_same_pool(
    seed: int,
) -> None:
    rng = random.Random(seed)
    teams = ["ml", "web", "db"]
    pools = []
    for i in range(8):  # some select by team, one by nothing, one by an expression
        if i == 0:
            demand: JSON = {}
        elif i == 1:
            expr = {"key": "team", "operator": "In", "values": ["ml", "db"]}
            demand = {"podSelector": {"matchExpressions": [expr]}}
        else:
            demand = {"podSelector": {"matchLabels": {"team": rng.choice(teams)}}}
        manifest = pool_manifest(f"p{i}", demand=demand, priority=rng.randrange(3))
        pools.append(GPUCellPool.model_validate(manifest))
    pods = [
        pending_pod(f"q{i}", rng.choice([4000, 20000]), team=rng.choice(teams)) for i in range(40)
    ]
    seen = {p["metadata"]["uid"]: float(i) for i, p in enumerate(pods)}
    for pool in pools:
        pending, _ = pending_for_pool(pool, pods, {}, seen)
        rivals = rivals_of(pool, pools)
        assert any(r.match_pairs for r in rivals)
        plain = tuple(replace(r, match_pairs=frozenset()) for r in rivals)
        fast = share_pending(pool, pending, pods, {}, rivals)
        slow = share_pending(pool, pending, pods, {}, plain)
        assert fast == slow


def allocated(node: str, mib: int) -> JSON:
    pod = pending_pod(f"on-{node}-{mib}")
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    plan = f"GPU-{node},NVIDIA,{mib},10:;"
    pod["metadata"]["annotations"] = {"hami.io/vgpu-devices-allocated": plan}
    return pod


def test_a_nodes_usage_is_remembered_only_while_its_pods_are_the_same_tuple() -> None:
    pods = (allocated("memo-n1", 2000), allocated("memo-n1", 3000))
    first = annotated_usage("memo-n1", pods, 1)
    assert first == (GPUUsage(5000, 20, 2),)
    assert annotated_usage("memo-n1", pods, 1) is first  # not parsed again
    changed = (allocated("memo-n1", 2000), allocated("memo-n1", 8000))  # the index's new tuple
    assert annotated_usage("memo-n1", changed, 1) == (GPUUsage(10000, 20, 2),)
    listed = [allocated("memo-n1", 1000)]
    assert annotated_usage("memo-n1", listed, 1) == usage_from_pods(listed, 1)
    listed.append(allocated("memo-n1", 1000))  # a list may change in place: read each time
    assert annotated_usage("memo-n1", listed, 1) == (GPUUsage(2000, 20, 2),)
    assert annotated_usage("memo-n1", changed, 2) == (GPUUsage(10000, 20, 2), GPUUsage())


def test_a_pending_pods_parse_is_reused_only_for_the_same_object_and_first_seen() -> None:
    pool = GPUCellPool.model_validate(pool_manifest("p"))
    pod = pending_pod("w", 8000)
    uid = pod["metadata"]["uid"]
    memo: ParseMemo = {}
    (first,), _ = pending_for_pool(pool, [pod], {}, {uid: 1.0}, memo=memo)
    assert memo[uid][2] is first
    (again,), _ = pending_for_pool(pool, [pod], {}, {uid: 1.0}, memo=memo)
    assert again is first  # not parsed again
    bigger = copy.deepcopy(pod)  # the cache's new object for a changed pod
    bigger["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "16000"
    (changed,), _ = pending_for_pool(pool, [bigger], {}, {uid: 1.0}, memo=memo)
    assert changed.ask.memory_mib == 16000 and first.ask.memory_mib == 8000
    (later,), _ = pending_for_pool(pool, [bigger], {}, {uid: 5.0}, memo=memo)
    assert later.first_seen == 5.0
    assert pending_for_pool(pool, [bigger], {}, {uid: 5.0}) == ((later,), ())  # no memo
