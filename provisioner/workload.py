"""Reaching a pool's workload cluster: credential, client cache, probe, Node-side reads and writes.

Why this module exists: the workload cluster is reached through a kubeconfig stored in a Secret
the user controls, so it can be missing, malformed, rotated or pointing at a dead server. This
module turns all of that into one fact - reachable or not, with the original operator's reason
(``Connected``, ``CredentialInvalid``, ``Forbidden``, ``Unreachable``) - caches one client per
Secret resourceVersion, and wraps the Node, Lease and Pod calls the reconciler makes there.
The reachability probe (``/version``) is skipped while the operator's own watch of that cluster,
on the same kubeconfig, is live (``WorkloadLive``), except on a slow cadence (``PROBE_EVERY_S``)
that also catches a connection gone silent without an error.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpucellpool.kube.kubeconfig import KubeconfigError
from provisioner.cached_reads import CachedReads, WorkloadReads
from provisioner.kube import (
    HTTP_FORBIDDEN,
    HTTP_UNAUTHORIZED,
    JSON,
    KINDS,
    KubeApi,
    KubeError,
    Unreachable,
    api_from_kubeconfig,
)

NODE_LEASE_NAMESPACE = "kube-node-lease"
GPU_RESOURCE = "nvidia.com/gpu"
HAMI_POD_ANNOTATION_PREFIX = "hami.io/"
HAMI_DRA_LABEL = "hami.io/dra"

PROBE_EVERY_S = 60.0
"""How long a successful ``/version`` probe stands in for the next ones while a live watch
vouches for the cluster (a watch that hangs without failing is noticed after at most this)."""

ApiFactory = Callable[[Mapping[str, Any]], Awaitable[KubeApi]]
WorkloadLive = Callable[[str, str, str | None], bool]
"""(namespace, kubeconfig Secret name, its kubeconfig value) -> whether the operator's watch
of the cluster that kubeconfig reaches is live (then a pass need not probe ``/version``)."""


@dataclass(frozen=True, slots=True)
class Reachability:
    reachable: bool
    reason: str
    message: str = ""


@dataclass(slots=True)
class WorkloadLink:
    """The outcome of connecting: a client (when reachable) and why not otherwise."""

    api: KubeApi | None
    state: Reachability


@dataclass(slots=True)
class _Entry:
    version: str
    api: KubeApi
    probed_s: float | None = None  # when a probe last found the cluster reachable


def _decode_kubeconfig(secret: JSON, key: str) -> Mapping[str, Any] | None:
    raw = (secret.get("data") or {}).get(key)
    if not raw:
        return None
    try:
        parsed = yaml.safe_load(base64.b64decode(raw))
    except (ValueError, yaml.YAMLError):
        return None
    return parsed if isinstance(parsed, Mapping) else None


@dataclass
class WorkloadClients:
    """One cached client per kubeconfig Secret, rebuilt when its resourceVersion changes.
    ``reads``: the operator's caches of each workload cluster; a client's gets are answered
    there (``CachedReads``) when given. ``live`` and ``now``: while ``live`` vouches for the
    Secret's kubeconfig, a successful probe is repeated only every ``PROBE_EVERY_S``."""

    infra: KubeApi
    factory: ApiFactory = api_from_kubeconfig
    reads: WorkloadReads | None = None
    live: WorkloadLive | None = None
    now: Callable[[], float] | None = None
    _cache: dict[tuple[str, str], _Entry] = field(default_factory=dict)

    async def connect(self, namespace: str, secret_name: str, key: str) -> WorkloadLink:
        secret = await self.infra.get(KINDS["Secret"], namespace, secret_name)
        if secret is None:
            msg = f"kubeconfig Secret {secret_name} not found"
            return WorkloadLink(None, Reachability(False, "CredentialInvalid", msg))
        version = str(secret["metadata"].get("resourceVersion", ""))
        cache_key = (namespace, secret_name)
        entry = self._cache.get(cache_key)
        if entry is None or entry.version != version:
            kubeconfig = _decode_kubeconfig(secret, key)
            if kubeconfig is None:
                msg = f"Secret {secret_name} key {key!r} holds no parseable kubeconfig"
                return WorkloadLink(None, Reachability(False, "CredentialInvalid", msg))
            if entry is not None:
                await entry.api.close()
            try:
                api = await self.factory(kubeconfig)
            except Exception as exc:  # a malformed kubeconfig raises many types
                why = str(exc) if isinstance(exc, KubeconfigError) else type(exc).__name__
                msg = f"kubeconfig in Secret {secret_name} unusable: {why}"
                return WorkloadLink(None, Reachability(False, "CredentialInvalid", msg))
            if self.reads is not None:
                api = CachedReads(api, self.reads(namespace, secret_name))
            entry = self._cache[cache_key] = _Entry(version, api)
        raw = (secret.get("data") or {}).get(key)
        return WorkloadLink(entry.api, await self._reachability(entry, namespace, secret_name, raw))

    async def _reachability(
        self, entry: _Entry, namespace: str, secret_name: str, kubeconfig: str | None
    ) -> Reachability:
        """Probe, unless a live watch on this kubeconfig vouches and the last good probe is
        recent (``PROBE_EVERY_S``)."""
        now = self.now() if self.now is not None else None
        if now is not None and self.live is not None and entry.probed_s is not None:
            recent = now - entry.probed_s < PROBE_EVERY_S
            if recent and self.live(namespace, secret_name, kubeconfig):
                return Reachability(True, "Connected")
        state = await probe(entry.api)
        entry.probed_s = now if state.reachable else None
        return state

    async def forget(self, namespace: str, secret_name: str) -> None:
        entry = self._cache.pop((namespace, secret_name), None)
        if entry is not None:
            await entry.api.close()

    async def release(self, namespace: str, secret_name: str, pool_name: str) -> None:
        """A deleted pool lets go of its client - unless another pool of the namespace names
        the same Secret: pools are reconciled concurrently on one cache, so closing a shared
        client would fail their passes in flight."""
        pools = await self.infra.list(KINDS["GPUCellPool"], namespace)
        if not shares_kubeconfig(pools, pool_name, secret_name):
            await self.forget(namespace, secret_name)

    async def close(self) -> None:
        for entry in self._cache.values():
            with contextlib.suppress(Exception):
                await entry.api.close()
        self._cache.clear()


