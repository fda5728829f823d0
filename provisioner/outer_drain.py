"""Read the infrastructure Nodes hosting a pool's cells and plan their outer-node drain.

Why this module exists: ``fsm.drain_outer`` decides which cells leave because their host is
cordoned or drained; somebody has to read those hosts (one GET per distinct host of this pool,
concurrently, so a pass costs one round trip however many cells there are) and hand the
decision the cells as the backend places them. The reconciler then marks the chosen cells with
the ``OuterNodeDrain`` cause and the ordinary drain (``drainer``) takes them out; membership
creates their replacements, which KubeSwift places on a schedulable host. A host that cannot
be read (the operator lacks ``get`` on ``nodes``, or the apiserver failed) starts no drain and
makes ``CellDrainRequested`` Unknown; it never fails the pass.

Where the hosts come from is a ``HostSource``: ``NodeGets`` (the GETs above, for a reconciler
run alone, as in tests and tools) or, in ``gpucellpool run``, the operator's informer cache of
infrastructure Nodes (``gpucellpool.operator.infra_nodes``), which answers without a request once
synced and falls back to ``NodeGets`` until then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from gpucellpool.api.pool import GPUCellPool
from provisioner.backends.base import CellBackend, CellObjects
from provisioner.fsm.drain import DrainCause
from provisioner.fsm.drain_outer import HostNode, OuterCell, OuterDrainPlan, plan_outer_drain
from provisioner.kube import JSON, KINDS, KubeApi, KubeError

DRAINING_CAUSES = frozenset(
    {
        DrainCause.SCALE_DOWN,
        DrainCause.ROLLING_UPDATE,
        DrainCause.OUTER_DELETED,
        DrainCause.OUTER_NODE_DRAIN,
    }
)
"""Drains that take a serving cell out (a Failed cell's replacement and pool deletion don't
count against the disruption budget: the first serves nothing, the second drains all)."""
HOST_READ_CONCURRENCY = 8


def host_node(obj: JSON) -> HostNode:
    spec = obj.get("spec") or {}
    taints = frozenset(str(t.get("key", "")) for t in spec.get("taints") or [])
    return HostNode(str(obj["metadata"]["name"]), bool(spec.get("unschedulable")), taints)


class HostSource(Protocol):
    """Reads infrastructure Nodes by name for the outer-node drain."""

    async def hosts(self, names: set[str]) -> dict[str, HostNode] | None:
        """The named Nodes that exist; None when they could not be read."""
        ...


class NodeGets:
    """A ``HostSource`` doing one GET per named Node (no cache)."""

    def __init__(self, infra: KubeApi) -> None:
        self.infra = infra

    async def hosts(self, names: set[str]) -> dict[str, HostNode] | None:
        return await read_hosts(self.infra, names)


async def read_hosts(infra: KubeApi, names: set[str]) -> dict[str, HostNode] | None:
    """The named infrastructure Nodes that exist; None when any read failed."""
    gate = asyncio.Semaphore(HOST_READ_CONCURRENCY)

    async def one(name: str) -> JSON | None:
        async with gate:
            return await infra.get(KINDS["Node"], None, name)

    try:
        found = await asyncio.gather(*(one(n) for n in sorted(names)))
    except KubeError:
        return None
    return {n.name: n for n in (host_node(obj) for obj in found if obj is not None)}


def outer_cells(backend: CellBackend, cells: Mapping[str, CellObjects]) -> tuple[OuterCell, ...]:
    out = []
    for name, cell in cells.items():
        host, _devices = backend.placement(cell)
        cause = cell.drain_cause
        out.append(
            OuterCell(
                name,
                cell.index,
                host,
                draining=cause in DRAINING_CAUSES,
                outer_drain=cause == DrainCause.OUTER_NODE_DRAIN,
            )
        )
    return tuple(out)


async def plan_for_pool(
    source: HostSource,
    pool: GPUCellPool,
    backend: CellBackend,
    cells: Mapping[str, CellObjects],
    workload_reachable: bool,
) -> OuterDrainPlan:
    """This pass's outer-node drain plan (budget: ``autoscaling.disruptionBudget``)."""
    placed = outer_cells(backend, cells)
    names = {c.host for c in placed if c.host}
    hosts = await source.hosts(names) if names else {}
    budget = pool.spec.autoscaling.disruption_budget
    return plan_outer_drain(placed, hosts, budget, workload_reachable)
