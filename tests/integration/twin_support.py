"""Shared helpers of the twin HAMi integration tests (a plain module, not a test file).

Why this module exists: Nodes that look exactly like the node agent's, HAMi pods, a HAMi
scoped to the test's own Nodes (Nodes are cluster-scoped and the apiserver is shared by the
session), and running controllers as tasks are needed by more than one test file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gpucellpool.api.clock import Clock
from gpucellpool.runtime.clock import SystemClock
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin import SimulatedHAMi
from simulations.twin.pod_lifecycle import DURATION_ANNOTATION
from simulations.twin.scenario import api_for, poll_until

MIB = 1048576
GIB = 1024
TEST_LABEL = "twin.gpucellpool.test/ns"


@pytest.fixture
async def api(workload: ClusterEndpoint, namespace: str) -> AsyncIterator[KubeApi]:
    client = await api_for(workload.kubeconfig_path)
    yield client
    for node in await client.list(KINDS["Node"], label_selector=f"{TEST_LABEL}={namespace}"):
        await client.delete(KINDS["Node"], None, node["metadata"]["name"])
    await client.close()


async def register_node(
    api: KubeApi,
    namespace: str,
    suffix: str,
    gpus: int = 1,
    memory_mib: int = 24 * GIB,
    labels: dict[str, str] | None = None,
) -> str:
    """A Node exactly as the twin's node agent leaves it: Ready, ``gpu=on``, the HAMi
    register annotation (v2.8+ JSON, index 0 omitted) and allocatable ``gpus x 10``."""
    name = f"{namespace}-{suffix}"
    devices: list[dict[str, Any]] = [
        {
            "id": f"GPU-{suffix}-{i}",
            "index": i,
            "count": 10,
            "devmem": memory_mib,
            "devcore": 100,
            "type": "NVIDIA GeForce GTX 1080",
            "mode": "hami-core",
            "health": True,
        }
        for i in range(gpus)
    ]
    for device in devices:
        if device["index"] == 0:
            del device["index"]
    node_labels = {"kubernetes.io/hostname": name, "gpu": "on", TEST_LABEL: namespace}
    meta = {
        "name": name,
        "labels": {**node_labels, **(labels or {})},
        "annotations": {"hami.io/node-nvidia-register": json.dumps(devices)},
    }
    await api.create({"apiVersion": "v1", "kind": "Node", "metadata": meta})
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": str(gpus * 10)}
    status = {"conditions": [ready], "capacity": alloc, "allocatable": alloc}
    await api.patch(KINDS["Node"], None, name, {"status": status}, status=True)
    return name


def hami_pod(
    namespace: str,
    name: str,
    mem_mib: int | None = 8 * GIB,
    cores: int = 0,
    gpus: int = 1,
    selector: dict[str, str] | None = None,
    duration_s: float | None = None,
) -> JSON:
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem_mib is not None:
        limits["nvidia.com/gpumem"] = str(mem_mib)
    if cores:
        limits["nvidia.com/gpucores"] = str(cores)
    spec: JSON = {
        "schedulerName": "hami-scheduler",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
    }
    if selector:
        spec["nodeSelector"] = selector
    meta: JSON = {"name": name, "namespace": namespace}
    if duration_s is not None:
        meta["annotations"] = {DURATION_ANNOTATION: str(duration_s)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def new_hami(
    api: KubeApi, namespace: str, clock: Clock | None = None, **kwargs: Any
) -> SimulatedHAMi:
    selector = f"{TEST_LABEL}={namespace}"
    clock = clock or SystemClock()
    return SimulatedHAMi(api, clock, namespace, node_label_selector=selector, **kwargs)


async def get_pod(api: KubeApi, namespace: str, name: str) -> JSON:
    pod = await api.get(KINDS["Pod"], namespace, name)
    assert pod is not None, f"pod {name} is gone"
    return pod


def scheduled(pod: JSON) -> dict[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), {})


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 20.0) -> None:
    await poll_until(check, timeout_s=timeout_s, interval_s=0.05)


@contextlib.asynccontextmanager
async def running(*controllers: Any) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(c.run()) for c in controllers]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
