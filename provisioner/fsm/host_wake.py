"""Which pools an infrastructure Node change concerns, and whether it concerns any (no I/O).

Why this module exists: the outer-node drain (``fsm.drain_outer``) must start when a host is
cordoned, not on the pool's next periodic pass (up to 30 s for an idle pool). The operator
watches the infrastructure Nodes; a Node's status changes every few seconds (heartbeats,
conditions), and waking every pool on each of those would make the watch cost more than the
polling it replaces. So a Node event wakes a pool only when what the drain decision reads of
that Node changed - ``spec.unschedulable`` or its drain taints (``DRAIN_TAINTS``), including
the Node appearing or disappearing - and only the pools with a cell on it (``hosts_by_pool``:
the hosts of each pool's cells, from its status rows and its guests' placement).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provisioner.fsm.drain_outer import DRAIN_TAINTS, HostNode

PoolKey = tuple[str, str]  # (namespace, name)
NO_POOLS: frozenset[PoolKey] = frozenset()


@dataclass(frozen=True, slots=True)
class HostWake:
    """The pools to wake for one Node event, and why (empty ``pools``: why none)."""

    pools: frozenset[PoolKey]
    reason: str


def drain_signal(node: HostNode | None) -> tuple[bool, frozenset[str]] | None:
    """What the drain decision reads of a Node: cordoned, and its drain taints (None: absent)."""
    if node is None:
        return None
    return node.unschedulable, node.taint_keys & DRAIN_TAINTS


def pools_on_host(host: str, hosts_by_pool: Mapping[PoolKey, frozenset[str]]) -> frozenset[PoolKey]:
    """The pools with at least one cell on ``host``."""
    return frozenset(pool for pool, hosts in hosts_by_pool.items() if host in hosts)


def route_host_change(
    name: str,
    before: HostNode | None,
    after: HostNode | None,
    hosts_by_pool: Mapping[PoolKey, frozenset[str]],
) -> HostWake:
    """The pools a change of Node ``name`` from ``before`` to ``after`` (None: absent) wakes."""
    if drain_signal(before) == drain_signal(after):
        return HostWake(NO_POOLS, f"{name}: schedulability and drain taints unchanged")
    pools = pools_on_host(name, hosts_by_pool)
    if not pools:
        return HostWake(NO_POOLS, f"{name}: drain state changed, no pool has a cell on it")
    state = "gone" if after is None else ("draining" if after.draining else "schedulable")
    return HostWake(pools, f"{name}: now {state}")
