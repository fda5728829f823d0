"""What one ``gpucellpool run`` process is configured with, and the settings read from its
environment.

Why this module exists: the settings are the composition root's input, built by ``run`` from the
flags and by tests directly; the namespaces they name (watched, served) and the chart's
``GPUCELLPOOL_WEBHOOK_*`` environment contract are read the same way by the root, the CLI and the
chart tests. Keeping them apart from ``app`` leaves the root to wiring alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucellpool.operator.secure_metrics import MetricsOptions
from webhook.rules import DEFAULT_SETTINGS, RuleSettings
from webhook.runtime import WebhookOptions

__all__ = [
    "WEBHOOK_ENV_PREFIX",
    "Settings",
    "served_secret_namespaces",
    "watched_namespaces",
    "webhook_options_from_env",
]


@dataclass(frozen=True, slots=True)
class Settings:
    identity: str
    lease_namespace: str
    kubeconfig: str | None = None
    lease_name: str = "gpucellpool-autoscaler"
    lease_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0
    health_host: str = "0.0.0.0"  # probes come from the kubelet, on the pod IP
    health_port: int = 8081
    debounce_s: float = 0.15
    tick_s: float = 10.0
    pool_namespace: str | None = None  # one namespace (kept for callers); see pool_namespaces
    pool_namespaces: tuple[str, ...] = ()  # with pool_namespace: the watched set; none: all
    served_namespaces: tuple[str, ...] = ()  # pools served only there (Secrets readable); none: all
    api_timeout_s: float = 10.0
    provision: bool = True  # False: decide only (another process runs the provisioner)
    webhook: WebhookOptions | None = None  # None: no admission webhook in this process
    metrics: MetricsOptions = field(default_factory=MetricsOptions)  # secure=False: plain
    rules: RuleSettings = DEFAULT_SETTINGS  # admission rule settings: webhook + provisioner
    shards: int = 1  # pools split across this many processes (gpucellpool.runtime.shards)
    shard_index: int = 0  # this process's own shard; it stands by for the others


def watched_namespaces(settings: Settings) -> tuple[str | None, ...]:
    """The namespaces to watch, in order, without repeats; ``(None,)`` means all of them."""
    named = [settings.pool_namespace, *settings.pool_namespaces]
    unique = tuple(dict.fromkeys(ns for ns in named if ns))
    return unique or (None,)


def served_secret_namespaces(settings: Settings) -> tuple[str, ...]:
    """Where the operator may list its own Secrets (the chart's Secret Roles): the served
    namespaces, else the watched ones; none when it watches and serves every namespace (a
    cluster-wide Secret watch is never asked for: those lists stay GETs)."""
    named = tuple(ns for ns in watched_namespaces(settings) if ns)
    return settings.served_namespaces or named


WEBHOOK_ENV_PREFIX = "GPUCELLPOOL_WEBHOOK_"


def webhook_options_from_env(environ: Mapping[str, str]) -> WebhookOptions | None:
    """``WebhookOptions`` from ``GPUCELLPOOL_WEBHOOK_<FIELD>`` (the chart's contract).

    None unless ``GPUCELLPOOL_WEBHOOK_ENABLED`` is true. Unknown variables are ignored; a value
    that does not convert raises ``ValueError`` naming the variable (fail at start, loudly).
    """
    if environ.get(f"{WEBHOOK_ENV_PREFIX}ENABLED", "").lower() != "true":
        return None
    values: dict[str, Any] = {}
    for f in dataclasses.fields(WebhookOptions):
        raw = environ.get(f"{WEBHOOK_ENV_PREFIX}{f.name.upper()}")
        if raw is None or f.name in ("settings", "serving_lifetime", "ca_lifetime"):
            continue
        try:
            if f.name == "port":
                values[f.name] = int(raw)
            elif f.name == "cert_dir":
                values[f.name] = Path(raw)
            elif f.name in ("extra_dns", "extra_ips"):
                values[f.name] = tuple(v.strip() for v in raw.split(",") if v.strip())
            else:
                values[f.name] = raw
        except ValueError as exc:
            raise ValueError(f"{WEBHOOK_ENV_PREFIX}{f.name.upper()}: {exc}") from exc
    if values.get("mode", "self-managed") not in ("self-managed", "cert-manager"):
        raise ValueError(f"{WEBHOOK_ENV_PREFIX}MODE must be self-managed or cert-manager")
    return WebhookOptions(**values)
