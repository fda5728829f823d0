"""Build a pool's Prometheus adapter from its spec and the Secret values already read.

Why this module exists: the composition root reads a pool's ``spec.autoscaling.prometheus``
and the Secrets it references (someone else's job), then needs one adapter per pool. The
rules that matter live here: a referenced token or CA bundle that was not read is an error,
never a silent fall-back to unauthenticated requests or to the system trust store.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from autoscaler.signals.prometheus import PrometheusSource
from gpucellpool.api import PrometheusSource as PrometheusSpec
from gpucellpool.api.clock import Clock


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """A pool's Prometheus settings, already resolved to plain values.

    The bearer token is not here: the caller reads it from the referenced Secret key and
    passes the string to :func:`source_from_settings`.
    """

    url: str
    stale_after_seconds: float = 60.0
    insecure_skip_verify: bool = False
    ca_pem: str | None = None  # PEM bundle, e.g. from a Secret or ConfigMap key
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    timeout_seconds: float = 5.0


def source_from_settings(
    settings: PrometheusSettings,
    *,
    bearer_token: str | None,
    clock: Clock,
    transport: httpx.AsyncBaseTransport | None = None,
    allowed_hosts: Iterable[str] | None = None,
) -> PrometheusSource:
    """Build the adapter for one pool from its settings and its already-read token.

    ``allowed_hosts`` (the cluster admin's allowlist, possibly empty) turns on the connect-time
    URL policy; the operator always passes it for a pool's URL.
    """
    cert = None
    if settings.client_cert_file:
        cert = (settings.client_cert_file, settings.client_key_file or settings.client_cert_file)
    return PrometheusSource(
        settings.url,
        bearer_token=bearer_token,
        verify=not settings.insecure_skip_verify,
        ca_file=settings.ca_file,
        ca_pem=settings.ca_pem,
        client_cert=cert,
        timeout_seconds=settings.timeout_seconds,
        stale_after_seconds=settings.stale_after_seconds,
        clock=clock,
        transport=transport,
        allowed_hosts=allowed_hosts,
    )


def settings_from_spec(spec: PrometheusSpec, *, ca_pem: str | None = None) -> PrometheusSettings:
    """Plain settings from a pool's ``spec.autoscaling.prometheus``.

    ``ca_pem`` is the already-read content of ``tlsSecretRef``'s key; it is required when the
    spec names one, so a missing Secret can never silently fall back to the system trust.
    """
    if spec.tls_secret_ref is not None and not ca_pem:
        raise ValueError(f"tlsSecretRef {spec.tls_secret_ref.name!r} given but no CA bundle read")
    return PrometheusSettings(
        url=spec.url,
        stale_after_seconds=spec.stale_after.seconds,
        insecure_skip_verify=spec.insecure_skip_verify,
        ca_pem=ca_pem if spec.tls_secret_ref is not None else None,
    )


def source_from_spec(
    spec: PrometheusSpec,
    *,
    bearer_token: str | None,
    ca_pem: str | None = None,
    clock: Clock,
    transport: httpx.AsyncBaseTransport | None = None,
    allowed_hosts: Iterable[str] | None = None,
) -> PrometheusSource:
    """The adapter for one pool, from its spec and the already-read Secret values.

    A spec that names an ``authSecretRef`` needs its token: without one this raises rather
    than quietly querying unauthenticated.
    """
    if spec.auth_secret_ref is not None and not bearer_token:
        raise ValueError(f"authSecretRef {spec.auth_secret_ref.name!r} given but no token read")
    settings = settings_from_spec(spec, ca_pem=ca_pem)
    return source_from_settings(
        settings,
        bearer_token=bearer_token,
        clock=clock,
        transport=transport,
        allowed_hosts=allowed_hosts,
    )
