"""The webhook's ports (and the startup CRD check's reader) over the operator's one door.

Why this module exists: the rest of ``webhook`` talks to Protocols (``SecretStore``,
``CABundleTarget``, ``PoolReader``, ``SecretAccess``); this module implements them with the
operator's REST client (``gpucellpool.kube.rest``), so their requests have its timeout, its
throttling retry and its one error tree, and no HTTP happens here. It also carries the small
reader ``gpucellpool.operator.crdcheck`` needs (a CRD as raw JSON), because the startup check runs
in the same process.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from gpucellpool.api import pool as api
from gpucellpool.kube import errors
from gpucellpool.kube.rest import RestClient
from webhook.certstore import Conflict
from webhook.review import UserInfo, access_review

SECRET_TYPE = "kubernetes.io/tls"
WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class KubeSecretStore:
    """``SecretStore`` on one namespaced Secret."""

    def __init__(self, rest: RestClient, namespace: str, name: str) -> None:
        self.rest = rest
        self.namespace, self.name = namespace, name
        self.collection = f"/api/v1/namespaces/{namespace}/secrets"
        self.path = f"{self.collection}/{name}"

    async def read(self) -> tuple[dict[str, bytes], str] | None:
        """(decoded data, resourceVersion) or None when absent."""
        doc = await self.rest.get(self.path)
        if doc is None:
            return None
        data = {k: base64.b64decode(v) for k, v in (doc.get("data") or {}).items()}
        return data, str(doc["metadata"]["resourceVersion"])

    async def write(self, data: dict[str, bytes], resource_version: str | None) -> None:
        """Create, or replace at ``resource_version``; 409 becomes ``Conflict``."""
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/component": "webhook-cert"},
        }
        try:
            if resource_version is None:
                body = {"apiVersion": "v1", "kind": "Secret", "metadata": meta}
                await self.rest.create(
                    self.collection, {**body, "type": SECRET_TYPE, "data": encoded}
                )
            else:
                doc = await self.rest.call("GET", self.path)
                doc["metadata"]["resourceVersion"] = resource_version
                doc["data"] = encoded
                await self.rest.replace(self.path, doc)
        except errors.Conflict as exc:
            raise Conflict(str(exc)) from exc


class KubeWebhookCABundle:
    """``CABundleTarget`` on one ValidatingWebhookConfiguration (every webhook entry)."""

    def __init__(self, rest: RestClient, name: str) -> None:
        self.rest = rest
        self.name = name
        self.path = f"{WEBHOOK_CONFIGURATIONS}/{name}"

    async def _read(self) -> dict[str, Any] | None:
        return await self.rest.get(self.path)

    async def ca_bundles(self) -> list[bytes] | None:
        """Decoded caBundle per webhook entry."""
        doc = await self._read()
        if doc is None:
            return None
        hooks = doc.get("webhooks") or []
        return [base64.b64decode(h.get("clientConfig", {}).get("caBundle") or "") for h in hooks]

    async def set_ca_bundle(self, bundle: bytes) -> None:
        """JSON-patch every entry's caBundle, guarded by a test of the entry's name."""
        doc = await self._read()
        if doc is None:
            return
        value = base64.b64encode(bundle).decode()
        ops: list[dict[str, Any]] = []
        for i, hook in enumerate(doc.get("webhooks") or []):
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]})
            ops.append(
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value}
            )
        if ops:
            await self.rest.json_patch(self.path, ops)


class KubePoolReader:
    """``PoolReader``: GET the GPUCellPool as raw JSON."""

    def __init__(self, rest: RestClient) -> None:
        self.rest = rest

    async def get_pool(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The stored pool, or None when absent."""
        group = f"/apis/{api.GROUP}/{api.VERSION}"
        return await self.rest.get(f"{group}/namespaces/{namespace}/{api.PLURAL}/{name}")


class KubeSecretAccess:
    """``SecretAccess``: a SubjectAccessReview for the requesting user (``get`` one Secret).

    Needs ``create`` on ``subjectaccessreviews``. Any failure (HTTP error, a missing answer)
    raises, and the server denies: an unknown answer is never read as a yes.
    """

    def __init__(self, rest: RestClient) -> None:
        self.rest = rest

    async def may_get_secret(self, user: UserInfo, namespace: str, name: str) -> bool:
        """The apiserver's answer for ``user`` and Secret ``namespace/name``."""
        review = await self.rest.call(
            "POST", ACCESS_REVIEWS, None, access_review(user, namespace, name)
        )
        status = review.get("status")
        if not isinstance(status, Mapping) or not isinstance(status.get("allowed", False), bool):
            raise ValueError("the SubjectAccessReview came back without a status")
        return bool(status.get("allowed")) and not status.get("denied", False)


class KubeCrdReader:
    """``gpucellpool.operator.crdcheck.CrdReader``: GET a CustomResourceDefinition as raw JSON."""

    def __init__(self, rest: RestClient) -> None:
        self.rest = rest

    async def get_crd(self, name: str) -> Mapping[str, Any] | None:
        """The served CRD; None when absent; PermissionError when RBAC forbids the read."""
        try:
            return await self.rest.get(f"{CRDS}/{name}")
        except errors.Forbidden as exc:
            if exc.status != errors.HTTP_FORBIDDEN:
                raise
            raise PermissionError(
                "forbidden: the operator needs get on customresourcedefinitions"
            ) from exc