def shares_kubeconfig(pools: list[JSON], pool_name: str, secret_name: str) -> bool:
    """Whether a pool other than ``pool_name`` (all of one namespace) names ``secret_name`` as
    its workload kubeconfig Secret."""
    for pool in pools:
        if pool["metadata"]["name"] == pool_name:
            continue
        workload = (pool.get("spec") or {}).get("workloadCluster") or {}
        if (workload.get("kubeconfigSecretRef") or {}).get("name") == secret_name:
            return True
    return False


async def probe(api: KubeApi) -> Reachability:
    """``/version`` as the reachability test (the original's ``ServerVersion``)."""
    try:
        await api.version()
    except Unreachable as exc:
        return Reachability(False, "Unreachable", str(exc))
    except KubeError as exc:
        if exc.status == HTTP_UNAUTHORIZED:
            return Reachability(False, "CredentialInvalid", str(exc))
        if exc.status == HTTP_FORBIDDEN:
            return Reachability(False, "Forbidden", str(exc))
        return Reachability(False, "Unreachable", str(exc))
    return Reachability(True, "Connected")


@dataclass(frozen=True, slots=True)
class NodeView:
    """A Node, its kubelet Lease, and whether the Lease could be read at all."""

    node: JSON | None
    lease: JSON | None
    lease_read: bool


async def read_node(api: KubeApi, name: str) -> NodeView:
    node = await api.get(KINDS["Node"], None, name)
    if node is None:
        return NodeView(None, None, lease_read=False)
    try:
        lease = await api.get(KINDS["Lease"], NODE_LEASE_NAMESPACE, name)
    except KubeError:
        return NodeView(node, None, lease_read=False)
    return NodeView(node, lease, lease_read=True)


def _uses_gpu(pod: Mapping[str, Any]) -> bool:
    """HAMi's annotations or ``nvidia.com/gpu`` (device plugin); HAMi-DRA's ``hami.io/dra``
    label or any ResourceClaim (DRA mode: the webhook moved the GPU into a claim)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if any(k.startswith(HAMI_POD_ANNOTATION_PREFIX) for k in annotations):
        return True
    if (meta.get("labels") or {}).get(HAMI_DRA_LABEL) == "true":
        return True
    if (pod.get("spec") or {}).get("resourceClaims"):
        return True
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            if GPU_RESOURCE in (resources.get(section) or {}):
                return True
    return False


def _active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed")


async def gpu_pods_on_node(api: KubeApi, node_name: str) -> list[JSON]:
    """Pods bound to the Node that hold (or are about to hold) a HAMi GPU allocation."""
    pods = await api.list(KINDS["Pod"], None, field_selector=f"spec.nodeName={node_name}")
    return [p for p in pods if _active(p) and _uses_gpu(p)]


async def all_pods_on_node(api: KubeApi, node_name: str) -> list[JSON]:
    pods = await api.list(KINDS["Pod"], None, field_selector=f"spec.nodeName={node_name}")
    return [p for p in pods if _active(p)]
