"""kubernetes-asyncio adapters for the webhook's ports (and the startup CRD check's).

Why this module exists: the rest of ``webhook`` talks to Protocols (``SecretStore``,
``CABundleTarget``, ``PoolReader``, ``SecretAccess``); this is the only module that knows the
Kubernetes client.
It also carries the two small adapters ``gpucellpool.crdcheck`` needs (read a CRD as raw
JSON, record an Event), because they are the same few lines of client code and the startup
check runs in the same process. Raw JSON (``_preload_content=False``) is used wherever the
pure code wants dicts, so nothing is lost to the client's model classes.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import secrets
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpucellpool.api import pool as api
from webhook.certstore import Conflict
from webhook.review import UserInfo, access_review

SECRET_TYPE = "kubernetes.io/tls"


async def _json(response: Any) -> dict[str, Any]:
    """Body of a raw (``_preload_content=False``) response; non-2xx raises ``ApiException``.

    Without preloading the client returns the aiohttp response as is, errors included.
    """
    try:
        raw = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        raise ApiException(status=response.status, reason=raw.decode(errors="replace")[:500])
    parsed = json.loads(raw)
    return parsed if isinstance(parsed, dict) else {}


class KubeSecretStore:
    """``SecretStore`` on one namespaced Secret."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.name = namespace, name

    async def read(self) -> tuple[dict[str, bytes], str] | None:
        """(decoded data, resourceVersion) or None when absent."""
        try:
            doc = await _json(
                await self.core.read_namespaced_secret(
                    self.name, self.namespace, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
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
                body: Any = {"metadata": meta, "type": SECRET_TYPE, "data": encoded}
                await self.core.create_namespaced_secret(self.namespace, body)
            else:
                current = await self.core.read_namespaced_secret(
                    self.name, self.namespace, _preload_content=False
                )
                doc: Any = await _json(current)
                doc["metadata"]["resourceVersion"] = resource_version
                doc["data"] = encoded
                await self.core.replace_namespaced_secret(self.name, self.namespace, doc)
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(str(exc.reason)) from exc
            raise


class KubeWebhookCABundle:
    """``CABundleTarget`` on one ValidatingWebhookConfiguration (every webhook entry)."""

    def __init__(self, api_client: client.ApiClient, name: str) -> None:
        self.admission = client.AdmissionregistrationV1Api(api_client)
        self.name = name

    async def _read(self) -> dict[str, Any] | None:
        try:
            return await _json(
                await self.admission.read_validating_webhook_configuration(
                    self.name, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

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
            await self.admission.patch_validating_webhook_configuration(self.name, ops)


class KubePoolReader:
    """``PoolReader``: GET the GPUCellPool as raw JSON."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)

    async def get_pool(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The stored pool, or None when absent."""
        try:
            return await _json(
                await self.custom.get_namespaced_custom_object(
                    api.GROUP, api.VERSION, namespace, api.PLURAL, name, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


class KubeSecretAccess:
    """``SecretAccess``: a SubjectAccessReview for the requesting user (``get`` one Secret).

    Needs ``create`` on ``subjectaccessreviews``. Any failure (HTTP error, a missing answer)
    raises, and the server denies: an unknown answer is never read as a yes.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        self.authz = client.AuthorizationV1Api(api_client)

    async def may_get_secret(self, user: UserInfo, namespace: str, name: str) -> bool:
        """The apiserver's answer for ``user`` and Secret ``namespace/name``."""
        body: Any = access_review(user, namespace, name)
        review = await _json(
            await self.authz.create_subject_access_review(body, _preload_content=False)
        )
        status = review.get("status")
        if not isinstance(status, Mapping) or not isinstance(status.get("allowed", False), bool):
            raise ValueError("the SubjectAccessReview came back without a status")
        return bool(status.get("allowed")) and not status.get("denied", False)


class KubeCrdReader:
    """``gpucellpool.crdcheck.CrdReader``: GET a CustomResourceDefinition as raw JSON."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.ext = client.ApiextensionsV1Api(api_client)

    async def get_crd(self, name: str) -> Mapping[str, Any] | None:
        """The served CRD; None when absent; PermissionError when RBAC forbids the read."""
        try:
            return await _json(
                await self.ext.read_custom_resource_definition(name, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 403:
                raise PermissionError(
                    "forbidden: the operator needs get on customresourcedefinitions"
                ) from exc
            raise


class KubeEventSink:
    """``gpucellpool.crdcheck.EventSink``: a core/v1 Event about an object.

    A core/v1 Event must live in its object's namespace; for a cluster-scoped object (the
    CRD) that is ``default``, where ``kubectl describe crd`` and ``kubectl get events -A``
    find it.
    """

    def __init__(self, api_client: client.ApiClient, component: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.component = component

    async def emit(self, involved: Mapping[str, str], kind: str, reason: str, message: str) -> None:
        """Record one Event (``kind`` is Normal or Warning)."""
        namespace = involved.get("namespace") or "default"
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: Any = {
            "metadata": {
                "name": f"{involved.get('name', 'object')}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "involvedObject": dict(involved),
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.core.create_namespaced_event(namespace, body)
