"""The pool's taints on its cell Nodes, written by ``ensure_node_identity`` to a real apiserver.

Why this module exists: ``spec.workloadCluster.node.taints`` are merged into each cell Node's
taints with a JSON merge patch, which replaces the whole list. What these prove: the pool's taint
is added and a taint that is not the pool's is kept; a pool taint with another value on the Node
gets the pool's value; a taint another writer added after the Node was read survives a pass that
computed from the stale Node (the patch carries its resourceVersion, the apiserver refuses it
with 409, the pass carries on) and the next pass, from a fresh read, adds the pool's taint next
to it; and a difference in labels or annotations alone is patched from a stale Node (maps merge
key by key, no precondition needed).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpucellpool.api import GPUCellPool
from provisioner.backends.base import CellObjects
from provisioner.cells import ensure_node_identity, identity
from provisioner.fsm.identity import INSTANCE_LABEL
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import api_for, swiftguest_pool

POOL_TAINT = {"key": "gpu.example.com/dedicated", "value": "ml", "effect": "NoSchedule"}
FOREIGN_TAINT = {"key": "example.com/maintenance", "value": "tonight", "effect": "NoExecute"}
POOL_ANNOTATION = ("gpu.example.com/owner", "team-ml")


@dataclass
class CellNodes:
    """A pool with one taint, one label and one annotation for its Nodes, and the Nodes of
    its cells created on the workload apiserver (deleted when the test ends)."""

    api: KubeApi
    pool: GPUCellPool
    created: list[str] = field(default_factory=list)

    def cell(self, index: int) -> CellObjects:
        name = f"{self.pool.metadata.name}-{index}"
        outer = {"metadata": {"name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, name))}}
        return CellObjects(name=name, index=index, outer=outer)

    async def create(self, cell: CellObjects, taints: list[dict[str, Any]]) -> JSON:
        """The cell's Node, owned by the pool (identity labels), with ``taints``."""
        labels = {**identity(self.pool).cell_labels(cell.index), INSTANCE_LABEL: cell.uid}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": cell.name, "labels": labels},
            "spec": {"taints": taints},
        }
        self.created.append(cell.name)
        return await self.api.create(node)

    async def read(self, cell: CellObjects) -> JSON:
        node = await self.api.get(KINDS["Node"], None, cell.name)
        assert node is not None
        return node

    async def add_foreign_taint(self, cell: CellObjects) -> None:
        """Another writer (a user's ``kubectl taint``) adds a taint to the Node as it is now."""
        taints = taints_of(await self.read(cell))
        patch = {"spec": {"taints": [*taints, FOREIGN_TAINT]}}
        await self.api.patch(KINDS["Node"], None, cell.name, patch)


def taints_of(node: JSON) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def keyed(node: JSON) -> dict[tuple[str, str], str | None]:
    """The Node's taints as (key, effect) -> value; duplicates would show as a shorter dict."""
    taints = taints_of(node)
    by_key = {(t["key"], t["effect"]): t.get("value") for t in taints}
    assert len(by_key) == len(taints), f"duplicate taints: {taints}"
    return by_key


def has(node: JSON, taint: dict[str, str]) -> bool:
    return keyed(node).get((taint["key"], taint["effect"]), "<absent>") == taint["value"]


@pytest.fixture
async def cell_nodes(workload: ClusterEndpoint, namespace: str) -> AsyncIterator[CellNodes]:
    # Nodes are cluster-scoped: a pool name of its own keeps its cell Nodes apart.
    raw = swiftguest_pool(f"tainted-{secrets.token_hex(3)}", namespace)
    raw["spec"]["workloadCluster"]["node"]["taints"] = [POOL_TAINT]
    raw["spec"]["workloadCluster"]["node"]["annotations"] = dict([POOL_ANNOTATION])
    api = await api_for(workload.kubeconfig_path)
    nodes = CellNodes(api, GPUCellPool.model_validate(raw))
    try:
        yield nodes
    finally:
        for name in nodes.created:
            await api.delete(KINDS["Node"], None, name)
        await api.close()


async def test_the_pools_taint_is_added_and_a_foreign_one_kept(cell_nodes: CellNodes) -> None:
    cell = cell_nodes.cell(0)
    before = await cell_nodes.create(cell, [FOREIGN_TAINT])
    await ensure_node_identity(cell_nodes.api, cell_nodes.pool, cell, before)
    after = await cell_nodes.read(cell)
    assert has(after, POOL_TAINT) and has(after, FOREIGN_TAINT)
    assert set(keyed(after)) == set(keyed(before)) | {(POOL_TAINT["key"], POOL_TAINT["effect"])}
    assert after["metadata"]["labels"]["gpu"] == "on"
    assert after["metadata"]["annotations"][POOL_ANNOTATION[0]] == POOL_ANNOTATION[1]
    # Nothing left to change: no write at all.
    await ensure_node_identity(cell_nodes.api, cell_nodes.pool, cell, after)
    again = await cell_nodes.read(cell)
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]


async def test_a_pool_taint_with_another_value_gets_the_pools(cell_nodes: CellNodes) -> None:
    cell = cell_nodes.cell(0)
    before = await cell_nodes.create(cell, [{**POOL_TAINT, "value": "someone-else"}])
    await ensure_node_identity(cell_nodes.api, cell_nodes.pool, cell, before)
    after = await cell_nodes.read(cell)
    assert has(after, POOL_TAINT)  # one (key, effect) entry, with the pool's value
    assert len(taints_of(after)) == len(taints_of(before))


async def test_a_taint_added_after_the_read_survives_and_the_next_pass_applies_ours(
    cell_nodes: CellNodes,
) -> None:
    cell = cell_nodes.cell(0)
    stale = await cell_nodes.create(cell, [])
    await cell_nodes.add_foreign_taint(cell)
    await ensure_node_identity(cell_nodes.api, cell_nodes.pool, cell, stale)  # 409: skipped
    refused = await cell_nodes.read(cell)
    assert has(refused, FOREIGN_TAINT), "the stale patch dropped the other writer's taint"
    assert not has(refused, POOL_TAINT), "the stale patch must not have been applied"
    await ensure_node_identity(cell_nodes.api, cell_nodes.pool, cell, refused)  # the next pass
    after = await cell_nodes.read(cell)
    assert has(after, FOREIGN_TAINT) and has(after, POOL_TAINT)


async def test_labels_and_annotations_alone_are_patched_from_a_stale_node(
    cell_nodes: CellNodes,
) -> None:
    cell = cell_nodes.cell(0)
    stale = await cell_nodes.create(cell, [POOL_TAINT])
    await cell_nodes.add_foreign_taint(cell)  # the Node moves on after our read
    await ensure_node_identity(cell_nodes.api, cell_nodes.pool, cell, stale)
    after = await cell_nodes.read(cell)
    assert after["metadata"]["labels"]["gpu"] == "on"
    assert after["metadata"]["labels"]["team"] == "ml"
    assert after["metadata"]["annotations"][POOL_ANNOTATION[0]] == POOL_ANNOTATION[1]
    assert has(after, FOREIGN_TAINT) and has(after, POOL_TAINT)
