"""Building blocks for live provisioner scenarios: pools, Secrets, the running twin, convergence.

Why this module exists: integration tests, end-to-end runs and demos all need the same setup -
a workload kubeconfig Secret, a join template that renders the node labels, a pool manifest,
the simulated controllers running as asyncio tasks, and "reconcile until this holds, with a
deadline". Keeping it here (not in a test file) lets the later operator loop and the e2e suite
reuse it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpucellpool.api.clock import Clock
from provisioner.kube import JSON, KINDS, KubeApi, api_from_kubeconfig
from provisioner.reconciler import PoolKey, Reconciler
from simulations.twin.capi import SimulatedClusterAPI
from simulations.twin.kubeswift import SimulatedKubeSwift
from simulations.twin.node_agent import SimulatedNodeAgent

KUBECONFIG_SECRET = "workload-kubeconfig"
JOIN_SECRET = "cell-join"
JOIN_TEMPLATE = """#cloud-config
write_files:
  - path: /etc/gpucell/join.env
    content: |
      NODE_NAME="{{ cellName }}"
      POOL="{{ poolName }}"
      EXPECTED_GPUS="{{ expectedGPUs }}"
runcmd:
  - k0s install worker --token-file /etc/k0s/token
      --kubelet-extra-args="--node-labels={{ nodeLabels }}"
"""


async def api_for(kubeconfig_path: Path, timeout_s: float = 10.0) -> KubeApi:
    text = await asyncio.to_thread(kubeconfig_path.read_text)
    return await api_from_kubeconfig(yaml.safe_load(text), timeout_s)


def _secret(namespace: str, name: str, data: dict[str, str]) -> JSON:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": encoded,
    }


def kubeconfig_secret(namespace: str, kubeconfig_text: str, name: str = KUBECONFIG_SECRET) -> JSON:
    return _secret(namespace, name, {"value": kubeconfig_text})


def dead_kubeconfig_secret(
    namespace: str, kubeconfig_text: str, port: int, name: str = KUBECONFIG_SECRET
) -> JSON:
    """The same credentials pointing at a closed port on loopback (apiserver unreachable)."""
    config = yaml.safe_load(kubeconfig_text)
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    return kubeconfig_secret(namespace, yaml.safe_dump(config), name)


def join_secret(namespace: str, template: str = JOIN_TEMPLATE) -> JSON:
    return _secret(namespace, JOIN_SECRET, {"user-data": template})


def swiftguest_pool(
    name: str,
    namespace: str,
    replicas: int = 1,
    ready_timeout: str = "15m",
    capacity_timeout: str = "5m",
    **spec_extra: Any,
) -> JSON:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "cell": {
            "provisioner": "SwiftGuest",
            "guestTemplate": {
                "guestClassRef": {"name": "gpu-worker-medium"},
                "imageRef": {"name": "gpu-worker-noble-580"},
            },
            "gpu": {
                "count": 1,
                "backend": "DRA",
                "dra": {"resourceClaimTemplateName": "single-vfio-gpu"},
            },
        },
        "bootstrap": {"joinSecretRef": {"name": JOIN_SECRET}, "readyTimeout": ready_timeout},
        "workloadCluster": {
            "kubeconfigSecretRef": {"name": KUBECONFIG_SECRET},
            "node": {"labels": {"gpu": "on", "team": "ml"}},
        },
        "capacity": {
            "provider": "HAMi",
            "hami": {"mode": "DevicePlugin"},
            "readyTimeout": capacity_timeout,
        },
        **spec_extra,
    }
    return {
        "apiVersion": "cells.kubeswift.io/v1alpha1",
        "kind": "GPUCellPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def clusterapi_pool(
    name: str, namespace: str, replicas: int = 1, cluster: str = "workload"
) -> JSON:
    pool = swiftguest_pool(name, namespace, replicas)
    pool["spec"]["cell"]["provisioner"] = "ClusterAPI"
    pool["spec"]["cell"]["clusterAPI"] = {"clusterName": cluster, "version": "v1.34.1"}
    return pool


@dataclass
class Twin:
    """The simulated controllers for one namespace, as asyncio tasks (``async with``)."""

    infra: KubeApi
    workload: KubeApi
    clock: Clock
    namespace: str
    kubeswift: SimulatedKubeSwift = field(init=False)
    nodes: SimulatedNodeAgent = field(init=False)
    capi: SimulatedClusterAPI = field(init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kubeswift = SimulatedKubeSwift(self.infra, self.clock, self.namespace)
        self.nodes = SimulatedNodeAgent(self.infra, self.workload, self.clock, self.namespace)
        self.capi = SimulatedClusterAPI(self.infra, self.workload, self.clock, self.namespace)

    async def __aenter__(self) -> Twin:
        for ctl in (self.kubeswift, self.nodes, self.capi):
            self._tasks.append(asyncio.create_task(ctl.run()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()


async def converge(
    reconciler: Reconciler,
    key: PoolKey,
    done: Callable[[JSON | None], Awaitable[bool] | bool],
    timeout_s: float = 30.0,
    pass_interval_s: float = 0.1,
) -> JSON | None:
    """Reconcile repeatedly until ``done(pool)`` holds; raise TimeoutError at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    pool: JSON | None = None
    while loop.time() < deadline:
        await reconciler.reconcile_once(key)
        pool = await reconciler.infra.get(KINDS["GPUCellPool"], key.namespace, key.name)
        verdict = done(pool)
        if not isinstance(verdict, bool):
            verdict = await verdict
        if verdict:
            return pool
        await asyncio.sleep(pass_interval_s)  # the reconcile cadence, not a synchronisation
    status = (pool or {}).get("status") or {}
    raise TimeoutError(f"pool {key} did not converge in {timeout_s}s; status: {status}")


async def poll_until(
    check: Callable[[], Awaitable[bool]], timeout_s: float = 20.0, interval_s: float = 0.1
) -> None:
    """Wait for a condition the twin (not the reconciler) brings about, with a deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if await check():
            return
        await asyncio.sleep(interval_s)
    raise TimeoutError(f"condition not reached in {timeout_s}s")
