"""Objects for the scale benchmark: pools with Ready cells, their Nodes and HAMi pods (no tests).

The shapes follow the twin (``simulations.twin.node_agent``): a cell's workload Node carries the
pool identity labels (``cells.kubeswift.io/pool``, ``pool-id``, ``cell``, ``cell-index``), the
rendered node labels, HAMi's ``hami.io/node-nvidia-register`` annotation and allocatable
``nvidia.com/gpu`` (10 slots of one GPU); its Ready condition is set through the status
subresource. A pool's cells are rows of ``status.cells`` (what the provisioner would have
written) so the operator can run with ``--no-provision`` and still see 20 Ready cells per pool.
Bound pods carry HAMi's allocation annotations; pending ones are PodScheduled=False.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpucellpool.kube.rest import RestClient
from provisioner.fsm.identity import CELL_INDEX_LABEL, CELL_LABEL, PoolIdentity
from simulations.twin.node_agent import REGISTER_ANNOTATION
from simulations.twin.scenario import kubeconfig_secret
from tests.integration.test_loop_helpers import autoscaled_pool, create_pending, hami_pod

JSON = dict[str, Any]
ALLOCATED = "hami.io/vgpu-devices-allocated"
GPU_MIB = 24576
BOUND_POD_MIB = 2000
RFC3339 = "2026-11-30T00:00:00Z"


def scale_pool(name: str, namespace: str) -> JSON:
    pool = autoscaled_pool(name, namespace, trial=name)
    pool["spec"]["autoscaling"]["maxReplicas"] = 200
    return pool


def gpu_uuid(node: str) -> str:
    return f"GPU-{node}"


def cell_rows(pool: str, cells: int) -> list[JSON]:
    return [
        {
            "name": f"{pool}-{i}",
            "index": i,
            "phase": "Ready",
            "nodeName": f"{pool}-{i}",
            "nodeReady": True,
            "capacityDevices": 1,
            "readyOnce": True,
            "lastTransitionTime": RFC3339,
        }
        for i in range(cells)
    ]


def cell_node(namespace: str, pool: str, index: int) -> JSON:
    name = f"{pool}-{index}"
    identity = PoolIdentity(namespace, pool)
    device = {
        "id": gpu_uuid(name),
        "count": 10,
        "devmem": GPU_MIB,
        "devcore": 100,
        "type": "NVIDIA A10",
        "mode": "hami-core",
        "health": True,
    }
    labels = {
        "kubernetes.io/hostname": name,
        "gpu": "on",
        "team": "ml",
        **identity.pool_labels(),
        CELL_LABEL: name,
        CELL_INDEX_LABEL: str(index),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {REGISTER_ANNOTATION: json.dumps([device])},
        },
    }


def node_status() -> JSON:
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": RFC3339,
        "lastTransitionTime": RFC3339,
    }
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "10"}
    return {"status": {"conditions": [ready], "capacity": resources, "allocatable": resources}}


def bound_pod(namespace: str, name: str, pool: str, node: str) -> JSON:
    pod = hami_pod(namespace, name, pool, BOUND_POD_MIB)
    pod["spec"]["nodeName"] = node
    pod["metadata"]["annotations"] = {
        ALLOCATED: f"{gpu_uuid(node)},NVIDIA,{BOUND_POD_MIB},10:;",
        "hami.io/vgpu-node": node,
        "hami.io/bind-phase": "success",
    }
    return pod


RUNNING = {
    "status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "startTime": RFC3339,
    }
}


async def bounded(jobs: Iterable[Callable[[], Awaitable[Any]]], limit: int) -> int:
    """Run every job with at most ``limit`` in flight; the number run."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await job()

    tasks = [one(job) for job in jobs]
    await asyncio.gather(*tasks)
    return len(tasks)


async def create_node(workload: RestClient, namespace: str, pool: str, index: int) -> None:
    node = cell_node(namespace, pool, index)
    await workload.create("/api/v1/nodes", node)
    await workload.merge_patch(f"/api/v1/nodes/{node['metadata']['name']}/status", node_status())


