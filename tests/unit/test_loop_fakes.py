"""In-memory ports for the autoscaling loop's unit tests (their clock: the one virtual clock,
``simulations.simulator.engine.clock.VirtualClock``, the simulator's)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from autoscaler.loop import Autoscaler, LoopSettings, WorkloadSnapshot
from gpucellpool.api.pool import GPUCellPool
from simulations.simulator.engine.clock import VirtualClock, settle  # noqa: F401  (older imports)

JSON = dict[str, Any]


class FakeWorkload:
    def __init__(self) -> None:
        self.pods: dict[str, JSON] = {}
        self.nodes: list[JSON] = []
        self.synced = True
        self.same_cluster: dict[str, object] = {}  # Secret name -> the cluster it reaches

    def cluster_of(self, pool: GPUCellPool) -> object:
        return pool.spec.workload_cluster.kubeconfig_secret_ref.name

    def identity(self, cluster: object) -> object:
        """Secrets named in ``same_cluster`` reach one cluster (as their kube-system UID would
        tell); any other Secret is its own cluster."""
        return self.same_cluster.get(str(cluster), cluster)

    def snapshot(self, pool: GPUCellPool) -> WorkloadSnapshot:
        return WorkloadSnapshot(self.synced, list(self.pods.values()), self.nodes, {})


class FakeWriter:
    def __init__(self) -> None:
        self.statuses: list[JSON] = []
        self.annotations: dict[tuple[str, str], dict[str, str]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.fail_for: set[str] = set()

    async def apply_status(self, body: JSON) -> None:
        name = body["metadata"]["name"]
        if name in self.fail_for:
            raise RuntimeError(f"injected failure for {name}")
        self.statuses.append(body)

    async def annotate(self, pool: GPUCellPool, key: str, value: str) -> None:
        self.annotations.setdefault((pool.metadata.name, key), {})["value"] = value

    async def event(self, pool: GPUCellPool, reason: str, note: str, warning: bool) -> None:
        self.events.append((pool.metadata.name, reason, note))

    def for_pool(self, name: str) -> list[JSON]:
        return [s for s in self.statuses if s["metadata"]["name"] == name]


def pool_manifest(
    name: str, *, mode: str = "Active", secret: str = "wl", ns: str = "ns", **auto: Any
) -> JSON:
    autoscaling = {
        "enabled": True,
        "minReplicas": 0,
        "maxReplicas": 20,
        "mode": mode,
        "maxCellsInFlight": 20,
        "scaleDown": "Auto",
        "cellShape": {"gpuMemoryMiB": 24576, "gpuCores": 100, "slots": 10},
        **auto,
    }
    return {
        "apiVersion": "cells.kubeswift.io/v1alpha1",
        "kind": "GPUCellPool",
        "metadata": {"name": name, "namespace": ns, "generation": 1, "uid": f"uid-{name}"},
        "spec": {
            "replicas": 0,
            "cell": {
                "provisioner": "SwiftGuest",
                "guestTemplate": {
                    "guestClassRef": {"name": "c"},
                    "imageRef": {"name": "i"},
                },
                "gpu": {"count": 1, "backend": "DRA", "dra": {"resourceClaimTemplateName": "t"}},
            },
            "bootstrap": {"joinSecretRef": {"name": "join"}},
            "workloadCluster": {"kubeconfigSecretRef": {"name": secret}},
            "capacity": {"provider": "HAMi", "hami": {"mode": "DevicePlugin"}},
            "autoscaling": autoscaling,
        },
    }


def pending_pod(name: str, mem_mib: int = 8000, ns: str = "default", **labels: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": labels},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem_mib)}
                    },
                }
            ],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def with_cells(raw: JSON, rows: Sequence[Mapping[str, Any]]) -> JSON:
    out = dict(raw)
    out["status"] = {**(raw.get("status") or {}), "cells": list(rows)}
    return out


World = tuple[Autoscaler, FakeWorkload, FakeWriter, VirtualClock]


@contextlib.asynccontextmanager
async def loop_world(settings: LoopSettings) -> AsyncIterator[World]:
    """An Autoscaler on the fakes and a virtual clock, closed after use (the loop tests' world)."""
    clock, workload, writer = VirtualClock(), FakeWorkload(), FakeWriter()
    scaler = Autoscaler(workload, writer, clock, settings=settings)
    try:
        yield scaler, workload, writer, clock
    finally:
        await scaler.close()
