"""The operator's informer cache of infrastructure-cluster Nodes, for the outer-node drain.

Why this module exists: a cordoned or drained host must start its cells' drain at once, not on
the pool's next periodic pass (up to 30 s for an idle pool), and reading each host with a GET on
every pass of every pool bypasses any cache. ``InfraNodes`` mirrors the infrastructure Nodes
with a ``WatchCache`` (list + watch, as the other caches of ``gpucellpool.operator.app``) and:

* answers the reconciler's reads (``provisioner.outer_drain.HostSource``) from the mirror.
  Until the first list succeeded (start-up, or RBAC missing ``list``/``watch`` on ``nodes``)
  it falls back to the GETs of ``NodeGets``, so a pass never waits for the cache. Once synced,
  the mirror answers even while its watch is retrying (it keeps the last state, as any
  informer does), and the periodic pass still corrects anything a lost event hid;
* wakes the pools with a cell on a Node whose schedulability or drain taints changed
  (``provisioner.fsm.host_wake``: heartbeats and other status updates wake nobody). Where each
  pool's cells are comes from its status rows (``hostNode``) and from its SwiftGuests'
  placement (``status.nodeName``), fed by the pool and outer-object caches' callbacks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpucellpool.kube.cache import JSON, ListWatch, Query, WatchCache, object_key
from gpucellpool.operator.provisioning import owner_pool
from provisioner.backends.swiftguest import guest_placement
from provisioner.fsm.drain_outer import HostNode
from provisioner.fsm.host_wake import PoolKey, drain_signal, route_host_change
from provisioner.outer_drain import HostSource, host_node

NODES_PATH = "/api/v1/nodes"
log = logging.getLogger(__name__)


def _pool_key(raw: JSON) -> PoolKey:
    meta = raw.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def status_hosts(raw: JSON) -> frozenset[str]:
    """The ``hostNode`` of a GPUCellPool's status rows (malformed rows are skipped)."""
    rows = (raw.get("status") or {}).get("cells") or []
    return frozenset(str(r["hostNode"]) for r in rows if isinstance(r, dict) and r.get("hostNode"))


class InfraNodes:
    """Mirror of the infrastructure Nodes; a ``HostSource`` and a wake-up router."""

    def __init__(
        self, source: ListWatch, fallback: HostSource, wake: Callable[[PoolKey], None]
    ) -> None:
        self.cache = WatchCache(source, Query(NODES_PATH), self._node_changed)
        self.fallback = fallback
        self.wake = wake
        self.fallback_reads = 0
        """Reads answered by ``fallback`` because the mirror was not synced yet."""
        self._seen: dict[str, HostNode] = {}
        self._status_hosts: dict[PoolKey, frozenset[str]] = {}
        self._guests: dict[str, tuple[PoolKey, str]] = {}  # guest key -> (pool, host)

    async def hosts(self, names: set[str]) -> dict[str, HostNode] | None:
        if not self.cache.synced.is_set():
            self.fallback_reads += 1
            return await self.fallback.hosts(names)
        found = (self.cache.get(name) for name in sorted(names))
        return {n.name: n for n in (host_node(obj) for obj in found if obj is not None)}

    def hosts_by_pool(self) -> dict[PoolKey, frozenset[str]]:
        """Every known host of each pool's cells (status rows and placed guests)."""
        out = {pool: set(hosts) for pool, hosts in self._status_hosts.items()}
        for pool, host in self._guests.values():
            if host:
                out.setdefault(pool, set()).add(host)
        return {pool: frozenset(hosts) for pool, hosts in out.items()}

    def pool_changed(self, kind: str, raw: JSON) -> None:
        key = _pool_key(raw)
        if kind == "DELETED":
            self._status_hosts.pop(key, None)
        else:
            self._status_hosts[key] = status_hosts(raw)

    def guest_changed(self, kind: str, obj: JSON) -> None:
        """A SwiftGuest cache's event (Machines carry no host: their guest does)."""
        key, owner = object_key(obj), owner_pool(obj)
        if kind == "DELETED" or owner is None:
            self._guests.pop(key, None)
        else:
            self._guests[key] = (owner, guest_placement(obj)[0] or "")

    def _node_changed(self, kind: str, obj: JSON) -> None:
        try:
            name, after = str(obj["metadata"]["name"]), host_node(obj)
        except (KeyError, TypeError, AttributeError):
            log.warning("infrastructure Node event without a name skipped")
            return
        before = self._seen.pop(name, None)
        now = None if kind == "DELETED" else after
        if now is not None:
            self._seen[name] = now
        if drain_signal(before) == drain_signal(now):
            return  # heartbeats and status updates: no pool's routes are even looked at
        decision = route_host_change(name, before, now, self.hosts_by_pool())
        for pool in sorted(decision.pools):
            log.info("waking pool: %s", decision.reason, extra={"pool": "/".join(pool)})
            self.wake(pool)
