"""The provisioner's view of a Kubernetes API server: the ``KubeApi`` protocol, kinds, adapter.

Why this module exists: the reconciler, the backends and the simulated controllers need a
handful of verbs (get, list, server-side apply, merge patch, delete, evict, probe) on a few
kinds, each with a timeout, and they must be testable with a fault-injecting wrapper. This
module names those verbs (``KubeApi``) and where each kind lives (``KINDS``); ``RestKubeApi``
sends them through the operator's one door (``gpucellpool.kube.rest``), so this module does no
HTTP of its own and its errors are the one tree (``gpucellpool.kube.errors``: ``NotFound``,
``Conflict``, ``Unreachable`` and the rest, under ``KubeError``). Its writes use field manager
``gpucellpool`` (the provisioner's), apart from the autoscaler's; the pool's status is
server-side-applied under ``STATUS_FIELD_MANAGER`` (``provisioner.status``), its own name, so
the apiserver tracks exactly which status fields the provisioner owns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from gpucellpool.kube.errors import (
    HTTP_CONFLICT,
    HTTP_FORBIDDEN,
    HTTP_NOT_FOUND,
    HTTP_TOO_MANY,
    HTTP_UNAUTHORIZED,
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    Throttled,
    Unreachable,
)
from gpucellpool.kube.rest import RestClient, client_from_kubeconfig

JSON = dict[str, Any]
FIELD_MANAGER = "gpucellpool"
STATUS_FIELD_MANAGER = "gpucellpool-provisioner"
"""The provisioner's field manager for the GPUCellPool status it owns (server-side apply)."""
REPLICAS_FIELD_MANAGER = "gpucellpool-provisioner-replicas"
"""The provisioner's field manager for ``status.desiredReplicas`` of a pool without autoscaling
(the autoscaler owns it otherwise): a manager of its own, that simply stops applying when
autoscaling is turned on, so the field is never removed in between."""
DEFAULT_TIMEOUT_S = 10.0
__all__ = [
    "HTTP_CONFLICT",
    "HTTP_FORBIDDEN",
    "HTTP_NOT_FOUND",
    "HTTP_TOO_MANY",
    "HTTP_UNAUTHORIZED",
    "KINDS",
    "REPLICAS_FIELD_MANAGER",
    "STATUS_FIELD_MANAGER",
    "Conflict",
    "Forbidden",
    "Invalid",
    "Kind",
    "KubeApi",
    "KubeError",
    "NotFound",
    "RestKubeApi",
    "Throttled",
    "Unreachable",
    "api_from_kubeconfig",
    "kind_of",
    "kind_of_object",
]


