"""Rules on spec.autoscaling: the original's bounds, and sanity for our extensions.

Why this module exists: the autoscaler acts on these numbers without a human in the loop, so
nonsense must be refused at the door: a ceiling is required and above the floor, Auto
scale-down needs an explicit floor (reference §5 rule 10); and for our extensions, rate
policies must not contradict each other, the Prometheus URL must be a plain http(s) base URL
without credentials in it (they would sit in the object in clear), durations that the loop
divides by or waits on must be positive. Knobs that are legal but silently ignored (a legacy
window next to ``behavior``) produce warnings, not denials.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from gpucellpool.api.autoscaling import AutoscalingSpec, ScaleDownMode, ScalingRules, SelectPolicy
from gpucellpool.api.url_policy import judge_host
from webhook.rules.verdict import Findings

BASE = "spec.autoscaling"


def check_autoscaling(
    auto: AutoscalingSpec,
    replicas: int,
    found: Findings,
    allowed_hosts: frozenset[str] = frozenset(),
) -> None:
    """Rule 10 when enabled; extension checks always (a disabled pool may be enabled later)."""
    if auto.enabled:
        _bounds(auto, replicas, found)
    _behavior(auto, found)
    _prometheus(auto, found, allowed_hosts)
    _durations(auto, found)


def _bounds(auto: AutoscalingSpec, replicas: int, found: Findings) -> None:
    if auto.max_replicas is None:
        found.error(
            f"{BASE}.maxReplicas",
            "is required when autoscaling is enabled; set the most cells the pool may have",
        )
    elif auto.min_replicas is not None and auto.min_replicas > auto.max_replicas:
        found.error(
            f"{BASE}.minReplicas",
            f"({auto.min_replicas}) is above maxReplicas "
            f"({auto.max_replicas}); lower minReplicas or raise maxReplicas",
        )
    elif auto.min_replicas is None and replicas > auto.max_replicas:
        found.warn(
            "spec.replicas",
            f"({replicas}) is the floor while minReplicas is unset and "
            f"is above maxReplicas ({auto.max_replicas}); the floor wins",
        )
    if auto.scale_down is ScaleDownMode.AUTO and auto.min_replicas is None:
        found.error(
            f"{BASE}.minReplicas",
            "is required when scaleDown is Auto; set the fewest "
            "cells the pool may shrink to (0 allows scale to zero)",
        )
    if auto.max_replicas is not None and auto.headroom_cells >= auto.max_replicas:
        found.warn(
            f"{BASE}.headroomCells",
            f"({auto.headroom_cells}) is not below maxReplicas "
            f"({auto.max_replicas}); the pool would sit at its ceiling",
        )


def _behavior(auto: AutoscalingSpec, found: Findings) -> None:
    behavior = auto.behavior
    if behavior is None:
        return
    pairs = (
        ("scaleUp", behavior.scale_up, "stabilizationWindow", auto.stabilization_window),
        (
            "scaleDown",
            behavior.scale_down,
            "scaleDownStabilizationWindow",
            auto.scale_down_stabilization_window,
        ),
    )
    for name, rules, legacy, legacy_value in pairs:
        if rules is None:
            continue
        _rules(f"{BASE}.behavior.{name}", rules, found)
        if legacy_value is not None:
            found.warn(
                f"{BASE}.{legacy}", f"is ignored because behavior.{name} is set; remove one of them"
            )
    if behavior.scale_down is not None and auto.scale_down is not ScaleDownMode.AUTO:
        found.warn(
            f"{BASE}.behavior.scaleDown",
            "has no effect unless scaleDown is Auto; set scaleDown: Auto or remove it",
        )


def _rules(path: str, rules: ScalingRules, found: Findings) -> None:
    policies = rules.policies or []
    seen: set[tuple[str, int]] = set()
    for i, policy in enumerate(policies):
        key = (policy.type.value, policy.period_seconds)
        if key in seen:
            found.error(
                f"{path}.policies[{i}]",
                f"repeats type {key[0]} with periodSeconds "
                f"{key[1]}; merge the two policies into one",
            )
        seen.add(key)
    if rules.select_policy is SelectPolicy.DISABLED and policies:
        found.warn(
            f"{path}.policies",
            "are ignored because selectPolicy is Disabled (this "
            "direction never scales); remove them or change selectPolicy",
        )


def _prometheus(auto: AutoscalingSpec, found: Findings, allowed_hosts: frozenset[str]) -> None:
    prom = auto.prometheus
    if prom is None:
        return
    path = f"{BASE}.prometheus"
    problem = url_problem(prom.url, allowed_hosts)
    if problem:
        found.error(f"{path}.url", problem)
        return
    https = prom.url.startswith("https://")
    if not https and prom.tls_secret_ref is not None:
        found.warn(f"{path}.tlsSecretRef", "is unused with an http:// url; use https://")
    if not https and prom.auth_secret_ref is not None:
        found.warn(
            f"{path}.authSecretRef", "sends the bearer token in clear over http://; use https://"
        )
    if prom.insecure_skip_verify and prom.tls_secret_ref is not None:
        found.error(f"{path}.insecureSkipVerify", "contradicts tlsSecretRef; remove one of them")
    elif prom.insecure_skip_verify:
        found.warn(
            f"{path}.insecureSkipVerify",
            "disables TLS verification; set tlsSecretRef instead outside of tests",
        )
    if prom.stale_after.seconds <= 0:
        found.error(
            f"{path}.staleAfter", "must be positive (0 makes every sample stale); use e.g. 2m"
        )


def url_problem(url: str, allowed_hosts: frozenset[str] = frozenset()) -> str | None:
    """Why ``url`` is not a usable Prometheus base URL, or None (never echoes the URL).

    The host is judged by ``gpucellpool.api.url_policy``, the same policy the operator's HTTP
    transport applies again to every resolved address before it connects: metadata services
    and link-local addresses always refused, loopback and the like unless the cluster admin
    allowlisted the host, every spelling the HTTP client would normalise to one of them too.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "is not a valid URL (bad host or port); use e.g. https://prometheus.monitoring:9090"
    checks = (
        (parts.scheme not in ("http", "https"), "must start with http:// or https://; fix it"),
        (
            parts.username is not None or parts.password is not None,
            "must not carry credentials (they would be stored in the pool in clear); put a "
            "token in a Secret and reference it with authSecretRef",
        ),
        (not parts.hostname, "needs a host, e.g. https://prometheus.monitoring:9090; add it"),
        (
            bool(parts.query or parts.fragment),
            "must be a base URL; remove the ?query and #fragment",
        ),
        (port == 0, "port 0 is not a port; fix it"),
    )
    problem = next((message for failed, message in checks if failed), None)
    if problem:
        return problem
    verdict = judge_host(parts.hostname or "", allowed_hosts)
    if verdict.allowed:
        return None
    return (
        f"{verdict.reason}; link-local, loopback and cloud metadata addresses are refused "
        "(the operator would call them from inside the cluster, with the bearer token); use "
        "the Prometheus service's DNS name"
    )


def _durations(auto: AutoscalingSpec, found: Findings) -> None:
    if auto.prewarm.enabled and auto.prewarm.boot_time.seconds <= 0:
        found.error(
            f"{BASE}.prewarm.bootTime",
            "must be positive when prewarm is enabled; set the expected cell boot time, e.g. 5m",
        )
    if auto.drain.timeout is not None and auto.drain.timeout.seconds <= 0:
        found.error(
            f"{BASE}.drain.timeout", "must be positive; omit it to wait for ever, or set e.g. 15m"
        )
