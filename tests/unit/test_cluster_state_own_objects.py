"""``ClusterState``: the sweep's lists and the physical GPU ledger come from watches too.

What this proves: SwiftSeedProfiles are read from the SwiftSeedProfile watch of their
namespace; a Secret list (the sweeps' lists select on the pool-id label) from the watch of the
Secrets the operator labels, in a namespace where it may list Secrets, and from nothing
elsewhere (a GET); a Secret read by name is never answered by that watch (the join template is
the pool author's, not labelled); the cluster-scoped ResourceSlices and SwiftGPUNodes from a
mirror started by their first read, and only a list of the whole collection is answered there;
and ``own_object_watches`` builds the label-selected, namespaced Secret watches, in the
namespaces ``served_secret_namespaces`` names (never all of them).
"""

from __future__ import annotations

from typing import Any, cast

from gpucellpool.kube.cache import ListWatch, Query, WatchCache
from gpucellpool.kube.workload import WorkloadClusters
from gpucellpool.operator.provisioner_wiring import (
    ClusterState,
    InventoryMirrors,
    collection_path,
    own_object_watches,
)
from gpucellpool.operator.settings import Settings, served_secret_namespaces
from provisioner.fsm.identity import POOL_ID_LABEL

NO_SOURCE = cast(ListWatch, object())  # the caches are never run here


def _clusters() -> WorkloadClusters:
    return WorkloadClusters(NO_SOURCE, cast(Any, None), lambda *_: None)


def test_seed_profiles_and_labelled_secrets_come_from_their_namespace_watches() -> None:
    seeds, secrets = own_object_watches(NO_SOURCE, ("team", "other"), ("team",))
    state = ClusterState(("team", "other"), list, _clusters(), list, lambda: seeds, lambda: secrets)
    assert state.store("SwiftSeedProfile", "other", "") is seeds[1]
    assert state.store("SwiftSeedProfile", "team", "p-0-seed") is seeds[0]
    assert state.store("Secret", "team", "") is secrets["team"]
    assert state.store("Secret", "other", "") is None  # may not list Secrets there: a GET
    assert state.store("Secret", "team", "join-template") is None  # by name: a GET
    query = secrets["team"].query
    assert query.path == collection_path("team", "/api/v1/secrets")
    assert query.label_selector == POOL_ID_LABEL


async def test_the_gpu_ledgers_are_mirrored_from_their_first_read() -> None:
    inventory = InventoryMirrors(NO_SOURCE)
    state = ClusterState(("team",), list, _clusters(), inventory=inventory.store)
    try:
        assert inventory.caches == {}
        slices = state.store("ResourceSlice", None, "")
        assert isinstance(slices, WatchCache) and slices.query == Query(
            "/apis/resource.k8s.io/v1/resourceslices"
        )
        assert state.store("ResourceSlice", None, "") is slices  # one mirror
        assert set(inventory.caches) == {"ResourceSlice"}  # SwiftGPUNodes not watched
        assert state.store("ResourceSlice", None, "slice-a") is None  # by name: a GET
        assert state.store("ResourceClaim", None, "") is None  # namespaced claims: a GET
        nodes = state.store("SwiftGPUNode", None, "")
        assert isinstance(nodes, WatchCache)
        assert nodes.query.path == "/apis/gpu.kubeswift.io/v1alpha1/swiftgpunodes"
    finally:
        await inventory.close()


def test_the_labelled_secrets_are_watched_only_where_the_operator_may_list_secrets() -> None:
    def where(**kw: Any) -> tuple[str, ...]:
        return served_secret_namespaces(Settings(identity="a", lease_namespace="ops", **kw))

    assert where(served_namespaces=("team",)) == ("team",)  # the chart always names them
    assert where(pool_namespaces=("a", "b")) == ("a", "b")  # watched = served
    assert where() == ()  # every namespace: no cluster-wide Secret watch, lists stay GETs