@dataclass(frozen=True, slots=True)
class Kind:
    """Where a kind lives in the REST tree."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        ns = f"/namespaces/{quote(namespace)}" if self.namespaced and namespace else ""
        tail = f"/{quote(name)}" if name else ""
        return f"{root}{ns}/{self.plural}{tail}"


_KNOWN = [
    Kind("v1", "Secret", "secrets"),
    Kind("v1", "Node", "nodes", namespaced=False),
    Kind("v1", "Pod", "pods"),
    Kind("v1", "Namespace", "namespaces", namespaced=False),
    Kind("coordination.k8s.io/v1", "Lease", "leases"),
    Kind("resource.k8s.io/v1", "DeviceClass", "deviceclasses", namespaced=False),
    Kind("cells.kubeswift.io/v1alpha1", "GPUCellPool", "gpucellpools"),
    Kind("swift.kubeswift.io/v1alpha1", "SwiftGuest", "swiftguests"),
    Kind("seed.kubeswift.io/v1alpha1", "SwiftSeedProfile", "swiftseedprofiles"),
    Kind("cluster.x-k8s.io/v1beta2", "Machine", "machines"),
    Kind("cluster.x-k8s.io/v1beta2", "Cluster", "clusters"),
    Kind("infrastructure.cluster.x-k8s.io/v1alpha1", "KubeSwiftMachine", "kubeswiftmachines"),
    Kind("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "kubeadmconfigs"),
    Kind("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfigTemplate", "kubeadmconfigtemplates"),
]
KINDS: dict[str, Kind] = {k.kind: k for k in _KNOWN}


def kind_of(kind: str, api_version: str | None = None) -> Kind:
    """The REST location of a kind; unknown kinds are guessed as ``<kind lowercased>s``."""
    known = KINDS.get(kind)
    if known is not None and (api_version is None or known.api_version == api_version):
        return known
    if api_version is None:
        raise KeyError(f"unknown kind {kind} without apiVersion")
    return Kind(api_version, kind, kind.lower() + "s")


def kind_of_object(obj: Mapping[str, Any]) -> Kind:
    return kind_of(str(obj["kind"]), str(obj["apiVersion"]))


class KubeApi(Protocol):
    """The verbs the provisioner and the twin use. Every call is bounded by a timeout."""

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        """The object, or None when it does not exist."""
        ...

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]: ...

    async def apply(
        self, obj: Mapping[str, Any], status: bool = False, field_manager: str | None = None
    ) -> JSON:
        """Server-side apply, forced, as ``field_manager`` (None: ``gpucellpool``)."""
        ...

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        """JSON merge patch; put ``metadata.resourceVersion`` in ``patch`` for a precondition."""
        ...

    async def create(self, obj: Mapping[str, Any]) -> JSON: ...

    async def delete(
        self, kind: Kind, namespace: str | None, name: str, grace_period_s: int | None = None
    ) -> bool:
        """Request deletion (``grace_period_s`` overrides the object's); False when gone."""
        ...

    async def evict(self, namespace: str, name: str) -> None: ...

    async def version(self) -> JSON: ...

    async def close(self) -> None: ...


class RestKubeApi:
    """``KubeApi`` over the one door (``gpucellpool.kube.rest.RestClient``), JSON in and out."""

    def __init__(self, rest: RestClient) -> None:
        self._rest = rest

    @property
    def rest(self) -> RestClient:
        """The door this adapter sends through."""
        return self._rest

    async def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        retry_throttled: bool = True,
    ) -> JSON:
        return await self._rest.call(method, path, query, body, content_type, retry_throttled)

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        try:
            return await self._call("GET", kind.path(namespace, name))
        except NotFound:
            return None

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        query = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        result = await self._call("GET", kind.path(namespace), query)
        return [i for i in result.get("items") or [] if isinstance(i, dict)]

    async def apply(
        self, obj: Mapping[str, Any], status: bool = False, field_manager: str | None = None
    ) -> JSON:
        kind = kind_of_object(obj)
        meta = obj["metadata"]
        path = kind.path(meta.get("namespace"), meta["name"]) + ("/status" if status else "")
        rest = self._rest if field_manager is None else self._rest.for_manager(field_manager)
        return await rest.apply(path, obj)

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        path = kind.path(namespace, name) + ("/status" if status else "")
        return await self._rest.merge_patch(path, patch)

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        kind = kind_of_object(obj)
        return await self._rest.create(kind.path(obj["metadata"].get("namespace")), obj)

    async def delete(
        self, kind: Kind, namespace: str | None, name: str, grace_period_s: int | None = None
    ) -> bool:
        return await self._rest.delete(kind.path(namespace, name), grace_period_s)

    async def evict(self, namespace: str, name: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        path = KINDS["Pod"].path(namespace, name) + "/eviction"
        await self._call("POST", path, None, body, retry_throttled=False)

    async def version(self) -> JSON:
        return await self._call("GET", "/version")

    async def close(self) -> None:
        await self._rest.close()


async def api_from_kubeconfig(
    kubeconfig: Mapping[str, Any], timeout_s: float = DEFAULT_TIMEOUT_S
) -> RestKubeApi:
    """A ``KubeApi`` for a parsed kubeconfig (current context), writing as ``gpucellpool``."""
    return RestKubeApi(await client_from_kubeconfig(kubeconfig, timeout_s, FIELD_MANAGER))
