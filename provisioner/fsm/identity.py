"""Names, labels and ownership of cells and their workload Nodes.

Why this module exists: the operator correlates a cell's outer object (SwiftGuest or CAPI
Machine) with its workload-cluster Node purely by name, and proves ownership with labels.
Getting this wrong deletes somebody else's Node, so the rules live in one pure place:

* cell name ``<pool>-<index>``, strict index parsing (anything else is ignored);
* a pool identity that is unique across namespaces (``cells.kubeswift.io/pool-id``, a hash of
  ``<namespace>/<pool>``): the earlier implementation labelled Nodes with the bare pool name,
  so two same-named pools in different namespaces swept each other's Nodes;
* the ownership predicate (foreign Nodes are never touched): this pool's labels, or - when
  Cluster API's bootstrap provider rendered the join data, so the Node registers without our
  labels - the cell's providerID (``kubeswift://<namespace>/<name>``, stamped on the Node by
  CAPKS and on the KubeSwiftMachine / Machine) on a Node that carries no other pool's labels;
* kubelet liveness (Lease renewed < 90 s, else NodeStatus heartbeat < 6 min, else unknown) and
  the stale/orphan reaping decision built on it: unknown never authorises a delete.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

API_GROUP = "cells.kubeswift.io"
POOL_LABEL = f"{API_GROUP}/pool"
POOL_ID_LABEL = f"{API_GROUP}/pool-id"
CELL_LABEL = f"{API_GROUP}/cell"
CELL_INDEX_LABEL = f"{API_GROUP}/cell-index"
INSTANCE_LABEL = f"{API_GROUP}/instance"
TEMPLATE_HASH_ANNOTATION = f"{API_GROUP}/template-hash"
GPU_PREFLIGHT_ANNOTATION = f"{API_GROUP}/gpu-preflight"
RELEASE_GUARD_ANNOTATION = f"{API_GROUP}/release-guard"
POOL_FINALIZER = f"{API_GROUP}/pool"
CELL_DRAIN_FINALIZER = f"{API_GROUP}/cell-drain"
CAPI_CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
KUBESWIFT_PROVIDER_ID_SCHEME = "kubeswift://"

MAX_INDEX_DIGITS = 5
MAX_INDEX = 10**MAX_INDEX_DIGITS - 1
MAX_NAME_LENGTH = 63
MAX_POOL_NAME_LENGTH = MAX_NAME_LENGTH - 1 - MAX_INDEX_DIGITS  # 57
POOL_ID_HEX_CHARS = 16

LEASE_GRACE_S = 90.0
NODE_STATUS_GRACE_S = 360.0

_INDEX_RE = re.compile(r"0|[1-9][0-9]{0,4}")


def cell_name(pool_name: str, index: int) -> str:
    """``<pool>-<index>``; also the guest, Machine, hostname and workload Node name."""
    if not 0 <= index <= MAX_INDEX:
        raise ValueError(f"cell index {index} outside 0..{MAX_INDEX}")
    return f"{pool_name}-{index}"


def parse_cell_index(pool_name: str, name: str) -> int | None:
    """The index of ``name`` if it is exactly ``<pool>-<digits>``, else None.

    Strict: no sign, no leading zeros (``pool-01`` is not cell 1), at most five digits, and
    the prefix must be this pool's name (``pool-a-1`` is not a cell of pool ``pool``).
    """
    prefix = f"{pool_name}-"
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix) :]
    if _INDEX_RE.fullmatch(digits) is None:
        return None
    return int(digits)


def seed_profile_name(cell: str) -> str:
    return f"{cell}-seed"


def bootstrap_secret_name(cell: str) -> str:
    return f"{cell}-bootstrap"


@dataclass(frozen=True, slots=True)
class PoolIdentity:
    """Who a pool is, across namespaces."""

    namespace: str
    name: str

    @property
    def pool_id(self) -> str:
        """Label-safe, namespace-qualified identity: 16 hex chars of SHA-256(ns/name)."""
        digest = hashlib.sha256(f"{self.namespace}/{self.name}".encode()).hexdigest()
        return digest[:POOL_ID_HEX_CHARS]

    def pool_labels(self) -> dict[str, str]:
        """Labels that select every object of this pool (and only this pool)."""
        return {POOL_LABEL: self.name, POOL_ID_LABEL: self.pool_id}

    def cell_labels(self, index: int) -> dict[str, str]:
        """Identity labels on a cell's outer objects and on its workload Node."""
        return {
            **self.pool_labels(),
            CELL_LABEL: cell_name(self.name, index),
            CELL_INDEX_LABEL: str(index),
        }


def is_owned_node(
    labels: Mapping[str, str], pool: PoolIdentity, known_instances: frozenset[str] = frozenset()
) -> bool:
    """Whether a workload Node belongs to ``pool``. Foreign Nodes are never touched.

    Owned iff the pool label names this pool and either the pool-id label matches, or the
    pool-id label is absent (a Node labelled by the earlier implementation) and its
    ``instance`` label is the UID of one of this pool's outer objects (UIDs are unique, so
    that proves ownership without the namespace).
    """
    if labels.get(POOL_LABEL) != pool.name:
        return False
    pool_id = labels.get(POOL_ID_LABEL)
    if pool_id is not None:
        return pool_id == pool.pool_id
    instance = labels.get(INSTANCE_LABEL, "")
    return instance != "" and instance in known_instances


def kubeswift_provider_id(namespace: str, name: str) -> str:
    """The providerID CAPKS gives a KubeSwiftMachine and its Node (guest name = KSM name)."""
    return f"{KUBESWIFT_PROVIDER_ID_SCHEME}{namespace}/{name}"


