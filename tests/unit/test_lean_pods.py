"""The workload Pods cache keeps each pod projected onto what the operator reads (kube.lean).

What these prove: every reader of cached pods (demand and its placement constraints, DRA
claims, pool demand selection, the pod index and HAMi usage, gang bookings, event routing, the
provisioner's GPU test and drain view, its cached-read selectors) gives the same answer on a
full pod as the apiserver sends it and on its projection, for pods of every kind they tell apart
(pending, bound, DaemonSet, mirror, terminating, finished, DRA, malformed); the projection drops
what nobody reads and one object stands for equal values of many pods; the shared memo stays
bounded; a workload cluster's Pods cache projects listed and watched pods.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from autoscaler.gang_pods import consumed_request, placed_consumers
from autoscaler.observe import usage_from_pods
from autoscaler.pod_index import index_pods
from autoscaler.policy.demand import (
    constraints_from_pod,
    is_pending_hami_pod,
    pending_pod_from_manifest,
    pod_asks,
)
from autoscaler.policy.dra_demand import claim_names, waits_on_claims
from autoscaler.policy.pool_demand import counts_as_demand, pending_for_pool
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.kube.cache import Query
from gpucellpool.kube.lean import LAST_APPLIED, Flyweights, LeanNodes, LeanPods
from gpucellpool.kube.workload import ClusterKey, WorkloadClusters
from provisioner.cached_reads import selector_match
from provisioner.drainer import _pod as drain_view
from provisioner.workload import _active, _uses_gpu
from tests.unit.test_lean_objects import Cluster, Infra, until
from tests.unit.test_loop_fakes import pool_manifest
from tests.unit.test_routing import WL, router
from tests.unit.test_routing import pool as routed_pool

JSON = dict[str, Any]
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "50"}


def full_pod(name: str, node: str = "", phase: str = "Pending") -> JSON:
    """A pod as the apiserver sends it, with what ``kubectl`` and the kubelet add."""
    container = {
        "name": "main",
        "image": "registry.example/cuda:12",
        "command": ["python", "train.py"],
        "env": [{"name": "EPOCHS", "value": "10"}],
        "resources": {"limits": dict(GPU), "requests": dict(GPU)},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }
    init = {**container, "name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    owners = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-rs"}]
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "resourceVersion": "42",
            "generation": 1,
            "creationTimestamp": "2026-12-02T09:00:00Z",
            "labels": {"trial": "t", "app": "train"},
            "annotations": {LAST_APPLIED: '{"kind":"Pod"}', "team": "a"},
            "ownerReferences": owners,
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "containers": [container],
            "initContainers": [init],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "nodeName": node,
            "schedulerName": "hami-scheduler",
            "nodeSelector": {"gpu": "a100"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["z1", "z2"]}
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
        },
        "status": {
            "phase": phase,
            "conditions": [unschedulable] if phase == "Pending" and not node else [],
            "qosClass": "Burstable",
            "podIP": "10.0.0.7",
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0}],
        },
    }


def bound(name: str, node: str, phase: str = "Running") -> JSON:
    pod = full_pod(name, node, phase)
    pod["metadata"]["annotations"].update(
        {
            "hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,8000,50:;",
            "hami.io/vgpu-node": node,
            "autoscaling.x-k8s.io/consume-provisioning-request": "req-1",
        }
    )
    return pod


def dra_pod(name: str) -> JSON:
    pod = full_pod(name)
    pod["spec"]["schedulerName"] = "default-scheduler"
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    del pod["spec"]["initContainers"]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return pod


def variants() -> list[JSON]:
    """Pods of every kind the readers tell apart."""
    daemon = bound("daemon", "n1")
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "ds", "uid": "d"}]
    mirror = bound("mirror", "n1")
    mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] = "abc"
    leaving = bound("leaving", "n2")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-02T09:10:00Z"
    plain = bound("plain", "n2")
    plain["spec"]["containers"][0]["resources"] = {}
    plain["spec"].pop("initContainers")
    plain["metadata"]["annotations"] = {}
    bad_memory = full_pod("bad-memory")
    bad_memory["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "lots"
    bad_containers = full_pod("bad-containers")
    bad_containers["spec"]["containers"] = "main"
    bad_tolerations = full_pod("bad-tolerations")
    bad_tolerations["spec"]["tolerations"] = {"key": "gpu"}
    bad_spec = full_pod("bad-spec")
    bad_spec["spec"] = ["not", "an", "object"]
    return [
        full_pod("pending"),
        bound("running", "n1"),
        bound("done", "n1", "Succeeded"),
        daemon,
        mirror,
        leaving,
        plain,
        dra_pod("claims"),
        bad_memory,
        bad_containers,
        bad_tolerations,
        bad_spec,
    ]


def project_all(pods: list[JSON]) -> list[JSON]:
    trim = LeanPods()
    return [trim(copy.deepcopy(p)) for p in pods]


_selected = selector_match("app=train", "spec.nodeName=n1")
assert _selected is not None
SELECTED = _selected

PER_POD: dict[str, Callable[[JSON], object]] = {
    "pod_asks": pod_asks,
    "pending_pod_from_manifest": lambda p: pending_pod_from_manifest(p, 1.0),
    "is_pending_hami_pod": is_pending_hami_pod,
    "constraints_from_pod": constraints_from_pod,
    "waits_on_claims": lambda p: waits_on_claims(p, "default-scheduler"),
    "claim_names": claim_names,
    "consumed_request": consumed_request,
    "uses_gpu": _uses_gpu,
    "active": _active,
    "drain_view": lambda p: drain_view(p, True),
    "cached_read": SELECTED,
}


def outcome(read: Callable[[JSON], object], pod: JSON) -> object:
    """What ``read`` returns, or the type of what it raises (a reader that fails on a full pod
    must fail the same way on its projection)."""
    try:
        return read(pod)
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize("reader", sorted(PER_POD))
def test_each_reader_reads_the_same_from_the_projection(reader: str) -> None:
    full = variants()
    for before, after in zip(full, project_all(full), strict=True):
        read = PER_POD[reader]
        assert outcome(read, after) == outcome(read, before), before["metadata"]["name"]


def test_pool_level_readers_read_the_same_from_the_projection() -> None:
    full = variants()
    lean = project_all(full)
    demand = {"podSelector": {"matchLabels": {"trial": "t"}}}
    pool = GPUCellPool.model_validate(pool_manifest("p", ns="team-a", demand=demand))
    seen = {p["metadata"]["uid"]: 1.0 for p in full}
    labels = {"team-a": {"kubernetes.io/metadata.name": "team-a"}}
    pending, bad = pending_for_pool(pool, full, labels, seen)
    assert pending_for_pool(pool, lean, labels, seen) == (pending, bad)
    assert [p.key for p in pending] == ["team-a/pending"] and len(bad) == 3  # not vacuous
    selection = pool.spec.autoscaling.demand
    assert [counts_as_demand(p, selection, labels["team-a"]) for p in lean] == [
        counts_as_demand(p, selection, labels["team-a"]) for p in full
    ]

    def names(pods: Any) -> list[str]:
        return [p["metadata"]["name"] for p in pods]

    full_index, lean_index = index_pods(full), index_pods(lean)
    assert names(lean_index.unbound) == names(full_index.unbound)
    by_node = {n: names(ps) for n, ps in lean_index.by_node.items()}
    assert by_node == {n: names(ps) for n, ps in full_index.by_node.items()}
    for node, pods in full_index.by_node.items():
        assert usage_from_pods(lean_index.by_node[node], 2) == usage_from_pods(pods, 2)
    assert placed_consumers(lean_index.by_node) == placed_consumers(full_index.by_node)
    assert placed_consumers(full_index.by_node) == {("team-a", "req-1"): 4}  # not vacuous


def test_event_routing_reads_the_same_from_the_projection() -> None:
    full = variants()
    lean = project_all(full)
    pools = (routed_pool("a", "t"), routed_pool("b", "other"))
    full_router, lean_router = router(*pools), router(*pools)
    wakes = [
        (lean_router.event(WL, "ADDED", after), full_router.event(WL, "ADDED", before))
        for before, after in zip(full, lean, strict=True)
    ]
    assert all(a == b for a, b in wakes)
    assert any(b.decide for _, b in wakes)  # the pending pods wake pool a


def test_the_projection_drops_what_no_reader_uses_and_shares_equal_parts() -> None:
    trim = LeanPods()
    first, second = trim(bound("one", "n1")), trim(bound("two", "n1"))
    assert set(first) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert "managedFields" not in first["metadata"] and "generation" not in first["metadata"]
    assert LAST_APPLIED not in first["metadata"]["annotations"]
    assert set(first["spec"]["containers"][0]) == {"name", "resources"}
    for dropped in ("volumes", "restartPolicy", "dnsPolicy", "securityContext"):
        assert dropped not in first["spec"]
    assert set(first["status"]) == {"phase", "conditions"}
    # one object for the equal parts of two pods; their own parts stay their own
    assert first["spec"]["tolerations"] is second["spec"]["tolerations"]
    assert first["metadata"]["annotations"] is second["metadata"]["annotations"]
    assert (
        first["spec"]["containers"][0]["resources"] is second["spec"]["containers"][0]["resources"]
    )
    assert (first["metadata"]["name"], second["metadata"]["name"]) == ("one", "two")


def test_the_shared_memo_is_bounded_and_tells_types_apart() -> None:
    shared = Flyweights(limit=3)
    a = shared.share({"k": "v"})
    assert shared.share({"k": "v"}) is a
    assert shared.share("['x']") == "['x']" and shared.share(["x"]) == [
        "x"
    ]  # same repr, kept apart
    assert len(shared) == 3
    shared.share({"k": "w"})  # full: starts over
    assert len(shared) == 1
    assert shared.share({"k": "v"}) is not a  # forgotten, not wrong


class FullPods(Cluster):
    """A workload cluster whose Pods list holds one full pod and whose watch adds another."""

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        if query.path == "/api/v1/pods":
            return [full_pod("listed")], "5"
        return await super().list(query)

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        if query.path == "/api/v1/pods":
            yield {"type": "ADDED", "object": bound("watched", "n1")}
        await asyncio.Event().wait()


async def test_a_workload_clusters_pods_cache_holds_projected_pods() -> None:
    async def factory(config: Mapping[str, Any]) -> FullPods:
        return FullPods(config)

    clusters = WorkloadClusters(Infra(), factory, lambda *a: None)
    cluster = clusters.ensure(ClusterKey("ns", "wl"))
    try:
        await until(lambda: cluster.pods is not None and len(cluster.pods.objects) == 2)
        assert cluster.pods is not None
        trim = LeanPods()
        expected = {"team-a/listed": trim(full_pod("listed"))}
        expected["team-a/watched"] = trim(bound("watched", "n1"))
        assert cluster.pods.objects == expected
    finally:
        await clusters.close()


def test_nodes_keep_every_field_but_managed_fields_and_share_equal_parts() -> None:
    def node(name: str) -> JSON:
        capacity = {"cpu": "8", "nvidia.com/gpu": "10"}
        return {
            "kind": "Node",
            "metadata": {"name": name, "labels": {"cell": name}, "managedFields": [{}]},
            "spec": {"providerID": f"swift://{name}", "taints": [{"key": "gpu"}]},
            "status": {"capacity": capacity, "allocatable": dict(capacity), "conditions": []},
        }

    trim = LeanNodes()
    first, second = trim(node("a")), trim(node("b"))
    expected = node("a")
    del expected["metadata"]["managedFields"]
    assert first == expected
    assert first["status"]["capacity"] is second["status"]["capacity"]
    assert first["spec"]["taints"] is second["spec"]["taints"]
    assert (first["spec"]["providerID"], second["spec"]["providerID"]) == ("swift://a", "swift://b")
