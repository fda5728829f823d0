"""``ClusterState``: which of the composition root's caches answers which provisioner read.

What this proves: a pool (or SwiftGuest) is read from the pool (SwiftGuest) watch of its
namespace (or the all-namespaces one), a kubeconfig Secret from the Secret watch of the
workload cluster it names, a workload Node from that cluster's current Nodes cache, a kubelet
Lease from its node Lease cache (the first such read asks the cluster to mirror them),
ResourceSlices and ResourceClaims from its DRA caches when it has them, Pods from its Pods
cache; anything
else, or a cluster not yet known, has no cache (the read stays a GET). A cluster's liveness is
asked of the cluster the Secret names.
"""

from __future__ import annotations

from typing import Any, cast

from gpucellpool.kube.cache import ListWatch, Query, WatchCache
from gpucellpool.kube.workload import ClusterKey, WorkloadCluster, WorkloadClusters
from gpucellpool.operator.provisioner_wiring import ClusterState

NO_SOURCE = cast(ListWatch, object())  # the caches are never run here


def _clusters() -> tuple[WorkloadClusters, WorkloadCluster]:
    clusters = WorkloadClusters(NO_SOURCE, cast(Any, None), lambda *_: None)
    key = ClusterKey("team", "kubeconfig")
    cluster = WorkloadCluster(key, NO_SOURCE, cast(Any, None), lambda *_: None)
    clusters.clusters[key] = cluster  # as ensure() would, without starting its watch
    return clusters, cluster


def test_pools_come_from_their_namespace_watch() -> None:
    team, other = WatchCache(NO_SOURCE, Query("a")), WatchCache(NO_SOURCE, Query("b"))
    clusters, _ = _clusters()
    state = ClusterState(("team", "other"), lambda: [team, other], clusters)
    assert state.store("GPUCellPool", "other", "p") is other
    assert state.store("GPUCellPool", "team", "p") is team
    assert state.store("GPUCellPool", "elsewhere", "p") is None
    everywhere = ClusterState((None,), lambda: [team], clusters)
    assert everywhere.store("GPUCellPool", "elsewhere", "p") is team
    assert state.store("GPUCellPool", "team", "") is team  # the collection, for a list


def test_swiftguests_come_from_their_namespace_watch() -> None:
    team, other = WatchCache(NO_SOURCE, Query("a")), WatchCache(NO_SOURCE, Query("b"))
    clusters, _ = _clusters()
    state = ClusterState(("team", "other"), list, clusters, lambda: [team, other])
    assert state.store("SwiftGuest", "other", "g-0") is other
    assert state.store("SwiftGuest", "team", "") is team
    assert state.store("SwiftGuest", "elsewhere", "g-0") is None


def test_the_kubeconfig_secret_and_nodes_come_from_the_workload_cluster() -> None:
    clusters, cluster = _clusters()
    state = ClusterState(("team",), list, clusters)
    assert state.store("Secret", "team", "kubeconfig") is cluster.secret
    assert state.store("Secret", "team", "join-template") is None
    assert state.store("SwiftGuest", "team", "kubeconfig") is None  # no SwiftGuest watch given
    nodes = state.workload_reads("team", "kubeconfig")
    assert nodes("Node", None, "cell-0") is None  # no client yet: no Nodes cache
    cluster.nodes = WatchCache(NO_SOURCE, Query("/api/v1/nodes"))  # a (re)built connection
    assert nodes("Node", None, "cell-0") is cluster.nodes
    assert state.workload_reads("team", "unknown")("Node", None, "cell-0") is None


def test_node_leases_come_from_the_workload_clusters_lease_cache() -> None:
    clusters, cluster = _clusters()
    reads = ClusterState(("team",), list, clusters).workload_reads("team", "kubeconfig")
    assert not cluster.lease_watch
    assert reads("Lease", "kube-node-lease", "cell-0") is None  # no client yet: GET
    assert cluster.lease_watch  # the read asked for the Lease watch
    cluster.leases = WatchCache(NO_SOURCE, Query("/leases"))  # as a (re)built connection has
    assert reads("Lease", "kube-node-lease", "cell-0") is cluster.leases
    assert reads("Lease", "elsewhere", "cell-0") is None  # only the kubelets' Leases


def test_dra_objects_come_from_the_clusters_dra_caches_once_it_mirrors_them() -> None:
    clusters, cluster = _clusters()
    reads = ClusterState(("team",), list, clusters).workload_reads("team", "kubeconfig")
    assert reads("ResourceSlice", None, "") is None  # not in DRA mode: GET
    cluster.slices = WatchCache(NO_SOURCE, Query("/resourceslices"))
    cluster.claims = WatchCache(NO_SOURCE, Query("/resourceclaims"))
    assert reads("ResourceSlice", None, "") is cluster.slices
    assert reads("ResourceClaim", None, "") is cluster.claims
    assert reads("DeviceClass", None, "hami") is None
    assert reads("Pod", None, "") is None  # no client yet: no Pods cache
    cluster.pods = WatchCache(NO_SOURCE, Query("/api/v1/pods"))
    assert reads("Pod", None, "") is cluster.pods


def test_liveness_is_the_named_clusters() -> None:
    clusters, cluster = _clusters()
    state = ClusterState(("team",), list, clusters)
    asked: list[str | None] = []

    def live_on(kubeconfig: str | None) -> bool:
        asked.append(kubeconfig)
        return True

    cluster.live_on = live_on  # type: ignore[method-assign]
    assert state.workload_live("team", "kubeconfig", "a2M=")
    assert asked == ["a2M="]
    assert not state.workload_live("team", "unknown", "a2M=")
