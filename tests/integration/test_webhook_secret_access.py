"""No confused deputy, on the REAL apiserver with RBAC: Secret references need get access.

A pool author who may create GPUCellPools but may not read a Secret must not get it read for
them by the operator (e.g. as the Prometheus bearer token sent to a URL of their choosing).
Requests are sent with kubectl impersonating two tenants (``--as``; the harness's admin is in
``system:masters``), so the AdmissionReview carries the tenant's userInfo and our webhook's
SubjectAccessReview is answered by the apiserver's real RBAC authorizer.
"""

from __future__ import annotations

import asyncio
import copy
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from simulations.harness import ClusterEndpoint
from tests.integration.test_webhook_env import WebhookEnv, as_yaml, kubectl, webhook_env
from tests.unit.webhook_corpus import load_cases

AUTH = "spec.autoscaling.prometheus.authSecretRef.name"
READER, OUTSIDER = "tenant-reader", "tenant-outsider"
GROUP = "pool-authors"


def _pool(namespace: str, name: str, token_secret: str | None) -> dict[str, Any]:
    base = next(c for c in load_cases() if c.name == "bad-auto-prometheus-metadata-ssrf")
    obj: dict[str, Any] = copy.deepcopy(base.object)
    obj["metadata"] = {"name": name, "namespace": namespace}
    prometheus: dict[str, Any] = {"url": "https://prometheus.monitoring.svc:9090"}
    if token_secret:
        prometheus["authSecretRef"] = {"name": token_secret, "key": "password"}
    obj["spec"]["autoscaling"]["prometheus"] = prometheus
    return obj


def _rbac(namespace: str) -> list[dict[str, Any]]:
    """Both tenants may write pools and read the join/kubeconfig Secrets; only READER may
    read ``db-creds``."""

    def role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
        meta = {"name": name, "namespace": namespace}
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
                "rules": rules}  # fmt: skip

    def binding(name: str, subject: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", **subject}],
        }

    pools = {"apiGroups": ["cells.kubeswift.io"], "resources": ["gpucellpools"],
             "verbs": ["get", "list", "create", "update", "patch", "delete"]}  # fmt: skip
    join = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
            "resourceNames": ["cell-join", "workload-kubeconfig"]}  # fmt: skip
    creds = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
             "resourceNames": ["db-creds"]}  # fmt: skip
    return [
        role("pool-author", [pools, join]),
        binding("pool-author", {"kind": "Group", "name": GROUP}),
        role("db-creds-reader", [creds]),
        binding("db-creds-reader", {"kind": "User", "name": READER}),
    ]


def _secret(namespace: str, name: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace}
    data = {"password": secrets.token_hex(8), "value": "x"}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": data}


@pytest.fixture(scope="module")
async def env(infra: ClusterEndpoint) -> AsyncIterator[tuple[WebhookEnv, str]]:
    async with webhook_env(infra) as started:
        namespace = await started.namespace(f"sar-{secrets.token_hex(3)}")
        objects = [*_rbac(namespace)]
        objects += [_secret(namespace, n) for n in ("cell-join", "workload-kubeconfig", "db-creds")]
        await asyncio.to_thread(infra.apply_objects, *objects)
        yield started, namespace


async def _as(env: WebhookEnv, user: str, verb: str, obj: dict[str, Any]) -> tuple[bool, str]:
    who = (f"--as={user}", f"--as-group={GROUP}", "--as-group=system:authenticated")
    proc = await kubectl(env.infra, verb, *who, "-f", "-", input=as_yaml(obj))
    return proc.returncode == 0, proc.stderr


async def test_rbac_is_what_the_test_says(env: tuple[WebhookEnv, str]) -> None:
    """The premise: the outsider may create pools but may not read db-creds itself."""
    webhook, namespace = env
    for user, expected in ((OUTSIDER, "no"), (READER, "yes")):
        proc = await kubectl(webhook.infra, "auth", "can-i", "get", "secret/db-creds", "-n",
                             namespace, f"--as={user}", f"--as-group={GROUP}")  # fmt: skip
        assert proc.stdout.strip() == expected, (user, proc.stdout, proc.stderr)
    proc = await kubectl(webhook.infra, "auth", "can-i", "create", "gpucellpools", "-n",
                         namespace, f"--as={OUTSIDER}", f"--as-group={GROUP}")  # fmt: skip
    assert proc.stdout.strip() == "yes"


async def test_a_user_who_may_not_read_the_secret_is_refused(env: tuple[WebhookEnv, str]) -> None:
    webhook, namespace = env
    denied = webhook.server.stats.denied
    ok, error = await _as(webhook, OUTSIDER, "create", _pool(namespace, "steal", "db-creds"))
    assert not ok, "a pool naming a Secret its author may not read was admitted"
    assert AUTH in error and "'db-creds'" in error and "may not get" in error, error
    assert webhook.server.stats.denied == denied + 1
    stored = await kubectl(webhook.infra, "get", "gpucellpool", "steal", "-n", namespace)
    assert stored.returncode != 0  # nothing was stored


async def test_a_user_who_may_read_the_secret_is_admitted(env: tuple[WebhookEnv, str]) -> None:
    webhook, namespace = env
    seen = webhook.server.stats.requests
    ok, error = await _as(webhook, READER, "create", _pool(namespace, "mine", "db-creds"))
    assert ok, error
    assert webhook.server.stats.requests > seen, "the webhook was not called"
    got = await kubectl(webhook.infra, "get", "gpucellpool", "mine", "-n", namespace, "-o", "json")
    assert json.loads(got.stdout)["spec"]["autoscaling"]["prometheus"]["authSecretRef"]["name"] == (
        "db-creds"
    )


async def test_an_update_that_adds_the_reference_is_refused(env: tuple[WebhookEnv, str]) -> None:
    """The outsider owns a pool without a token, then points it at db-creds: refused."""
    webhook, namespace = env
    ok, error = await _as(webhook, OUTSIDER, "create", _pool(namespace, "later", None))
    assert ok, error
    got = await kubectl(webhook.infra, "get", "gpucellpool", "later", "-n", namespace, "-o", "json")
    current = json.loads(got.stdout)
    current["spec"]["autoscaling"]["prometheus"]["authSecretRef"] = {
        "name": "db-creds",
        "key": "password",
    }
    ok, error = await _as(webhook, OUTSIDER, "replace", current)
    assert not ok and AUTH in error and "'db-creds'" in error, error
    # the same edit by a user who may read the Secret goes through
    got = await kubectl(webhook.infra, "get", "gpucellpool", "later", "-n", namespace, "-o", "json")
    current = json.loads(got.stdout)
    current["spec"]["autoscaling"]["prometheus"]["authSecretRef"] = {
        "name": "db-creds",
        "key": "password",
    }
    ok, error = await _as(webhook, READER, "replace", current)
    assert ok, error
