"""Workload events routed to the pools they concern (``autoscaler.routing``).

What these prove: a pending pod wakes only the pools whose demand selection it matches; a bound
pod wakes the pool owning its Node (by status row, cell name or pool label), and the
provisioner only for that; a binding wakes both the pool that counted the pod as demand and the
Node's pool; a deletion is routed by the object last seen; a Node wakes its pool; a Namespace
wakes only pools with a namespace selector; a rebuilt cluster or an unknown object wakes every
pool of that cluster and none of another cluster's; the pod index kept from the events holds
what a rebuild from the same pods would.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable
from typing import Any

from autoscaler.pod_index import PodIndex, index_pods
from autoscaler.routing import WorkloadRouter, pool_route
from gpucellpool.api.pool import POOL_LABEL
from tests.unit.test_loop_fakes import pending_pod, pool_manifest, with_cells

JSON = dict[str, Any]
WL = "wl"


def pool(name: str, trial: str, cells: int = 2, **demand: Any) -> JSON:
    raw = pool_manifest(name, demand={"podSelector": {"matchLabels": {"trial": trial}}, **demand})
    rows = [{"name": f"{name}-{i}", "index": i, "phase": "Ready"} for i in range(cells)]
    return with_cells(raw, rows)


def router(*pools: JSON, cluster: str = WL) -> WorkloadRouter:
    out = WorkloadRouter()
    for raw in pools:
        key = (raw["metadata"]["namespace"], raw["metadata"]["name"])
        out.pool_changed(pool_route(key, cluster, raw))
    return out


def pod(name: str, trial: str) -> JSON:
    return {**pending_pod(name, trial=trial), "kind": "Pod"}


def bound(p: JSON, node: str) -> JSON:
    out = copy.deepcopy(p)
    out["spec"]["nodeName"] = node
    out["status"] = {"phase": "Running"}
    return out


def node(name: str, **labels: str) -> JSON:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}}


A, B = ("ns", "a"), ("ns", "b")


def test_pending_pod_wakes_only_the_pool_it_is_demand_for() -> None:
    r = router(pool("a", "ta"), pool("b", "tb"))
    wake = r.event(WL, "ADDED", pod("x", "ta"))
    assert wake.decide == {A} and not wake.act
    assert not r.event(WL, "ADDED", pod("y", "nobody")).decide


def test_bound_pod_wakes_the_owner_of_its_node_for_both_loops() -> None:
    r = router(pool("a", "ta"), pool("b", "tb"))
    wake = r.event(WL, "ADDED", bound(pod("x", "unrelated"), "b-1"))
    assert wake.decide == {B} and wake.act == {B}


def test_binding_wakes_the_pool_that_counted_it_and_the_nodes_pool() -> None:
    r = router(pool("a", "ta"), pool("b", "tb"))
    pending = pod("x", "ta")
    r.event(WL, "ADDED", pending)
    wake = r.event(WL, "MODIFIED", bound(pending, "b-0"))
    assert wake.decide == {A, B} and wake.act == {B}


def test_deletion_is_routed_by_the_object_last_seen() -> None:
    r = router(pool("a", "ta"), pool("b", "tb"))
    pending = pod("x", "ta")
    r.event(WL, "ADDED", pending)
    relabelled = copy.deepcopy(pending)
    relabelled["metadata"]["labels"] = {"trial": "tb"}
    assert r.event(WL, "MODIFIED", relabelled).decide == {A, B}
    assert r.event(WL, "DELETED", relabelled).decide == {B}  # the memo now holds "tb"
    assert not r.event(WL, "DELETED", pod("never-seen", "nobody")).decide


def test_pod_on_a_node_named_by_status_row_or_labelled_for_the_pool() -> None:
    raw = pool("a", "ta")
    raw["status"]["cells"][0]["nodeName"] = "gpu-host-7"  # a row whose Node has another name
    r = router(raw, pool("b", "tb"))
    assert r.event(WL, "ADDED", bound(pod("x", "-"), "gpu-host-7")).act == {A}
    r.event(WL, "ADDED", node("renamed", **{POOL_LABEL: "b"}))
    assert r.event(WL, "ADDED", bound(pod("y", "-"), "renamed")).act == {B}
    assert not r.event(WL, "ADDED", bound(pod("z", "-"), "foreign")).decide


def test_node_events_wake_the_pool_whose_cell_it_is() -> None:
    r = router(pool("a", "ta"), pool("b", "tb"))
    assert r.event(WL, "MODIFIED", node("a-1")).act == {A}
    assert r.event(WL, "ADDED", node("a-7")).decide == {A}  # joining, no row yet
    assert r.event(WL, "ADDED", node("joined", **{POOL_LABEL: "b"})).act == {B}
    assert not r.event(WL, "MODIFIED", node("system-0")).decide
    assert r.event(WL, "DELETED", node("b-0")).act == {B}


def test_namespace_event_wakes_only_pools_with_a_namespace_selector() -> None:
    selecting = pool("b", "tb", namespaceSelector={"matchLabels": {"team": "ml"}})
    r = router(pool("a", "ta"), selecting)
    ns = {"kind": "Namespace", "metadata": {"name": "default", "labels": {"team": "ml"}}}
    wake = r.event(WL, "ADDED", ns)
    assert wake.decide == {B} and not wake.act
    assert r.event(WL, "ADDED", pod("x", "tb")).decide == {B}  # its namespace now matches


def test_pod_in_unknown_namespace_is_no_demand_for_a_namespace_selector() -> None:
    selecting = pool("b", "tb", namespaceSelector={"matchLabels": {"team": "ml"}})
    r = router(selecting)
    assert not r.event(WL, "ADDED", pod("x", "tb")).decide


def test_rebuilt_cluster_or_unknown_object_wakes_that_clusters_pools_only() -> None:
    r = router(pool("a", "ta"), pool("b", "tb"))
    r.pool_changed(pool_route(("ns", "c"), "other", pool("c", "tc")))
    assert r.event(WL, "SECRET", {}).decide == {A, B}
    assert r.event(WL, "SECRET", {}).act == {A, B}
    assert r.event("other", "MODIFIED", {"kind": "Lease"}).decide == {("ns", "c")}


def test_routes_follow_pool_changes_and_deletions() -> None:
    r = router(pool("a", "ta", cells=1))
    assert not r.event(WL, "ADDED", bound(pod("x", "-"), "gpu-host")).decide
    grown = pool("a", "ta", cells=1)
    grown["status"]["cells"].append({"name": "a-1", "index": 1, "nodeName": "gpu-host"})
    r.pool_changed(pool_route(A, WL, grown))
    assert r.event(WL, "MODIFIED", bound(pod("x", "-"), "gpu-host")).decide == {A}
    r.pool_deleted(A)
    assert not r.event(WL, "MODIFIED", bound(pod("x", "-"), "a-0")).decide


def test_invalid_demand_selection_reads_as_the_default() -> None:
    raw = pool("a", "ta")
    raw["spec"]["autoscaling"]["demand"] = {"podSelector": "not a selector"}
    route = pool_route(A, WL, raw)
    assert route.demand.pod_selector is None and route.node_names == {"a-0", "a-1"}


def _content(index: PodIndex) -> tuple[list[str], dict[str, list[str]]]:
    def names(pods: Iterable[JSON]) -> list[str]:
        return sorted(p["metadata"]["name"] for p in pods)

    return names(index.unbound), {n: names(p) for n, p in index.by_node.items()}


def index_of(r: WorkloadRouter, cached: int) -> PodIndex:
    index = r.pod_index(WL, cached)
    assert index is not None
    return index


def test_pod_index_follows_events_like_a_rebuild() -> None:
    rng = random.Random(7)
    r, live = router(pool("a", "ta")), dict[str, JSON]()
    handed_out = r.pod_index(WL, 0)
    assert handed_out is not None
    for step in range(400):
        name = f"p{rng.randrange(30)}"
        if name in live and rng.random() < 0.3:
            r.event(WL, "DELETED", live.pop(name))
            continue
        fresh = pod(name, "ta")
        roll = rng.random()
        if roll < 0.4:
            fresh = bound(fresh, f"a-{rng.randrange(3)}")
        elif roll < 0.5:
            fresh["status"] = {"phase": "Succeeded"}
        r.event(WL, "MODIFIED" if name in live else "ADDED", fresh)
        live[name] = fresh
        if step % 50 == 0:
            assert _content(index_of(r, len(live))) == _content(index_pods(live.values()))
    assert _content(index_of(r, len(live))) == _content(index_pods(live.values()))
    assert r.pod_index(WL, len(live) + 1) is None  # not what the cache holds: rebuild
    assert handed_out.unbound == () and not handed_out.by_node  # snapshots never change
    r.event(WL, "SECRET", {})
    assert r.pod_index(WL, len(live)) is None  # forgotten until the new caches report again


def test_a_node_heartbeat_wakes_nobody_a_real_change_wakes_its_pool() -> None:
    r = router(pool("a", "ta"))
    first = node("a-1")
    first["status"] = {
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t0"}]
    }
    assert r.event(WL, "ADDED", first).act == {A}
    beat = copy.deepcopy(first)
    beat["metadata"]["resourceVersion"] = "2"
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "t1"
    wake = r.event(WL, "MODIFIED", beat)
    assert not wake.act and not wake.decide
    not_ready = copy.deepcopy(beat)
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert r.event(WL, "MODIFIED", not_ready).act == {A}
    cordoned = copy.deepcopy(not_ready)
    cordoned["spec"] = {"unschedulable": True}
    assert r.event(WL, "MODIFIED", cordoned).decide == {A}
    registered = copy.deepcopy(cordoned)
    registered["metadata"].setdefault("annotations", {})["hami.io/node-nvidia-register"] = "x"
    assert r.event(WL, "MODIFIED", registered).act == {A}