class OwnershipProof(enum.StrEnum):
    """Why a Node counts as this pool's (or ``NONE``: it does not, and is never touched)."""

    LABELS = "Labels"
    PROVIDER_ID = "ProviderID"
    NONE = "None"


@dataclass(frozen=True, slots=True)
class NodeOwnership:
    proof: OwnershipProof
    detail: str = ""

    @property
    def owned(self) -> bool:
        return self.proof is not OwnershipProof.NONE


def node_ownership(
    labels: Mapping[str, str],
    provider_id: str,
    pool: PoolIdentity,
    known_instances: frozenset[str] = frozenset(),
    expected_provider_id: str = "",
) -> NodeOwnership:
    """Labels first (``is_owned_node``); else the cell's providerID, if the Node claims no pool.

    ``expected_provider_id``: the providerID the infrastructure provider assigned to the cell
    (Machine / KubeSwiftMachine ``spec.providerID``; "" when none is known, e.g. the SwiftGuest
    provisioner). A Node labelled for any pool (another namespace's, another name) is judged by
    its labels alone: a providerID never overrides somebody else's label claim.
    """
    if is_owned_node(labels, pool, known_instances):
        return NodeOwnership(OwnershipProof.LABELS)
    if POOL_LABEL in labels or POOL_ID_LABEL in labels:
        return NodeOwnership(OwnershipProof.NONE, _claimed_by(labels, pool))
    if expected_provider_id and provider_id == expected_provider_id:
        return NodeOwnership(OwnershipProof.PROVIDER_ID)
    if not expected_provider_id:
        return NodeOwnership(OwnershipProof.NONE, "no pool labels")
    if not provider_id:
        detail = f"no pool labels and no providerID yet (the cell's is {expected_provider_id})"
        return NodeOwnership(OwnershipProof.NONE, detail)
    detail = f"providerID {provider_id} is not the cell's {expected_provider_id}"
    return NodeOwnership(OwnershipProof.NONE, detail)


def _claimed_by(labels: Mapping[str, str], pool: PoolIdentity) -> str:
    """Whose the Node is, said so that the fix is plain: a same-named pool of another namespace
    on the same workload cluster names its cells' Nodes exactly as this pool does."""
    other = labels.get(POOL_LABEL, "")
    if other == pool.name:
        return (
            f"labelled for another pool named {other!r} (pool-id "
            f"{labels.get(POOL_ID_LABEL, '?')}, not {pool.pool_id}), probably in another "
            "namespace: pools that share a workload cluster need distinct names, because a "
            "cell's Node is named <pool>-<index>"
        )
    return f"labelled for pool {other!r}" if other else "labelled for another pool"


class Liveness(enum.StrEnum):
    LIVE = "Live"
    DEAD = "Dead"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class KubeletHeartbeat:
    """What the workload cluster says about a kubelet's heartbeats.

    ``lease_read``: the Lease in ``kube-node-lease`` was read (found or not found);
    ``lease_renew_time_s``: its ``spec.renewTime`` on the caller's clock, None if never
    renewed; ``ready_heartbeat_s``: the Ready condition's ``lastHeartbeatTime``, if any.
    """

    lease_read: bool = False
    lease_exists: bool = False
    lease_renew_time_s: float | None = None
    ready_heartbeat_s: float | None = None


def kubelet_liveness(beat: KubeletHeartbeat, now_s: float) -> Liveness:
    """Lease renewed < 90 s ago -> live; present but stale or never renewed -> dead.

    Without a readable Lease, fall back to the NodeStatus heartbeat (< 6 min -> live, older ->
    dead). With neither, the answer is UNKNOWN, which callers treat as live.
    """
    if beat.lease_read and beat.lease_exists:
        renewed = beat.lease_renew_time_s
        if renewed is not None and now_s - renewed < LEASE_GRACE_S:
            return Liveness.LIVE
        return Liveness.DEAD
    if beat.ready_heartbeat_s is not None:
        if now_s - beat.ready_heartbeat_s < NODE_STATUS_GRACE_S:
            return Liveness.LIVE
        return Liveness.DEAD
    return Liveness.UNKNOWN


class NodeDisposition(enum.StrEnum):
    """What to do with a workload Node that carries (or lacks) this pool's labels."""

    FOREIGN = "Foreign"  # not ours: never touched
    CURRENT = "Current"  # ours and belongs to the live incarnation of its cell
    ADOPT = "Adopt"  # ours, instance label wrong but kubelet live/unknown: relabel
    REAP_STALE = "ReapStale"  # ours, previous incarnation, kubelet dead: delete
    REAP_ORPHAN = "ReapOrphan"  # ours, no current cell, kubelet dead: delete
    KEEP_ORPHAN = "KeepOrphan"  # ours, no current cell, kubelet live/unknown: wait


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str]
    heartbeat: KubeletHeartbeat


def node_disposition(
    node: NodeFacts,
    pool: PoolIdentity,
    current_instances: Mapping[str, str],
    now_s: float,
) -> NodeDisposition:
    """Classify a Node. ``current_instances`` maps cell name -> live outer object UID."""
    if not is_owned_node(node.labels, pool, frozenset(current_instances.values())):
        return NodeDisposition.FOREIGN
    dead = kubelet_liveness(node.heartbeat, now_s) is Liveness.DEAD
    expected_uid = current_instances.get(node.name)
    if expected_uid is None:
        return NodeDisposition.REAP_ORPHAN if dead else NodeDisposition.KEEP_ORPHAN
    instance = node.labels.get(INSTANCE_LABEL, "")
    if instance in ("", expected_uid):
        return NodeDisposition.CURRENT
    return NodeDisposition.REAP_STALE if dead else NodeDisposition.ADOPT
