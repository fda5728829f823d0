"""Shared set-up for the webhook integration tests (no tests here; the name keeps it ours).

A ``WebhookEnv`` is the real thing minus the Deployment: our TLS server on 127.0.0.1 with a
self-managed certificate stored in a real Secret, and a ValidatingWebhookConfiguration
(failurePolicy Fail, URL clientConfig, CREATE/UPDATE of gpucellpools and gpucellpools/scale)
whose caBundle our certificate code patches in, exactly as the operator does under
``helm template``/GitOps. The webhook is scoped to namespaces carrying a per-env label, and
objects labelled ``gpucellpool.test/webhook-bypass`` skip it (to store an ``old`` object an
UPDATE case starts from). Every kubectl call runs in a thread: the webhook server lives on
this event loop, and a blocking call here would starve the apiserver's call to it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import yaml

from gpucellpool.kube.rest import RestClient
from simulations.harness import ClusterEndpoint
from tests.integration.test_loop_helpers import client_for
from webhook import certs
from webhook.certstore import SelfManagedCerts
from webhook.kube import KubePoolReader, KubeSecretAccess, KubeSecretStore, KubeWebhookCABundle
from webhook.server import VALIDATE_PATH, WebhookServer
from webhook.tls import ServingTLS

HOOK_NAME = "vgpucellpool.cells.kubeswift.io"
BYPASS_LABEL = "gpucellpool.test/webhook-bypass"


async def kubectl(
    endpoint: ClusterEndpoint, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl in a worker thread; never raises on a non-zero exit."""
    return await asyncio.to_thread(endpoint.kubectl, *args, input=input, check=False)


async def wait_until(what: str, probe: Callable[[], Any], seconds: float = 30.0) -> Any:
    """Poll an async ``probe`` until it returns something truthy, or fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(0.1)


def webhook_configuration(name: str, port: int, selector: dict[str, str]) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration, as a GitOps repo would hold it (no caBundle)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": HOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {"url": f"https://127.0.0.1:{port}{VALIDATE_PATH}"},
                "rules": [
                    {
                        "apiGroups": ["cells.kubeswift.io"],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["gpucellpools", "gpucellpools/scale"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": selector},
                "objectSelector": {
                    "matchExpressions": [{"key": BYPASS_LABEL, "operator": "DoesNotExist"}]
                },
            }
        ],
    }


@dataclass
class WebhookEnv:
    """A running webhook wired into the real apiserver."""

    infra: ClusterEndpoint
    api: RestClient
    server: WebhookServer
    certs: SelfManagedCerts
    configuration: str
    selector: dict[str, str]
    system_namespace: str

    async def namespace(self, name: str) -> str:
        """Create (or reuse) a namespace the webhook applies to."""
        labels = {**self.selector, "gpucellpool.test/namespace": "true"}
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        body["metadata"]["labels"] = labels  # type: ignore[index]
        await asyncio.to_thread(self.infra.apply_objects, body)
        return name

    async def served_ca_bundle(self) -> bytes:
        """The caBundle the apiserver holds for our webhook."""
        out = await kubectl(
            self.infra, "get", "validatingwebhookconfiguration", self.configuration, "-o", "json"
        )
        doc = json.loads(out.stdout)
        return base64.b64decode(doc["webhooks"][0]["clientConfig"].get("caBundle", ""))


@contextlib.asynccontextmanager
async def webhook_env(
    infra: ClusterEndpoint, policy: certs.CertPolicy | None = None
) -> AsyncIterator[WebhookEnv]:
    """Start the server and its certificates, register the configuration; tear all down."""
    token = secrets.token_hex(3)
    system_ns, configuration = f"gpucellpool-system-{token}", f"gpucellpool-webhook-{token}"
    selector = {"gpucellpool.test/webhook": token}
    await asyncio.to_thread(infra.create_namespace, system_ns)
    api = await client_for(infra)
    tls = ServingTLS()
    names = certs.service_names("gpucellpool-webhook", system_ns, extra_ips=("127.0.0.1",))
    manager = SelfManagedCerts(
        KubeSecretStore(api, system_ns, "gpucellpool-webhook-cert"),
        KubeWebhookCABundle(api, configuration),
        tls,
        names,
        policy,
        max_sleep=5.0,
    )
    # The certificate must exist before the server listens; the configuration, registered
    # afterwards without a caBundle (GitOps), is filled in by the certificate loop.
    await manager.reconcile()
    server = WebhookServer(
        tls, KubePoolReader(api), host="127.0.0.1", port=0, secret_access=KubeSecretAccess(api)
    )
    port = await server.start()
    await asyncio.to_thread(
        infra.apply_objects, webhook_configuration(configuration, port, selector)
    )
    env = WebhookEnv(infra, api, server, manager, configuration, selector, system_ns)
    await manager.start()
    try:
        await wait_until("the caBundle patch", _bundle_matches(env), seconds=30)
        yield env
    finally:
        await manager.stop()
        await kubectl(infra, "delete", "validatingwebhookconfiguration", configuration)
        await server.stop()
        await api.close()
        await asyncio.to_thread(infra.delete_namespace, system_ns)


def _bundle_matches(env: WebhookEnv) -> Callable[[], Any]:
    async def probe() -> bool:
        current = env.certs.current
        return current is not None and await env.served_ca_bundle() == current.bundle

    return probe


def in_namespace(obj: dict[str, Any], namespace: str, **labels: str) -> dict[str, Any]:
    """A copy of ``obj`` moved to ``namespace`` (and with extra labels)."""
    moved = json.loads(json.dumps(obj))
    meta = moved.setdefault("metadata", {})
    meta["namespace"] = namespace
    if labels:
        meta.setdefault("labels", {}).update(labels)
    return moved  # type: ignore[no-any-return]


def as_yaml(obj: dict[str, Any]) -> str:
    """YAML for kubectl's stdin."""
    return yaml.safe_dump(obj)


def utc_now() -> dt.datetime:
    """Wall clock (for log lines in tests)."""
    return dt.datetime.now(dt.UTC)