async def create_bound(
    workload: RestClient, namespace: str, name: str, pool: str, node: str
) -> None:
    await workload.create(
        f"/api/v1/namespaces/{namespace}/pods", bound_pod(namespace, name, pool, node)
    )
    await workload.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", RUNNING)


async def count(client: RestClient, path: str) -> int:
    """Objects in a collection, from one list page of 1 (``remainingItemCount``)."""
    page = await client.call("GET", path, [("limit", "1")])
    items = len(page.get("items") or [])
    return items + int((page.get("metadata") or {}).get("remainingItemCount") or 0)


@dataclass(frozen=True, slots=True)
class ScaleLayout:
    """How many of each object a scale benchmark builds, and where.

    Pools live in ``namespace`` of the infrastructure cluster; pool ``i``'s pods in its own
    workload namespace ``pod_namespace(i)``; ``pending_per_pool`` of its ``pods_per_pool`` wait
    (24 GiB, Unschedulable), the rest are bound round-robin to its cells.
    """

    pools: int
    namespace: str
    cells_per_pool: int = 20
    pods_per_pool: int = 200
    pending_per_pool: int = 10
    in_flight: int = 32
    """Requests the benchmark client keeps in flight while it builds the objects."""

    @property
    def pools_path(self) -> str:
        return f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{self.namespace}/gpucellpools"

    def pool_name(self, i: int) -> str:
        return f"p{i:0{len(str(self.pools - 1))}d}"

    def pod_namespace(self, i: int) -> str:
        return f"{self.namespace}-{self.pool_name(i)}"


async def populate_layout(
    infra: RestClient, workload: RestClient, kubeconfig: str, layout: ScaleLayout
) -> float:
    """Every object of ``layout``: pools with Ready cell rows, their Nodes, bound and pending
    pods; the seconds taken. Namespaces first, then pools, Nodes and pods, each stage with
    ``layout.in_flight`` requests in flight."""
    started, n = time.monotonic(), layout.in_flight
    await infra.create("/api/v1/namespaces", {"metadata": {"name": layout.namespace}})
    secrets = f"/api/v1/namespaces/{layout.namespace}/secrets"
    await infra.create(secrets, kubeconfig_secret(layout.namespace, kubeconfig))
    names = [layout.pool_name(i) for i in range(layout.pools)]
    spaces = [layout.pod_namespace(i) for i in range(layout.pools)]

    async def pool(name: str) -> None:
        await infra.create(layout.pools_path, scale_pool(name, layout.namespace))
        rows = {"status": {"cells": cell_rows(name, layout.cells_per_pool)}}
        await infra.merge_patch(f"{layout.pools_path}/{name}/status", rows)

    async def namespace(ns: str) -> None:
        await workload.create("/api/v1/namespaces", {"metadata": {"name": ns}})

    await bounded([partial(namespace, ns) for ns in spaces], n)
    await bounded([partial(pool, name) for name in names], n)
    cells = range(layout.cells_per_pool)
    nodes = [partial(create_node, workload, layout.namespace, a, j) for a in names for j in cells]
    await bounded(nodes, n)
    await bounded(_pod_jobs(workload, layout, names, spaces), n)
    return time.monotonic() - started


def _pod_jobs(
    workload: RestClient, layout: ScaleLayout, names: list[str], spaces: list[str]
) -> list[Callable[[], Awaitable[None]]]:
    """One job per pod: pool by pool, its bound pods then its pending ones."""
    bound = layout.pods_per_pool - layout.pending_per_pool
    jobs: list[Callable[[], Awaitable[None]]] = []
    for name, ns in zip(names, spaces, strict=True):
        for k in range(bound):
            node = f"{name}-{k % layout.cells_per_pool}"
            jobs.append(partial(create_bound, workload, ns, f"run-{k}", name, node))
        for k in range(layout.pending_per_pool):
            jobs.append(partial(create_pending, workload, ns, f"wait-{k}", name))
    return jobs
