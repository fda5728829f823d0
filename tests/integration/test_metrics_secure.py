"""Secured ``/metrics`` against the real apiserver: TLS, TokenReview, SubjectAccessReview.

A ServiceAccount bound to a ClusterRole with ``get`` on the non-resource URL ``/metrics`` (what
the chart grants Prometheus) scrapes; another ServiceAccount, a made-up token and no token are
refused with 403/401; the plain probe port keeps serving probes but no longer serves metrics.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import aiohttp
import pytest

from gpucellpool.operator.app import App
from gpucellpool.operator.secure_metrics import MetricsOptions
from gpucellpool.operator.settings import Settings
from simulations.harness import ClusterEndpoint
from tests.integration.test_loop_helpers import client_for


def service_account_token(infra: ClusterEndpoint, namespace: str, name: str) -> str:
    infra.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    return str(infra.request("POST", path, request)["status"]["token"])


RBAC = "rbac.authorization.k8s.io"


def grant_metrics_reader(infra: ClusterEndpoint, namespace: str, sa: str) -> None:
    role = f"{namespace}-metrics-reader"
    infra.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
    )
    infra.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
        },
    )


@pytest.fixture
async def secure_app(infra: ClusterEndpoint, namespace: str) -> AsyncIterator[App]:
    settings = Settings(
        identity="metrics-test",
        lease_namespace=namespace,
        kubeconfig=str(infra.kubeconfig_path),
        health_host="127.0.0.1",
        health_port=0,
        pool_namespace=namespace,
        provision=False,
        metrics=MetricsOptions(secure=True, host="127.0.0.1", port=0, names=("localhost",)),
    )
    app = App(settings, await client_for(infra))
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


async def fetch(url: str, token: str | None = None) -> tuple[int, str]:
    tls = ssl.create_default_context()
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE  # self-signed by default
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=tls) as resp,
    ):
        return resp.status, await resp.text()


async def test_only_an_authorised_token_reads_metrics_over_tls(
    secure_app: App, infra: ClusterEndpoint, namespace: str
) -> None:
    prom = await asyncio.to_thread(service_account_token, infra, namespace, "prometheus")
    other = await asyncio.to_thread(service_account_token, infra, namespace, "someone-else")
    await asyncio.to_thread(grant_metrics_reader, infra, namespace, "prometheus")
    url = f"https://127.0.0.1:{secure_app.health.metrics_port}/metrics"

    status, body = await fetch(url, prom)
    assert status == 200 and "gpucell_" in body
    status, body = await fetch(url, other)
    assert status == 403 and f"system:serviceaccount:{namespace}:someone-else" in body
    assert (await fetch(url, "not-a-token"))[0] == 401
    assert (await fetch(url))[0] == 401
    # Refusals never echo a token.
    assert prom not in body and other not in body


async def test_secured_metrics_leave_the_probe_port_plain_and_probes_only(
    secure_app: App,
) -> None:
    base = f"http://127.0.0.1:{secure_app.health.port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/healthz") as resp:
            assert resp.status == 200
        async with session.get(f"{base}/metrics") as resp:
            assert resp.status == 404
    # Plain HTTP to the TLS port is refused, not answered with metrics.
    plain = f"http://127.0.0.1:{secure_app.health.metrics_port}/metrics"
    with pytest.raises(aiohttp.ClientError):
        async with aiohttp.ClientSession() as session, session.get(plain):
            pass
