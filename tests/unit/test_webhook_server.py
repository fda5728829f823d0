"""The webhook server over real TLS on loopback: every input gets a well-formed answer.

No apiserver here (that is tests/integration/test_webhook_admission.py): requests are posted
with aiohttp to the server on 127.0.0.1, trusting the self-managed CA, to pin the HTTP contract
(400 for junk, denials naming every field, warnings, scale via the PoolReader port, internal
errors as denials, health) and the hot reload of a rotated certificate.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from tests.unit.webhook_corpus import load_cases
from webhook import certs, review
from webhook.server import VALIDATE_PATH, WebhookServer
from webhook.tls import CertificateError, ServingTLS

NAMES = certs.service_names("wh", "ops", extra_ips=("127.0.0.1",))
POLICY = certs.CertPolicy()
CASES = {c.name: c for c in load_cases()}


def issue(now: dt.datetime | None = None) -> certs.StoredCerts:
    t = now or dt.datetime.now(dt.UTC)
    stored = certs.execute(certs.plan(None, NAMES, t, POLICY), None, NAMES, t, POLICY)
    assert stored is not None
    return stored


class Pools:
    def __init__(self) -> None:
        self.pools: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.error: Exception | None = None

    async def get_pool(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        if self.error:
            raise self.error
        return self.pools.get((namespace, name))


class Running:
    def __init__(self, server: WebhookServer, stored: certs.StoredCerts, pools: Pools) -> None:
        self.server, self.stored, self.pools = server, stored, pools

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"

    def client_ssl(self, bundle: bytes | None = None) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=(bundle or self.stored.bundle).decode())

    async def post(self, body: bytes | dict[str, Any]) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url + VALIDATE_PATH, data=data, ssl=self.client_ssl()) as resp,
        ):
            return resp.status, json.loads(await resp.read())

    async def served_serial(self, bundle: bytes | None = None) -> int:
        """Handshake on a new connection and return the serial of the certificate served."""
        ctx = self.client_ssl(bundle)
        _, writer = await asyncio.open_connection("127.0.0.1", self.server.port, ssl=ctx)
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
            await writer.wait_closed()
        return int(x509.load_der_x509_certificate(der).serial_number)


class MayReadAll:
    """``SecretAccess`` answering yes (the access check has its own tests)."""

    async def may_get_secret(self, user: Any, namespace: str, name: str) -> bool:
        return True


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    stored, tls, pools = issue(), ServingTLS(), Pools()
    tls.load_pair(stored.serving)
    server = WebhookServer(tls, pools, host="127.0.0.1", port=0, secret_access=MayReadAll())
    await server.start()
    try:
        yield Running(server, stored, pools)
    finally:
        await server.stop()


def admission(
    obj: Any, operation: str = "CREATE", old: Any = None, sub: str = "", kind: str = "GPUCellPool"
) -> dict[str, Any]:
    meta = obj.get("metadata", {}) if isinstance(obj, dict) else {}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "cells.kubeswift.io", "version": "v1alpha1", "kind": kind},
        "operation": operation,
        "namespace": meta.get("namespace", "cells"),
        "name": meta.get("name", ""),
        "object": obj,
        "oldObject": old,
    }
    if sub:
        request["subResource"] = sub
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"kind": "Pod"}', "AdmissionReview"),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}', "request"),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}', "uid"),
    ],
)
async def test_junk_gets_400_with_a_message(running: Running, body: bytes, why: str) -> None:
    status, answer = await running.post(body)
    assert status == 400 and why in answer["message"]
    assert running.server.stats.bad_requests == 1


async def test_denial_lists_every_reason_with_its_path(running: Running) -> None:
    case = CASES["bad-shared-claim-two-replicas"]
    request = admission(case.object)
    status, answer = await running.post(request)
    resp = answer["response"]
    assert status == 200 and resp["uid"] == request["request"]["uid"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    expected = review.decide(review.parse_review(json.dumps(request).encode()), case.settings)
    assert len(expected.reasons) >= 1
    for reason in expected.reasons:
        assert f"{reason.path}: {reason.message}" in resp["status"]["message"]
    causes = {(c["field"], c["message"]) for c in resp["status"]["details"]["causes"]}
    assert causes == {(r.path, r.message) for r in expected.reasons}


async def test_warnings_pass_through_on_an_allowed_request(running: Running) -> None:
    case = CASES["good-ok-placement-warning"]
    status, answer = await running.post(admission(case.object))
    assert status == 200 and answer["response"]["allowed"] is True
    assert any(w.message in " ".join(answer["response"]["warnings"]) for w in case.warnings)


async def test_update_and_delete(running: Running) -> None:
    case = CASES["bad-update-provisioner-live"]
    _, answer = await running.post(admission(case.object, "UPDATE", case.old))
    assert answer["response"]["allowed"] is False
    assert "spec.cell.provisioner" in answer["response"]["status"]["message"]
    _, answer = await running.post(admission(None, "DELETE", case.old))
    assert answer["response"]["allowed"] is True


async def test_scale_reads_the_stored_pool(running: Running) -> None:
    case = CASES["bad-scale-above-max"]
    meta = case.old["metadata"]
    request = admission(case.object, "UPDATE", case.object, sub="scale", kind="Scale")
    _, answer = await running.post(request)
    assert answer["response"]["allowed"] is False, "pool unreadable: deny with a retry hint"
    assert "retry" in answer["response"]["status"]["message"]
    running.pools.pools[(meta["namespace"], meta["name"])] = case.old
    _, answer = await running.post(request)
    assert "above spec.autoscaling.maxReplicas" in answer["response"]["status"]["message"]
    within = {**case.object, "spec": {"replicas": 2}}
    _, answer = await running.post(admission(within, "UPDATE", case.object, "scale", "Scale"))
    assert answer["response"]["allowed"] is True
    running.pools.error = TimeoutError("apiserver slow")
    _, answer = await running.post(request)
    assert answer["response"]["allowed"] is False


async def test_rule_crash_is_a_wellformed_denial(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_args: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr("webhook.server.decide", explode)
    status, answer = await running.post(admission(CASES["bad-gpu-count-2"].object))
    assert status == 200 and answer["response"]["allowed"] is False
    assert answer["response"]["status"]["reason"] == "InternalError"
    assert running.server.stats.errors == 1


async def test_health_and_ready(running: Running) -> None:
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/readyz"):
            async with session.get(running.url + path, ssl=running.client_ssl()) as resp:
                assert resp.status == 200


async def test_rotated_certificate_is_served_to_new_connections(running: Running) -> None:
    before = await running.served_serial()
    assert before == running.stored.serving.cert.serial_number
    renewed = certs.new_serving(
        running.stored.ca, NAMES, dt.datetime.now(dt.UTC), dt.timedelta(hours=1)
    )
    assert running.server.tls.load_pair(renewed) is True
    assert running.server.tls.load_pair(renewed) is False, "same pair: no reload"
    assert await running.served_serial() == renewed.cert.serial_number


async def test_a_broken_pair_is_refused_and_the_old_one_keeps_serving(running: Running) -> None:
    other = issue()
    mismatched = certs.KeyPair(other.serving.cert_pem, running.stored.serving.key_pem)
    with pytest.raises(CertificateError):
        running.server.tls.load_pair(mismatched)
    assert await running.served_serial() == running.stored.serving.cert.serial_number


async def test_start_without_a_certificate_is_refused() -> None:
    with pytest.raises(RuntimeError, match="certificate"):
        await WebhookServer(ServingTLS(), Pools(), host="127.0.0.1", port=0).start()


async def test_scale_to_zero_arrives_without_replicas_and_is_judged_as_zero(
    running: Running,
) -> None:
    """autoscaling/v1 omits ``replicas: 0``; the apiserver sends ``spec: {}`` for scale-to-0."""
    case = CASES["bad-scale-down-unreachable"]
    meta = case.old["metadata"]
    running.pools.pools[(meta["namespace"], meta["name"])] = case.old
    as_sent = {**case.object, "spec": {}}
    _, answer = await running.post(admission(as_sent, "UPDATE", case.object, "scale", "Scale"))
    assert answer["response"]["allowed"] is False
    assert "unreachable" in answer["response"]["status"]["message"]
    assert "integer" not in answer["response"]["status"]["message"]
    stringly = {**case.object, "spec": {"replicas": "0"}}
    _, answer = await running.post(admission(stringly, "UPDATE", case.object, "scale", "Scale"))
    assert "must be an integer" in answer["response"]["status"]["message"]


async def test_oversized_body_gets_413_with_a_message(running: Running) -> None:
    status, answer = await running.post(b" " * (3 * 1024 * 1024 + 1))
    assert status == 413 and "larger than" in answer["message"]
