"""Shared set-up for the autoscaling loop's integration tests (no tests here).

A pool with autoscaling on whose demand is narrowed by a pod label unique to the test (the
workload cluster is shared by every test of the session, and pending pods are never deleted),
its kubeconfig Secret, an in-process ``App``, HAMi-pending pods made by creating the pod and
then setting PodScheduled=False/Unschedulable through the status subresource (as the HAMi
scheduler would), a watch that timestamps every change of the pool's status, and the teardown
that ends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from gpucellpool.kube.cache import Query, WatchCache
from gpucellpool.kube.rest import RestClient, client_from_kubeconfig
from gpucellpool.operator.app import App
from gpucellpool.operator.settings import Settings
from provisioner.kube import KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import api_for, join_secret, kubeconfig_secret, swiftguest_pool

JSON = dict[str, Any]


class Closable(Protocol):
    """A test's API client (``client_for``'s RestClient or the twin's KubeApi)."""

    async def close(self) -> None: ...


async def client_for(endpoint: ClusterEndpoint) -> RestClient:
    text = await asyncio.to_thread(endpoint.kubeconfig_path.read_text)
    return await client_from_kubeconfig(yaml.safe_load(text))


def autoscaled_pool(name: str, namespace: str, trial: str, mode: str = "Active") -> JSON:
    pool = swiftguest_pool(name, namespace, replicas=0)
    pool["spec"]["autoscaling"] = {
        "enabled": True,
        "minReplicas": 0,
        "maxReplicas": 40,
        "mode": mode,
        "scaleDown": "Auto",
        "maxCellsInFlight": 40,
        "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0}},
        "cellShape": {"gpuMemoryMiB": 24576, "gpuCores": 100, "slots": 10},
        "demand": {"podSelector": {"matchLabels": {"trial": trial}}},
    }
    return pool


async def create_pool(infra: RestClient, workload: ClusterEndpoint, pool: JSON) -> None:
    ns = pool["metadata"]["namespace"]
    secret = kubeconfig_secret(ns, workload.kubeconfig_path.read_text())
    existing = await infra.get(f"/api/v1/namespaces/{ns}/secrets/{secret['metadata']['name']}")
    if existing is None:
        await infra.create(f"/api/v1/namespaces/{ns}/secrets", secret)
    await infra.create(f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{ns}/gpucellpools", pool)


def hami_pod(namespace: str, name: str, trial: str, mem_mib: int) -> JSON:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem_mib)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"trial": trial}},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


async def mark_unschedulable(workload: RestClient, namespace: str, name: str) -> None:
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 CardInsufficientMemory",
    }
    await workload.merge_patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": {"conditions": [cond]}}
    )


async def create_pending(
    workload: RestClient, namespace: str, name: str, trial: str, mem_mib: int = 24576
) -> None:
    await workload.create(
        f"/api/v1/namespaces/{namespace}/pods", hami_pod(namespace, name, trial, mem_mib)
    )
    await mark_unschedulable(workload, namespace, name)


@dataclass
class PoolWatch:
    """Every observed status of one pool, with the wall time it arrived."""

    seen: list[tuple[float, JSON]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on_change(self, kind: str, obj: JSON) -> None:
        if kind != "DELETED":
            self.seen.append((time.monotonic(), obj.get("status") or {}))
            self.changed.set()

    async def until(
        self, check: Callable[[JSON], bool], timeout_s: float, after: int = 0
    ) -> tuple[float, JSON]:
        """The first (time, status) satisfying ``check``, looking only at the statuses seen
        from index ``after`` on (``len(seen)`` now: only what comes next); fails after
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        index = after
        while True:
            while index < len(self.seen):
                at, status = self.seen[index]
                index += 1
                if check(status):
                    return at, status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                last = self.seen[-1][1] if self.seen else {}
                raise AssertionError(f"condition not met in {timeout_s}s; last status {last}")
            self.changed.clear()
            if index < len(self.seen):
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)


async def watch_pool(
    infra: RestClient, namespace: str, name: str
) -> tuple[PoolWatch, asyncio.Task[None]]:
    recorder = PoolWatch()
    query = Query(
        f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{namespace}/gpucellpools",
        field_selector=f"metadata.name={name}",
    )
    cache = WatchCache(infra, query, recorder.on_change)
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(cache.synced.wait(), 10)
    return recorder, task


async def start_app(
    infra_endpoint: ClusterEndpoint, namespace: str, identity: str, **kw: Any
) -> App:
    settings = Settings(
        identity=identity,
        lease_namespace=namespace,
        kubeconfig=str(infra_endpoint.kubeconfig_path),
        health_host="127.0.0.1",
        health_port=0,
        pool_namespace=namespace,
        **{"provision": False, **kw},
    )
    infra = await client_for(infra_endpoint)
    app = App(settings, infra)
    await app.start()
    return app


async def shut_down(
    app: App, watches: Iterable[asyncio.Task[None]], clients: Iterable[Closable]
) -> None:
    """End a loop test: cancel each ``watch_pool`` task and wait for it, stop the App, then close
    the test's clients (in that order: nothing watches or writes through a closed client)."""
    for task in watches:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await app.stop()
    for client in clients:
        await client.close()


async def until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll an in-process ``check`` (every 50 ms) until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)  # polling with a deadline


async def read_lease(infra: ClusterEndpoint, namespace: str) -> JSON | None:
    """The autoscaler's leader-election Lease in ``namespace`` (None before the first round)."""
    client = await client_for(infra)
    try:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/gpucellpool-autoscaler"
        lease = await client.get(path)
    finally:
        await client.close()
    return lease


def desired_is(replicas: int) -> Callable[[JSON], bool]:
    """A ``PoolWatch.until`` check: the status's target is ``replicas``."""
    return lambda status: status.get("desiredReplicas") == replicas


def decision(status: JSON) -> JSON:
    return status.get("lastDecision") or {}


def condition(status: JSON, type_: str) -> JSON:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def twin_clients(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> tuple[RestClient, RestClient, KubeApi, KubeApi]:
    """The test's clients of both clusters and the twin's (infra, workload), with the join
    Secret the twin's guests boot from applied in ``namespace``."""
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    twin_infra = await api_for(infra.kubeconfig_path)
    twin_workload = await api_for(workload.kubeconfig_path)
    await twin_infra.apply(join_secret(namespace))
    return infra_api, workload_api, twin_infra, twin_workload
