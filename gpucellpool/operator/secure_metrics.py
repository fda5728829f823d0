"""The certificate and access guard of the secured ``/metrics`` port.

Why this module exists: the composition root should only say "serve metrics securely"; where
the certificate comes from is a separate choice. A mounted ``tls.crt``/``tls.key`` (cert-manager
or any Secret) is served and re-read when it changes, as the webhook does. Without one, the
operator makes a self-signed certificate in memory at start (never written anywhere), which
is what Prometheus Operator users scraping with ``insecureSkipVerify`` expect, and the bearer
token check still applies: TLS keeps the token and the series private on the wire, the
TokenReview/SubjectAccessReview pair decides who may read them.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpucellpool.operator.health import SecureMetricsSite
from gpucellpool.runtime.metrics_access import AccessReviewer, MetricsGuard
from webhook import certs
from webhook.tls import FileWatcher, ServingTLS

log = logging.getLogger(__name__)

SELF_SIGNED_LIFETIME = dt.timedelta(days=365)


@dataclass(frozen=True, slots=True)
class MetricsOptions:
    """``secure`` False: ``/metrics`` stays on the probe port, plain (development, the demo)."""

    secure: bool = False
    host: str = "0.0.0.0"
    port: int = 8443
    cert_dir: Path | None = None
    names: tuple[str, ...] = ("gpucellpool-metrics",)
    cache_s: float = 60.0


def _tls(options: MetricsOptions, now: dt.datetime) -> tuple[ServingTLS, FileWatcher | None]:
    tls = ServingTLS()
    if options.cert_dir is not None:
        cert, key = options.cert_dir / "tls.crt", options.cert_dir / "tls.key"
        tls.load_files(cert, key)  # a missing or broken pair fails the start, loudly
        return tls, FileWatcher(tls, cert, key)
    ca = certs.new_ca("gpucellpool-metrics-ca", now, SELF_SIGNED_LIFETIME)
    names = certs.Names(dns=options.names)
    tls.load_pair(certs.new_serving(ca, names, now, SELF_SIGNED_LIFETIME))
    log.info("metrics: serving a self-signed certificate (mount tls.crt/tls.key to replace it)")
    return tls, None


def secure_site(
    options: MetricsOptions, reviewer: AccessReviewer, now: Callable[[], float]
) -> tuple[SecureMetricsSite | None, FileWatcher | None]:
    """The secured site (and the watcher to start for a mounted certificate), or nothing."""
    if not options.secure:
        return None, None
    tls, watcher = _tls(options, dt.datetime.fromtimestamp(now(), dt.UTC))
    guard = MetricsGuard(reviewer, now, ttl_s=options.cache_s)
    return SecureMetricsSite(tls.context, guard, options.host, options.port), watcher
