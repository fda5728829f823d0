"""The only door to a Kubernetes API server: a small async ``KubeApi`` protocol and its adapter.

Why this module exists: the reconciler, the backends and the simulated controllers need a
handful of verbs (get, list, server-side apply, merge patch, delete, evict, probe) on a few
kinds, each with a timeout, and they must be testable with a fault-injecting wrapper. Keeping
``kubernetes_asyncio`` behind ``KubeApi`` means nothing else imports it, every call has a
deadline, and errors arrive as three small exception types (``NotFound``, ``Conflict``,
``Unreachable``) instead of HTTP plumbing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

JSON = dict[str, Any]
FIELD_MANAGER = "gpucellpool"
DEFAULT_TIMEOUT_S = 10.0
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_UNAUTHORIZED = 401
HTTP_FORBIDDEN = 403
HTTP_TOO_MANY = 429
THROTTLE_RETRIES = 3
THROTTLE_BACKOFF_S = 0.5


class KubeError(RuntimeError):
    """The API server answered with an error status (``status`` 0 = no HTTP answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Conflict(KubeError):
    """409: resourceVersion precondition failed or the object already exists."""


class Unreachable(KubeError):
    """No answer: connection refused, DNS, TLS or a timeout."""


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

    async def apply(self, obj: Mapping[str, Any], status: bool = False) -> JSON:
        """Server-side apply (fieldManager ``gpucellpool``, force)."""
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


def _raise_for(exc: ApiException) -> KubeError:
    status = int(exc.status or 0)
    message = f"HTTP {status}: {str(exc.body or exc.reason)[:300]}"
    if status == HTTP_NOT_FOUND:
        return NotFound(status, message)
    if status == HTTP_CONFLICT:
        return Conflict(status, message)
    return KubeError(status, message)


class RestKubeApi:
    """``KubeApi`` over one ``kubernetes_asyncio`` ApiClient (JSON in, JSON out)."""

    def __init__(self, api_client: k8s_client.ApiClient, timeout_s: float = DEFAULT_TIMEOUT_S):
        self._client = api_client
        self._timeout_s = timeout_s

    async def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        retry_throttled: bool = True,
    ) -> JSON:
        """One request; a 429 (apiserver throttling or storage re-initialising) is retried a
        few times after its Retry-After, capped, unless the 429 is an answer (eviction)."""
        for attempt in range(THROTTLE_RETRIES + 1):
            try:
                return await self._once(method, path, query, body, content_type)
            except KubeError as exc:
                if (
                    exc.status != HTTP_TOO_MANY
                    or not retry_throttled
                    or attempt == THROTTLE_RETRIES
                ):
                    raise
                await asyncio.sleep(THROTTLE_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None,
        body: Any,
        content_type: str,
    ) -> JSON:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        query = list(query or [])
        url = f"{self._client.configuration.host}{path}"
        try:
            await self._client.update_params_for_auth(headers, query, ["BearerToken"])
            async with asyncio.timeout(self._timeout_s):
                resp = await self._client.rest_client.request(
                    method,
                    url,
                    query_params=query,  # type: ignore[arg-type]  # a list of pairs works
                    headers=headers,
                    body=body,
                    _request_timeout=self._timeout_s,
                )
        except ApiException as exc:
            raise _raise_for(exc) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise Unreachable(0, f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        data = resp.data
        if not data:
            return {}
        parsed = json.loads(data)
        return parsed if isinstance(parsed, dict) else {"value": parsed}

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

    async def apply(self, obj: Mapping[str, Any], status: bool = False) -> JSON:
        kind = kind_of_object(obj)
        meta = obj["metadata"]
        path = kind.path(meta.get("namespace"), meta["name"]) + ("/status" if status else "")
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        return await self._call(
            "PATCH", path, query, dict(obj), content_type="application/apply-patch+yaml"
        )

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        path = kind.path(namespace, name) + ("/status" if status else "")
        query = [("fieldManager", FIELD_MANAGER)]
        return await self._call(
            "PATCH", path, query, dict(patch), content_type="application/merge-patch+json"
        )

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        kind = kind_of_object(obj)
        path = kind.path(obj["metadata"].get("namespace"))
        return await self._call("POST", path, [("fieldManager", FIELD_MANAGER)], dict(obj))

    async def delete(
        self, kind: Kind, namespace: str | None, name: str, grace_period_s: int | None = None
    ) -> bool:
        query = [] if grace_period_s is None else [("gracePeriodSeconds", str(grace_period_s))]
        try:
            await self._call("DELETE", kind.path(namespace, name), query)
        except NotFound:
            return False
        return True

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
        await self._client.close()


async def api_from_kubeconfig(
    kubeconfig: Mapping[str, Any], timeout_s: float = DEFAULT_TIMEOUT_S
) -> RestKubeApi:
    """A ``KubeApi`` for a parsed kubeconfig (current context)."""
    configuration = k8s_client.Configuration()
    loader = k8s_config.kube_config.KubeConfigLoader(config_dict=dict(kubeconfig))
    await loader.load_and_set(configuration)
    return RestKubeApi(k8s_client.ApiClient(configuration), timeout_s)
