"""The Helm chart's webhook and metrics wiring, rendered by the real helm.

What these prove: the webhook's environment matches the runtime options and the objects it
names; self-managed certificates and cert-manager (the chart's issuer or the user's) render
consistently; metrics stay secured unless turned off, the ServiceMonitor scrapes the metrics
Service as the alerts' job, and the PrometheusRule and dashboards ship verbatim. Helpers and
scenarios: ``chart_support``.
"""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
import yaml

from gpucellpool.cli import build_parser
from gpucellpool.operator import dashboards
from gpucellpool.operator.run import settings_from
from tests.integration import chart_support
from tests.integration.chart_support import (
    CHART,
    FULLNAME,
    NS,
    Doc,
    deployment_env,
    find,
    one,
    rules,
    webhook_of,
)
from webhook.runtime import WebhookOptions

helm = chart_support.helm  # the fixtures
rendered = chart_support.rendered


def test_webhook_env_matches_the_runtime_options_and_the_objects(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["default"]
    prefix = "GPUCELLPOOL_WEBHOOK_"
    env = {k.removeprefix(prefix).lower(): v for k, v in deployment_env(docs).items()
           if k.startswith(prefix) and k != f"{prefix}ENABLED"}  # fmt: skip
    assert set(env) <= {f.name for f in fields(WebhookOptions)}
    hook = webhook_of(docs)
    assert env["service"] == hook["clientConfig"]["service"]["name"]
    assert env["namespace"] == hook["clientConfig"]["service"]["namespace"] == NS
    assert env["configuration"] == one(docs, "ValidatingWebhookConfiguration")["metadata"]["name"]
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(env["port"]) == ports["webhook"]
    assert one(docs, "Service", env["service"])["spec"]["ports"][0]["targetPort"] == "webhook"
    secret_rule = [r for r in rules(one(docs, "Role", f"{FULLNAME}-self"))
                   if r.get("resourceNames") and "secrets" in r["resources"]]  # fmt: skip
    assert env["secret"] in secret_rule[0]["resourceNames"]


def test_webhook_self_managed(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["default"]
    hook = webhook_of(docs)
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["rules"][0]["resources"] == ["gpucellpools", "gpucellpools/scale"]
    svc = hook["clientConfig"]["service"]
    assert svc["path"] == "/validate-cells-kubeswift-io-v1alpha1-gpucellpool"
    assert "caBundle" not in hook["clientConfig"]  # the operator injects it
    service = one(docs, "Service", svc["name"])
    pod = one(docs, "Deployment")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    port_names = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] in port_names
    vwc_rule = [r for r in rules(one(docs, "ClusterRole", f"{FULLNAME}-manager"))
                if "validatingwebhookconfigurations" in r["resources"]]  # fmt: skip
    assert vwc_rule[0]["resourceNames"] == [
        one(docs, "ValidatingWebhookConfiguration")["metadata"]["name"]
    ]
    assert deployment_env(docs)["GPUCELLPOOL_WEBHOOK_MODE"] == "self-managed"
    assert not find(docs, "Certificate")


@pytest.mark.parametrize("scenario", ["cert-manager", "cert-manager-issuer"])
def test_webhook_cert_manager(rendered: dict[str, list[Doc]], scenario: str) -> None:
    docs = rendered[scenario]
    vwc = one(docs, "ValidatingWebhookConfiguration")
    cert = one(docs, "Certificate")
    ref = f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == ref
    svc = webhook_of(docs)["clientConfig"]["service"]
    assert f"{svc['name']}.{svc['namespace']}.svc" in cert["spec"]["dnsNames"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    secret_volumes = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    assert secret_volumes == [cert["spec"]["secretName"]]
    env = deployment_env(docs)
    assert env["GPUCELLPOOL_WEBHOOK_MODE"] == "cert-manager"
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert env["GPUCELLPOOL_WEBHOOK_CERT_DIR"] in mounts
    issuers = find(docs, "Issuer")
    if scenario == "cert-manager":
        assert cert["spec"]["issuerRef"]["name"] == one(docs, "Issuer")["metadata"]["name"]
    else:
        assert not issuers and cert["spec"]["issuerRef"]["kind"] == "ClusterIssuer"
    manager = one(docs, "ClusterRole", f"{FULLNAME}-manager")
    assert not any("validatingwebhookconfigurations" in r["resources"] for r in rules(manager))


def test_metrics_off_renders_no_scrape_objects(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["metrics-off"]
    assert not find(docs, "ServiceMonitor")
    assert not [s for s in find(docs, "Service") if s["metadata"]["name"].endswith("-metrics")]


def test_metrics_off_still_keeps_metrics_secured(rendered: dict[str, list[Doc]]) -> None:
    """metrics.enabled only drops the Service; /metrics must not fall back to plain HTTP on
    the probe port, open to anyone who reaches the pod (it did: --metrics-secure was dropped)."""
    docs = rendered["metrics-off"]
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = chart_support.container_args(container)
    assert settings_from(build_parser(args).parse_args(args)).metrics.secure
    manager = one(docs, "ClusterRole", f"{FULLNAME}-manager")
    reviews = {r for rule in rules(manager) for r in rule.get("resources") or ()}
    assert {"tokenreviews", "subjectaccessreviews"} <= reviews
    assert find(docs, "ClusterRole", f"{FULLNAME}-metrics-reader")


def test_servicemonitor_scrapes_the_metrics_service_as_the_alerts_job(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["monitoring"]
    sm = one(docs, "ServiceMonitor")
    svc = one(docs, "Service", f"{FULLNAME}-metrics")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True
    job = svc["metadata"]["labels"][sm["spec"]["jobLabel"]]
    rules_text = (CHART / "files" / "prometheus-rules.yaml").read_text()
    assert f'up{{job="{job}"}}' in rules_text


@pytest.mark.parametrize("scenario", ["monitoring", "metrics-cert", "metrics-plain"])
def test_metrics_are_secured_unless_turned_off(
    rendered: dict[str, list[Doc]], scenario: str
) -> None:
    docs = rendered[scenario]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    args = chart_support.container_args(pod["containers"][0])
    settings = settings_from(build_parser(args).parse_args(args))
    svc_port = one(docs, "Service", f"{FULLNAME}-metrics")["spec"]["ports"][0]
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    manager = one(docs, "ClusterRole", f"{FULLNAME}-manager")
    reviews = {r for rule in rules(manager) for r in rule.get("resources") or ()}
    reader = find(docs, "ClusterRole", f"{FULLNAME}-metrics-reader")
    if scenario == "metrics-plain":
        assert not settings.metrics.secure and svc_port["targetPort"] == "http"
        assert "scheme" not in endpoint and not reader
        # subjectaccessreviews stay: the webhook checks Secret references with them
        assert "tokenreviews" not in reviews
        return
    assert settings.metrics.secure and svc_port["targetPort"] == "https-metrics"
    assert endpoint["scheme"] == "https" and "bearerTokenFile" not in endpoint  # deprecated
    assert endpoint["authorization"]["type"] == "Bearer"
    assert {"tokenreviews", "subjectaccessreviews"} <= reviews
    assert list(rules(one(reader, "ClusterRole"))) == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    mounted = {v["name"]: v for v in pod.get("volumes") or []}
    if scenario == "metrics-cert":
        assert mounted["metrics-certs"]["secret"]["secretName"] == "metrics-tls"
        assert str(settings.metrics.cert_dir) == "/etc/gpucellpool/metrics-certs"
        assert "insecureSkipVerify" not in endpoint["tlsConfig"]
    else:
        assert "metrics-certs" not in mounted and settings.metrics.cert_dir is None
        assert endpoint["tlsConfig"]["insecureSkipVerify"] is True


def test_prometheusrule_is_the_rules_file_verbatim(rendered: dict[str, list[Doc]]) -> None:
    rule = one(rendered["monitoring"], "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert not find(rendered["default"], "PrometheusRule")


def test_dashboards_ship_as_sidecar_configmaps(rendered: dict[str, list[Doc]]) -> None:
    maps = find(rendered["monitoring"], "ConfigMap")
    shipped: dict[str, str] = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        shipped.update(cm["data"])
    expected = {name: json.loads(text) for name, text in dashboards.render().items()}
    assert {name: json.loads(text) for name, text in shipped.items()} == expected
    assert not find(rendered["default"], "ConfigMap")
