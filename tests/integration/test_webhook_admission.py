"""The webhook through the REAL apiserver: every corpus case, every sample, kubectl scale.

Objects are written with kubectl (server-side create, replace, scale) to the harness's
infrastructure apiserver, which calls our TLS server through a ValidatingWebhookConfiguration
with failurePolicy Fail. A denial must be counted by our server and carry every expected field
path and message from the corpus (kubectl prints a webhook's Invalid denial one "field:
message" per cause; the raw API answer carries the "admission webhook ... denied the request"
prefix); an admission must
have gone through the webhook (its request counter moves), so a misrouted configuration cannot
pass these tests by never calling us.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulations.harness import ClusterEndpoint
from simulations.harness.endpoint import ApiError
from tests.integration.test_webhook_env import (
    BYPASS_LABEL,
    HOOK_NAME,
    WebhookEnv,
    as_yaml,
    in_namespace,
    kubectl,
    webhook_env,
)
from tests.unit.webhook_corpus import Case, load_cases
from webhook.rules import DEFAULT_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
CASES = load_cases()
CORPUS_NAMESPACE = "cells"  # the corpus objects live there (one good case depends on it)
DENIED = f'admission webhook "{HOOK_NAME}" denied the request'


@pytest.fixture(scope="module")
async def env(infra: ClusterEndpoint) -> AsyncIterator[WebhookEnv]:
    async with webhook_env(infra) as started:
        await started.namespace(CORPUS_NAMESPACE)
        yield started


async def _reset(env: WebhookEnv, name: str) -> None:
    """Delete the case's pool; finalizers first (no operator runs here to remove them)."""
    await kubectl(env.infra, "patch", "gpucellpool", name, "-n", CORPUS_NAMESPACE,
                  "--type=merge", "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
    done = await kubectl(env.infra, "delete", "gpucellpool", name, "-n", CORPUS_NAMESPACE,
                         "--ignore-not-found", "--wait=true")  # fmt: skip
    assert done.returncode == 0, done.stderr


async def _store_old(env: WebhookEnv, case: Case) -> None:
    """Create the case's ``old`` pool (webhook bypassed) and write its status."""
    old = in_namespace(case.old, CORPUS_NAMESPACE, **{BYPASS_LABEL: "true"})
    status = old.pop("status", None)
    created = await kubectl(env.infra, "create", "-f", "-", input=as_yaml(old))
    assert created.returncode == 0, created.stderr
    if status:
        patched = await kubectl(
            env.infra, "patch", "gpucellpool", old["metadata"]["name"], "-n", CORPUS_NAMESPACE,
            "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip
        assert patched.returncode == 0, patched.stderr


async def _send(env: WebhookEnv, case: Case) -> tuple[bool, str]:
    """Send the case's request through the apiserver: (accepted, error text)."""
    obj = in_namespace(case.object, CORPUS_NAMESPACE)
    if case.operation == "CREATE":
        proc = await kubectl(env.infra, "create", "-f", "-", input=as_yaml(obj))
        return proc.returncode == 0, proc.stderr
    await _store_old(env, case)
    if case.operation == "UPDATE":
        proc = await kubectl(env.infra, "replace", "-f", "-", input=as_yaml(obj))
        return proc.returncode == 0, proc.stderr
    name = case.old["metadata"]["name"]
    path = (
        f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{CORPUS_NAMESPACE}/gpucellpools/{name}/scale"
    )
    try:
        await _thread(env.infra.request, "PUT", path, obj)
    except ApiError as exc:
        return False, str(json.loads(exc.body).get("message", exc.body))
    return True, ""


async def _thread(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_corpus_case_through_the_apiserver(env: WebhookEnv, case: Case) -> None:
    name = (case.old or case.object).get("metadata", {}).get("name") or "corpus-pool"
    await _reset(env, name)
    env.server.settings = case.settings
    seen, denied = env.server.stats.requests, env.server.stats.denied
    try:
        accepted, error = await _send(env, case)
    finally:
        env.server.settings = DEFAULT_SETTINGS
        await _reset(env, name)
    if case.allowed:
        assert accepted, f"{case.name}: {error}"
        assert env.server.stats.requests > seen, "the webhook was not called"
        for warning in case.warnings:  # kubectl prints admission warnings on stderr
            assert f"Warning: {warning.path}: " in error and warning.message in error, error
        return
    assert not accepted, f"{case.name} was admitted: {case.description}"
    if case.rejected_by == "schema":
        assert DENIED not in error, "the schema should refuse this before the webhook"
        assert env.server.stats.denied == denied, "the apiserver refused it before calling us"
        return
    assert env.server.stats.denied > denied, f"not denied by the webhook: {error}"
    if case.operation == "SCALE":  # the raw API answer (kubectl reformats Invalid errors)
        assert DENIED in error, error
    for reason in case.reasons:
        assert f"{reason.path}: " in error and reason.message in error, (reason, error)


def _samples() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted((ROOT / "config" / "samples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "GPUCellPool":
                found.append((path.name, doc))
    return found


SAMPLES = _samples()


@pytest.mark.parametrize(("file", "sample"), SAMPLES, ids=[f for f, _ in SAMPLES])
async def test_every_sample_is_admitted(env: WebhookEnv, file: str, sample: dict[str, Any]) -> None:
    ns = await env.namespace(f"samples-{env.selector['gpucellpool.test/webhook']}")
    seen = env.server.stats.requests
    obj = in_namespace(sample, ns)
    proc = await kubectl(env.infra, "apply", "--server-side", "-f", "-", input=as_yaml(obj))
    assert proc.returncode == 0, f"{file}: {proc.stderr}"
    assert env.server.stats.requests > seen, "the webhook was not called"
    again = await kubectl(env.infra, "replace", "-f", "-", input=as_yaml(obj))
    assert again.returncode == 0, f"{file} (update): {again.stderr}"


async def test_kubectl_scale_beyond_max_replicas_is_refused(env: WebhookEnv) -> None:
    ns = await env.namespace(f"scale-{env.selector['gpucellpool.test/webhook']}")
    sample = next(s for f, s in SAMPLES if f == "autoscaling-on.yaml")
    ceiling = sample["spec"]["autoscaling"]["maxReplicas"]
    name = sample["metadata"]["name"]
    proc = await kubectl(env.infra, "apply", "--server-side", "-f", "-",
                         input=as_yaml(in_namespace(sample, ns)))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    denied_before = env.server.stats.denied
    over = await kubectl(env.infra, "scale", "gpucellpool", name, "-n", ns,
                         f"--replicas={ceiling + 3}")  # fmt: skip
    assert over.returncode != 0
    assert "spec.replicas: " in over.stderr, over.stderr
    assert "above spec.autoscaling.maxReplicas" in over.stderr
    assert env.server.stats.denied == denied_before + 1
    within = await kubectl(env.infra, "scale", "gpucellpool", name, "-n", ns,
                           f"--replicas={ceiling}")  # fmt: skip
    assert within.returncode == 0, within.stderr
    got = await kubectl(env.infra, "get", "gpucellpool", name, "-n", ns, "-o", "json")
    assert json.loads(got.stdout)["spec"]["replicas"] == ceiling


async def test_secret_holds_the_certificates_and_bundle(env: WebhookEnv) -> None:
    proc = await kubectl(env.infra, "get", "secret", "gpucellpool-webhook-cert",
                         "-n", env.system_namespace, "-o", "json")  # fmt: skip
    doc = json.loads(proc.stdout)
    assert doc["type"] == "kubernetes.io/tls"
    assert {"tls.crt", "tls.key", "ca.crt", "ca.key"} <= set(doc["data"])
    assert env.certs.current is not None
    assert await env.served_ca_bundle() == env.certs.current.bundle
