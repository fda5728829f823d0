"""Certificate rotation under load: a 20-second serving certificate, zero failed admissions.

The self-managed certificate loop renews the serving certificate every ~13 s (when a third of
its 20 s life is left) -- and, in the second variant, a 40 s CA too, in two phases (new CA
added to the bundle, serving certificate re-issued by it 3 s later, old CA pruned when it
expires) -- while two workers keep creating, updating and deleting pools through
the real apiserver, which calls our webhook with failurePolicy Fail. Every write must succeed;
the certificate must really have rotated (several serials seen on fresh handshakes, each
verifying against the caBundle the apiserver holds), and admissions must keep working after
the first certificate has expired.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from simulations.harness import ClusterEndpoint
from tests.integration.test_webhook_env import WebhookEnv, as_yaml, in_namespace, kubectl
from tests.integration.test_webhook_env import webhook_env as start_env
from webhook import certs

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((ROOT / "config/samples/autoscaling-on.yaml").read_text())
LIFETIME = dt.timedelta(seconds=20)
RUN_SECONDS = 48.0
WORKERS = 2


async def _worker(env: WebhookEnv, ns: str, index: int, deadline: float) -> tuple[int, list[str]]:
    """Create, update (spec change: judged by the rules) and delete pools until the deadline."""
    done, failures, i = 0, [], 0
    while time.monotonic() < deadline:
        name = f"rot-{index}-{i}"
        i += 1
        obj = in_namespace(SAMPLE, ns)
        obj["metadata"]["name"] = name
        steps = (
            ("create", "-f", "-"),
            ("patch", "gpucellpool", name, "-n", ns, "--type=merge", "-p",
             json.dumps({"spec": {"autoscaling": {"maxReplicas": 5 + i % 3}}})),
            ("delete", "gpucellpool", name, "-n", ns, "--wait=true"),
        )  # fmt: skip
        for args in steps:
            proc = await kubectl(
                env.infra, *args, input=as_yaml(obj) if args[0] == "create" else None
            )
            if proc.returncode != 0:
                failures.append(f"{args[0]} {name}: {proc.stderr.strip()}")
            else:
                done += 1
    return done, failures


async def _served(env: WebhookEnv) -> tuple[int, str]:
    """A fresh handshake, trusting exactly the caBundle the apiserver holds: (serial, issuer)."""
    ctx = ssl.create_default_context(cadata=(await env.served_ca_bundle()).decode())
    _, writer = await asyncio.open_connection("127.0.0.1", env.server.port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    cert = x509.load_der_x509_certificate(der)
    return int(cert.serial_number), cert.issuer.rfc4514_string()


async def _sample_served(env: WebhookEnv, deadline: float) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    while time.monotonic() < deadline:
        seen.add(await _served(env))
        await asyncio.sleep(0.5)  # sampling rate, not synchronisation
    return seen


SERVING_ONLY = certs.CertPolicy(serving_lifetime=LIFETIME, ca_lifetime=dt.timedelta(days=1))
WITH_CA = certs.CertPolicy(
    serving_lifetime=LIFETIME,
    ca_lifetime=dt.timedelta(seconds=40),
    propagation=dt.timedelta(seconds=3),
)


@pytest.mark.parametrize(
    ("policy", "min_issuers"),
    [(SERVING_ONLY, 1), (WITH_CA, 2)],
    ids=["serving-cert", "ca-and-serving-cert"],
)
async def test_rotation_under_load_drops_nothing(
    infra: ClusterEndpoint, policy: certs.CertPolicy, min_issuers: int
) -> None:
    async with start_env(infra, policy) as env:
        ns = await env.namespace(f"rotation-{env.selector['gpucellpool.test/webhook']}")
        assert env.certs.current is not None
        first = env.certs.current.serving.cert
        rotations_before, requests_before = env.certs.rotations, env.server.stats.requests
        deadline = time.monotonic() + RUN_SECONDS
        sampler = asyncio.ensure_future(_sample_served(env, deadline))
        results = await asyncio.gather(*(_worker(env, ns, w, deadline) for w in range(WORKERS)))
        served = await sampler
        done = sum(r[0] for r in results)
        failures = [f for r in results for f in r[1]]
        rotations = env.certs.rotations - rotations_before
        webhook_calls = env.server.stats.requests - requests_before
        issuers = {issuer for _, issuer in served}
        print(f"rotation: {done} writes, {webhook_calls} webhook calls, {rotations} rotations, "
              f"{len(served)} serials from {len(issuers)} CAs served, "
              f"failures={len(failures)}")  # fmt: skip
        assert failures == [], failures[:5]
        assert rotations >= 3, f"only {rotations} rotations in {RUN_SECONDS}s"
        assert len(served) >= 3, served
        assert len(issuers) >= min_issuers, issuers
        assert webhook_calls >= done * 2 // 3, "creates and patches go through the webhook"
        assert dt.datetime.now(dt.UTC) > first.not_valid_after_utc, "the first cert expired"
        late = await kubectl(env.infra, "create", "-f", "-",
                             input=as_yaml(in_namespace(SAMPLE, ns)))  # fmt: skip
        assert late.returncode == 0, late.stderr
        assert env.server.stats.errors == 0
