"""Shared helpers of the provisioner integration tests (a plain module, not a test file).

Why this module exists: every provisioner scenario needs the same API clients, pool setup,
status readers and convergence predicates; and the drain tests need to see exactly which calls
the operator made against the workload cluster (``RecordingKubeApi``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from provisioner.fsm.identity import PoolIdentity
from provisioner.kube import JSON, KINDS, Kind, KubeApi, KubeError, api_from_kubeconfig
from provisioner.reconciler import PoolKey
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import api_for, join_secret, kubeconfig_secret


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
class RecordingKubeApi:
    """A ``KubeApi`` that remembers every mutating call and its outcome (reads pass through)."""

    inner: KubeApi
    calls: list[Call] = field(default_factory=list)

    async def _record(self, verb: str, kind: str, ns: str | None, name: str, call: Any) -> Any:
        try:
            result = await call
        except KubeError as exc:
            self.calls.append(Call(verb, kind, ns, name, f"HTTP {exc.status}", time.monotonic()))
            raise
        self.calls.append(Call(verb, kind, ns, name, "ok", time.monotonic()))
        return result

    def of(self, verb: str, kind: str) -> list[Call]:
        return [c for c in self.calls if c.verb == verb and c.kind == kind]

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        return await self.inner.get(kind, namespace, name)

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        return await self.inner.list(kind, namespace, label_selector, field_selector)

    async def apply(self, obj: Mapping[str, Any], status: bool = False) -> JSON:
        meta = obj["metadata"]
        call = self.inner.apply(obj, status)
        result: JSON = await self._record(
            "apply", str(obj["kind"]), meta.get("namespace"), meta["name"], call
        )
        return result

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        call = self.inner.patch(kind, namespace, name, patch, status)
        result: JSON = await self._record("patch", kind.kind, namespace, name, call)
        return result

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        meta = obj["metadata"]
        call = self.inner.create(obj)
        result: JSON = await self._record(
            "create", str(obj["kind"]), meta.get("namespace"), meta["name"], call
        )
        return result

    async def delete(
        self, kind: Kind, namespace: str | None, name: str, grace_period_s: int | None = None
    ) -> bool:
        call = self.inner.delete(kind, namespace, name, grace_period_s)
        result: bool = await self._record("delete", kind.kind, namespace, name, call)
        return result

    async def evict(self, namespace: str, name: str) -> None:
        await self._record("evict", "Pod", namespace, name, self.inner.evict(namespace, name))

    async def version(self) -> JSON:
        return await self.inner.version()

    async def close(self) -> None:
        await self.inner.close()


def recording_factory(sink: list[RecordingKubeApi]) -> Any:
    """A workload ``ApiFactory`` whose clients record their calls into ``sink``."""

    async def factory(kubeconfig: Mapping[str, Any]) -> KubeApi:
        api = RecordingKubeApi(await api_from_kubeconfig(kubeconfig))
        sink.append(api)
        return api

    return factory
