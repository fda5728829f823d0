"""One live cell per call: observe its three layers, run the state machine, fix its Node's identity.

Why this module exists: for every cell the reconciler must read the outer object (through the
backend), the workload Node and its kubelet Lease, hand them to the pure ``decide_cell``, and
carry out the two Node-side consequences the decision may ask for (adopt = relabel, reap =
delete a stale Node). It also keeps the Node's identity (``instance`` label = outer UID) and the
user's labels, annotations and taints applied - only on Nodes this pool owns (by labels, or by
the cell's providerID when Cluster API's bootstrap provider rendered the join data and the Node
registered without our labels: that is how such a Node gets them); a foreign Node is never
written to. Destructive steps re-read the Node first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellStatus
from provisioner.backends.base import CellBackend, CellObjects
from provisioner.fsm.cell_state import (
    Budgets,
    CellDecision,
    CellObservation,
    CellRow,
    NodeStatus,
    decide_cell,
)
from provisioner.fsm.dra_capacity import dra_devices
from provisioner.fsm.identity import (
    INSTANCE_LABEL,
    POOL_ID_LABEL,
    TEMPLATE_HASH_ANNOTATION,
    KubeletHeartbeat,
    Liveness,
    NodeDisposition,
    NodeFacts,
    PoolIdentity,
    node_disposition,
)
from provisioner.fsm.observations import observe_node, parse_time_s
from provisioner.fsm.rows import cell_row, to_time, updated_status
from provisioner.fsm.vocabulary import TEARDOWN_PHASES
from provisioner.inventory import RESOURCE_SLICE
from provisioner.kube import JSON, KINDS, Conflict, KubeApi, KubeError
from provisioner.workload import NODE_LEASE_NAMESPACE, read_node


@dataclass(frozen=True, slots=True)
class CellPass:
    """What one pass learnt about one cell: its next row and whether it just failed."""

    row: CellStatus
    decision: CellDecision


def budgets(pool: GPUCellPool) -> Budgets:
    boot = pool.spec.bootstrap.ready_timeout.seconds if pool.spec.bootstrap else 15 * 60.0
    return Budgets(
        bootstrap_ready_timeout_s=boot,
        capacity_ready_timeout_s=pool.spec.capacity.ready_timeout.seconds,
    )


def identity(pool: GPUCellPool) -> PoolIdentity:
    return PoolIdentity(pool.metadata.namespace, pool.metadata.name)


def _wanted_node_metadata(
    pool: GPUCellPool, cell: CellObjects
) -> tuple[dict[str, str], dict[str, str]]:
    node_spec = pool.spec.workload_cluster.node
    labels = {**((node_spec.labels if node_spec else None) or {})}
    labels.update(identity(pool).cell_labels(cell.index))
    labels[INSTANCE_LABEL] = cell.uid
    annotations = dict((node_spec.annotations if node_spec else None) or {})
    return labels, annotations


def _merged_taints(pool: GPUCellPool, node: JSON) -> list[dict[str, Any]] | None:
    """Existing taints plus the pool's (added or value-fixed); None when nothing changes."""
    node_spec = pool.spec.workload_cluster.node
    wanted = [t.to_api() for t in ((node_spec.taints if node_spec else None) or [])]
    current: list[dict[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
    changed = False
    for taint in wanted:
        same = [
            t
            for t in current
            if t.get("key") == taint["key"] and t.get("effect") == taint["effect"]
        ]
        if not same:
            current.append(taint)
            changed = True
        elif same[0].get("value") != taint.get("value"):
            same[0]["value"] = taint.get("value")
            changed = True
    return current if changed else None


async def ensure_node_identity(
    api: KubeApi, pool: GPUCellPool, cell: CellObjects, node: JSON
) -> None:
    """Patch only the difference: missing/wrong identity and user labels, annotations, taints.

    Labels and annotations are maps, merged key by key. Taints are a list, which a merge patch
    replaces whole, and ``node`` may be a moment old: a taint another writer added since (the
    node lifecycle controller's ``not-ready``, the kubelet, a user's ``kubectl taint``) would be
    dropped. So a taint change carries ``node``'s resourceVersion and a 409 skips this pass:
    that writer's change is a Node watch event that wakes the pool, whose next pass recomputes
    from the fresh Node.
    """
    labels, annotations = _wanted_node_metadata(pool, cell)
    meta: Mapping[str, Any] = node.get("metadata") or {}
    have_labels = meta.get("labels") or {}
    have_ann = meta.get("annotations") or {}
    patch: dict[str, Any] = {}
    label_diff = {k: v for k, v in labels.items() if have_labels.get(k) != v}
    ann_diff = {k: v for k, v in annotations.items() if have_ann.get(k) != v}
    if label_diff or ann_diff:
        patch["metadata"] = {"labels": label_diff, "annotations": ann_diff}
    taints = _merged_taints(pool, node)
    if taints is not None:
        patch["spec"] = {"taints": taints}
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
    if patch:
        with contextlib.suppress(Conflict):  # the Node changed since: the next pass sees it
            await api.patch(KINDS["Node"], None, cell.name, patch)


async def _node_status(
    api: KubeApi | None,
    pool: GPUCellPool,
    cell: CellObjects,
    known: frozenset[str],
    now: float,
    provider_id: str = "",
) -> tuple[NodeStatus, JSON | None]:
    if api is None:
        return NodeStatus(), None
    view = await read_node(api, cell.name)
    device_plugin = (
        pool.spec.capacity.hami is None or pool.spec.capacity.hami.mode == "DevicePlugin"
    )
    status = observe_node(
        view.node,
        view.lease,
        view.lease_read,
        identity(pool),
        known,
        now,
        device_plugin_mode=device_plugin,
        expected_provider_id=provider_id,
        dra_devices=None if device_plugin or view.node is None else await _dra(api, cell.name),
    )
    return status, view.node


async def _dra(api: KubeApi, node: str) -> int | None:
    """HAMi devices the Node's ResourceSlices publish; None when none or unreadable (the
    cell waits in AwaitingGPUCapacity; ``CapacityProviderReady`` says why)."""
    try:
        slices = await api.list(RESOURCE_SLICE, None, field_selector=f"spec.nodeName={node}")
    except KubeError:
        return None
    return dra_devices(slices, node)


async def _reap_if_still_stale(
    api: KubeApi, cell: CellObjects, now: float, pool: GPUCellPool
) -> None:
    """Delete a previous incarnation's Node only if a fresh read still says so."""
    view = await read_node(api, cell.name)
    if view.node is None:
        return
    fresh = observe_node(
        view.node, view.lease, view.lease_read, identity(pool), frozenset({cell.uid}), now
    )
    if (
        fresh.owned
        and fresh.instance_label not in ("", cell.uid)
        and fresh.liveness is Liveness.DEAD
    ):
        await api.delete(KINDS["Node"], None, cell.name)


async def observe_cell(
    pool: GPUCellPool,
    backend: CellBackend,
    cell: CellObjects,
    previous: CellStatus | None,
    workload: KubeApi | None,
    known_instances: frozenset[str],
    now: float,
) -> CellPass:
    """Run the FSM for one live cell and do the Node-side follow-ups it asks for."""
    outer = backend.observe(cell, pool.spec.cell.node_ip_from)
    node, raw_node = await _node_status(
        workload, pool, cell, known_instances, now, outer.provider_id
    )
    obs = CellObservation(
        outer=outer,
        node=node,
        workload_reachable=workload is not None,
        expected_devices=pool.spec.expected_devices_per_cell(),
    )
    prev = cell_row(previous)
    if prev.phase in TEARDOWN_PHASES:  # not marked any more (abandoned drain): start over
        prev = CellRow(failure_count=(previous.failure_count or 0) if previous else 0)
    decision = decide_cell(prev, obs, budgets(pool), now)
    if workload is not None and raw_node is not None and node.owned:
        if decision.reap_node:
            await _reap_if_still_stale(workload, cell, now, pool)
        elif node.liveness is not Liveness.DEAD or node.instance_label in ("", cell.uid):
            await ensure_node_identity(workload, pool, cell, raw_node)
    row = updated_status(previous, cell.name, cell.index, decision)
    host, devices = backend.placement(cell)
    row = row.model_copy(
        update={
            "host_node": host,
            "devices": devices,
            "node_name": cell.name if node.exists and node.owned else None,
            "node_ready": node.ready if node.exists and node.owned else None,
            "capacity_devices": node.capacity.healthy_devices if node.exists else None,
            "template_hash": cell.annotations.get(TEMPLATE_HASH_ANNOTATION) or None,
            "creation_time": to_time(outer.created_at_s) or row.creation_time,
        }
    )
    return CellPass(row=row, decision=decision)


def teardown_row(
    previous: CellStatus | None,
    cell: CellObjects,
    phase: Any,
    reason: str,
    message: str,
    now: float,
) -> CellStatus:
    """The row of a draining/deleting cell (lastTransitionTime moves only on phase change)."""
    base = previous or CellStatus(name=cell.name, index=cell.index, phase=phase)
    moved = base.phase is not phase or base.last_transition_time is None
    return base.model_copy(
        update={
            "phase": phase,
            "reason": reason or None,
            "message": message or None,
            "guest_uid": cell.uid or None,
            "last_transition_time": to_time(now) if moved else base.last_transition_time,
            "template_hash": cell.annotations.get(TEMPLATE_HASH_ANNOTATION) or None,
        }
    )


def _heartbeat(node: JSON, lease: JSON | None) -> KubeletHeartbeat:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return KubeletHeartbeat(
        lease_read=True,
        lease_exists=lease is not None,
        lease_renew_time_s=parse_time_s(((lease or {}).get("spec") or {}).get("renewTime")),
        ready_heartbeat_s=parse_time_s(ready.get("lastHeartbeatTime")),
    )


async def sweep_orphan_nodes(
    pool: GPUCellPool, workload: KubeApi, cells: Mapping[str, CellObjects], now: float
) -> list[str]:
    """Delete this pool's Nodes that belong to no cell and whose kubelet is dead.

    Only Nodes the identity predicate says are this pool's (pool-id label) are considered, and
    a live or unknown kubelet keeps its Node: unknown never authorises a delete.
    """
    current = {name: cell.uid for name, cell in cells.items()}
    deleted: list[str] = []
    selector = f"{POOL_ID_LABEL}={identity(pool).pool_id}"
    for node in await workload.list(KINDS["Node"], None, label_selector=selector):
        name = str(node["metadata"]["name"])
        if name in current:
            continue
        lease = await workload.get(KINDS["Lease"], NODE_LEASE_NAMESPACE, name)
        facts = NodeFacts(name, node["metadata"].get("labels") or {}, _heartbeat(node, lease))
        if node_disposition(facts, identity(pool), current, now) is NodeDisposition.REAP_ORPHAN:
            await workload.delete(KINDS["Node"], None, name)
            deleted.append(name)
    return deleted
