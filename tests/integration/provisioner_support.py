"""Shared helpers of the provisioner integration tests (a plain module, not a test file).

Why this module exists: every provisioner scenario needs the same API clients, pool setup,
status readers and convergence predicates; and the drain tests need to see exactly which calls
the operator made against the workload cluster (``RecordingKubeApi``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from provisioner.fsm.identity import PoolIdentity
from provisioner.kube import JSON, KINDS, KubeApi, KubeError, api_from_kubeconfig
from provisioner.kube_delegate import DelegatingKubeApi, Write
from provisioner.reconciler import PoolKey
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import api_for, join_secret, kubeconfig_secret

T = TypeVar("T")


@pytest.fixture
async def apis(
    infra: ClusterEndpoint, workload: ClusterEndpoint
) -> AsyncIterator[tuple[KubeApi, KubeApi]]:
    infra_api = await api_for(infra.kubeconfig_path)
    workload_api = await api_for(workload.kubeconfig_path)
    yield infra_api, workload_api
    await infra_api.close()
    await workload_api.close()


async def setup_pool(infra_api: KubeApi, workload: ClusterEndpoint, pool: JSON) -> PoolKey:
    ns = pool["metadata"]["namespace"]
    await infra_api.apply(kubeconfig_secret(ns, workload.kubeconfig_path.read_text()))
    await infra_api.apply(join_secret(ns))
    await infra_api.apply(pool)
    return PoolKey(ns, pool["metadata"]["name"])


def status(pool: JSON | None) -> dict[str, Any]:
    return (pool or {}).get("status") or {}


def cond(pool: JSON | None, type_: str) -> dict[str, Any]:
    return next((c for c in status(pool).get("conditions") or [] if c["type"] == type_), {})


def ready_with(n: int) -> Callable[[JSON | None], bool]:
    def check(pool: JSON | None) -> bool:
        s = status(pool)
        cells = s.get("cells") or []
        return (
            s.get("readyCells") == n
            and len(cells) == n
            and cond(pool, "Ready").get("status") == "True"
            and (pool or {}).get("metadata", {}).get("generation") == s.get("observedGeneration")
        )

    return check


def row(pool: JSON | None, name: str) -> dict[str, Any]:
    return next((c for c in status(pool).get("cells") or [] if c["name"] == name), {})


async def names(api: KubeApi, kind: str, ns: str | None, selector: str = "") -> set[str]:
    return {o["metadata"]["name"] for o in await api.list(KINDS[kind], ns, label_selector=selector)}


async def cell_nodes(workload_api: KubeApi, ident: PoolIdentity) -> set[str]:
    return await names(workload_api, "Node", None, f"cells.kubeswift.io/pool-id={ident.pool_id}")


def gpu_pod(namespace: str, name: str, node: str, labels: dict[str, str] | None = None) -> JSON:
    container = {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node, "containers": [container]},
    }


@dataclass(frozen=True, slots=True)
class Call:
    verb: str
    kind: str
    namespace: str | None
    name: str
    outcome: str  # "ok" or "HTTP <status>"
    at: float  # time.monotonic() when the answer arrived


@dataclass
class RecordingKubeApi(DelegatingKubeApi):
    """A ``KubeApi`` that remembers every mutating call and its outcome (reads pass through)."""

    calls: list[Call] = field(default_factory=list)

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await call()
        except KubeError as exc:
            self._record(write, f"HTTP {exc.status}")
            raise
        self._record(write, "ok")
        return result

    def _record(self, write: Write, outcome: str) -> None:
        at = time.monotonic()
        self.calls.append(Call(write.verb, write.kind, write.namespace, write.name, outcome, at))

    def of(self, verb: str, kind: str) -> list[Call]:
        return [c for c in self.calls if c.verb == verb and c.kind == kind]


def recording_factory(sink: list[RecordingKubeApi]) -> Any:
    """A workload ``ApiFactory`` whose clients record their calls into ``sink``."""

    async def factory(kubeconfig: Mapping[str, Any]) -> KubeApi:
        api = RecordingKubeApi(await api_from_kubeconfig(kubeconfig))
        sink.append(api)
        return api

    return factory
