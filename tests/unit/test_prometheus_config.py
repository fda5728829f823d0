"""Tests: building a pool's Prometheus adapter from its spec and already-read Secret values."""

from __future__ import annotations

import ssl

import httpx
import pytest
import respx

from autoscaler.signals.prometheus_config import settings_from_spec, source_from_spec
from gpucellpool.api import PrometheusSource as PrometheusSpec
from simulations.simulator.engine.clock import VirtualClock

TOKEN = "pool-token-0a1b2c"


def spec(**fields: object) -> PrometheusSpec:
    return PrometheusSpec.model_validate({"url": "https://prom.test:9090", **fields})


def system_ca_pem() -> str | None:
    bundle = ssl.get_default_verify_paths().cafile
    if not bundle:
        return None
    with open(bundle) as handle:
        return handle.read()


def test_defaults_follow_the_spec() -> None:
    settings = settings_from_spec(spec())
    assert settings.url == "https://prom.test:9090"
    assert settings.stale_after_seconds == 120.0  # the API default, 2m
    assert not settings.insecure_skip_verify
    assert settings.ca_pem is None


def test_stale_after_and_insecure() -> None:
    settings = settings_from_spec(spec(staleAfter="45s", insecureSkipVerify=True))
    assert settings.stale_after_seconds == 45.0
    assert settings.insecure_skip_verify


def test_tls_secret_needs_its_ca_bundle() -> None:
    with pytest.raises(ValueError, match="tlsSecretRef 'prom-ca' given but no CA bundle read"):
        settings_from_spec(spec(tlsSecretRef={"name": "prom-ca"}))
    assert settings_from_spec(spec(tlsSecretRef={"name": "prom-ca"}), ca_pem="PEM").ca_pem == "PEM"
    # a CA read for a spec that does not reference one is not used
    assert settings_from_spec(spec(), ca_pem="PEM").ca_pem is None


def test_auth_secret_needs_its_token() -> None:
    with pytest.raises(ValueError, match="authSecretRef 'prom-auth' given but no token read"):
        source_from_spec(
            spec(authSecretRef={"name": "prom-auth"}),
            bearer_token=None,
            clock=VirtualClock(1_800_000_000.0),
        )


async def test_source_from_spec_sends_the_token_and_uses_stale_after() -> None:
    with respx.mock() as router:
        route = router.post("https://prom.test:9090/api/v1/query").mock(
            return_value=httpx.Response(
                200, json={"status": "success", "data": {"resultType": "vector", "result": []}}
            )
        )
        pool = spec(authSecretRef={"name": "prom-auth"}, staleAfter="30s")
        async with source_from_spec(
            pool, bearer_token=TOKEN, clock=VirtualClock(1_800_000_000.0)
        ) as src:
            await src.query("up")
            assert src.stale_after_seconds == 30.0
            assert TOKEN not in repr(src)
    assert route.calls.last.request.headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_real_ca_bundle_is_accepted() -> None:
    pem = system_ca_pem()
    if pem is None:
        pytest.skip("no system CA bundle to load")
    src = source_from_spec(
        spec(tlsSecretRef={"name": "prom-ca"}),
        bearer_token=None,
        ca_pem=pem,
        clock=VirtualClock(1_800_000_000.0),
    )
    assert repr(src).startswith("PrometheusSource(url=")


def test_a_garbage_ca_bundle_is_an_error() -> None:
    with pytest.raises(ssl.SSLError):
        source_from_spec(
            spec(tlsSecretRef={"name": "prom-ca"}),
            bearer_token=None,
            ca_pem="-----BEGIN CERTIFICATE-----\nbad\n-----END CERTIFICATE-----\n",
            clock=VirtualClock(1_800_000_000.0),
        )
