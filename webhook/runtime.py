"""Start the webhook in one of its certificate modes (for the composition root).

Why this module exists: the operator's ``main`` should not know how certificates are obtained.
``start_webhook`` takes the options (chart values / flags) and an API client and returns a
running server with its certificate machinery:

* ``self-managed``: ``webhook.certstore.SelfManagedCerts`` creates or renews the CA and the
  serving certificate in a Secret and patches ``caBundle`` into the ValidatingWebhookConfiguration
  (also when both were applied empty by ``helm template`` or a GitOps tool);
* ``cert-manager`` (or any externally managed Secret): the mounted ``tls.crt``/``tls.key`` are
  served and re-read when they change; ``caBundle`` is left to cert-manager's CA injector.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpucellpool.kube.rest import RestClient
from webhook import certs
from webhook.certstore import SelfManagedCerts
from webhook.kube import KubePoolReader, KubeSecretAccess, KubeSecretStore, KubeWebhookCABundle
from webhook.rules import DEFAULT_SETTINGS, RuleSettings
from webhook.server import WebhookServer
from webhook.tls import FileWatcher, ServingTLS

Mode = Literal["self-managed", "cert-manager"]
WEBHOOK_FIELD_MANAGER = "gpucellpool-webhook"


@dataclass(frozen=True)
class WebhookOptions:
    """Everything that configures the webhook process (defaults match the Helm chart)."""

    mode: Mode = "self-managed"
    namespace: str = "gpucellpool-system"
    service: str = "gpucellpool-webhook"
    secret: str = "gpucellpool-webhook-cert"
    configuration: str = "gpucellpool-validating-webhook"
    host: str = "0.0.0.0"
    port: int = 9443
    cert_dir: Path = Path("/etc/gpucellpool/webhook-certs")
    extra_dns: tuple[str, ...] = ()
    extra_ips: tuple[str, ...] = ()
    serving_lifetime: dt.timedelta = dt.timedelta(days=365)
    ca_lifetime: dt.timedelta = dt.timedelta(days=3650)
    settings: RuleSettings = field(default=DEFAULT_SETTINGS)


@dataclass
class RunningWebhook:
    """A started server and whatever keeps its certificate fresh."""

    server: WebhookServer
    certificates: SelfManagedCerts | FileWatcher

    async def stop(self) -> None:
        """Stop renewing, then stop serving."""
        await self.certificates.stop()
        await self.server.stop()


async def start_webhook(rest: RestClient, options: WebhookOptions) -> RunningWebhook:
    """Obtain a certificate for ``options.mode``, then listen; raises if none can be had.

    Its writes (certificate Secret, caBundle) use field manager ``gpucellpool-webhook``."""
    door = rest.for_manager(WEBHOOK_FIELD_MANAGER)
    tls = ServingTLS()
    keeper: SelfManagedCerts | FileWatcher
    if options.mode == "self-managed":
        names = certs.service_names(
            options.service, options.namespace, options.extra_dns, options.extra_ips
        )
        keeper = SelfManagedCerts(
            KubeSecretStore(door, options.namespace, options.secret),
            KubeWebhookCABundle(door, options.configuration),
            tls,
            names,
            certs.CertPolicy(options.serving_lifetime, options.ca_lifetime),
        )
        await keeper.start()
    else:
        keeper = FileWatcher(
            tls, options.cert_dir / certs.TLS_CRT, options.cert_dir / certs.TLS_KEY
        )
        if not keeper.check():
            raise RuntimeError(f"no usable certificate in {options.cert_dir}")
        keeper.start()
    server = WebhookServer(
        tls,
        KubePoolReader(door),
        options.settings,
        options.host,
        options.port,
        secret_access=KubeSecretAccess(door),
    )
    try:
        await server.start()
    except BaseException:
        await keeper.stop()
        raise
    return RunningWebhook(server, keeper)
