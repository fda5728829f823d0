"""The chart's operator conventions, rendered by the real helm (and checked by the real promtool).

What these prove: two replicas with a PodDisruptionBudget that follows its values; an optional
NetworkPolicy whose ports are the container's and whose egress stays open unless configured;
hardened security contexts that are values; the ServiceMonitor's ``authorization`` (no
deprecated ``bearerTokenFile``) with a token its identity may use; PrometheusRule alerts that
can be disabled (a typo fails) and extended (promtool accepts the result); every admission
rule flag in ``webhook/rule_flags.py`` reachable from ``webhook.rules``; the image default,
tag and digest; and the schema refusing bad types for each new key. The apiserver's view of
the same objects: ``test_chart_apiserver`` (the ``conventions`` scenario).
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucellpool.cli import build_parser
from gpucellpool.operator.run import settings_from
from simulations.harness import ClusterEndpoint
from tests.integration import chart_support, test_chart_apiserver
from tests.integration.binary_support import required_binary
from tests.integration.chart_support import (
    CHART,
    FULLNAME,
    NS,
    Doc,
    container_args,
    find,
    one,
    render,
    run_helm,
)
from webhook import rule_flags
from webhook.rules.settings import RuleSettings

helm = chart_support.helm  # the fixtures
third_party_crds = test_chart_apiserver.third_party_crds  # ServiceMonitor's stand-in CRD
DIGEST = "sha256:" + "0123456789abcdef" * 4
SECURE_MONITORING = {"monitoring": {"serviceMonitor": {"enabled": True}}}


def _pod(docs: list[Doc]) -> Doc:
    spec: Doc = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def _alert_names(spec: Doc) -> list[str]:
    return [r["alert"] for g in spec["groups"] for r in g["rules"] if "alert" in r]


def _rules_file() -> Doc:
    doc: Doc = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    return doc


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, {"minAvailable": 1}),
        ({"podDisruptionBudget": {"minAvailable": "50%"}}, {"minAvailable": "50%"}),
        ({"podDisruptionBudget": {"maxUnavailable": 1}}, {"maxUnavailable": 1}),
        (
            {"replicaCount": 3, "podDisruptionBudget": {"maxUnavailable": "34%"}},
            {"maxUnavailable": "34%"},
        ),
        ({"podDisruptionBudget": {"enabled": False}}, None),
        ({"replicaCount": 1}, None),  # a budget on one replica would block every drain
    ],
)
def test_disruption_budget_follows_its_values(
    helm: Path, tmp_path: Path, values: Doc, expected: Doc | None
) -> None:
    docs = render(helm, tmp_path, values)
    if expected is None:
        assert not find(docs, "PodDisruptionBudget")
        return
    pdb = one(docs, "PodDisruptionBudget")["spec"]
    assert {k: v for k, v in pdb.items() if k != "selector"} == expected
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()


def test_network_policy_is_off_by_default_and_opens_only_the_webhook(
    helm: Path, tmp_path: Path
) -> None:
    assert not find(render(helm, tmp_path, {}), "NetworkPolicy")
    docs = render(helm, tmp_path, {"networkPolicy": {"enabled": True}})
    spec = one(docs, "NetworkPolicy")["spec"]
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec  # egress unrestricted
    (webhook_rule,) = spec["ingress"]
    assert webhook_rule["ports"] == [{"port": "webhook", "protocol": "TCP"}]
    assert "from" not in webhook_rule  # from anywhere: the apiserver is rarely a pod
    closed = render(
        helm, tmp_path, {"networkPolicy": {"enabled": True}, "webhook": {"enabled": False}}
    )
    assert one(closed, "NetworkPolicy")["spec"]["ingress"] == []


def test_network_policy_peers_ports_and_egress_are_configurable(helm: Path, tmp_path: Path) -> None:
    apiserver = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    prometheus = [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    egress = [{"ports": [{"port": 443, "protocol": "TCP"}]}]
    values = {
        "networkPolicy": {
            "enabled": True,
            "webhookFrom": apiserver,
            "metricsFrom": prometheus,
            "egress": egress,
        }
    }
    docs = render(helm, tmp_path, values)
    spec = one(docs, "NetworkPolicy")["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["egress"] == egress
    by_port = {p["port"]: rule["from"] for rule in spec["ingress"] for p in rule["ports"]}
    assert by_port == {"webhook": apiserver, "http": prometheus, "https-metrics": prometheus}
    container_ports = {p["name"] for p in _pod(docs)["containers"][0]["ports"]}
    assert set(by_port) <= container_ports  # named ports resolve on the pod
    plain = render(helm, tmp_path, {**values, "metrics": {"secure": False}})
    ports = {p["port"] for r in one(plain, "NetworkPolicy")["spec"]["ingress"] for p in r["ports"]}
    assert ports == {"webhook", "http"}


def test_security_contexts_are_hardened_values_with_a_writable_tmp(
    helm: Path, tmp_path: Path
) -> None:
    pod = _pod(render(helm, tmp_path, {}))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    tmp_mount = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert next(v for v in pod["volumes"] if v["name"] == tmp_mount[0]["name"])["emptyDir"]
    custom = _pod(
        render(
            helm,
            tmp_path,
            {"podSecurityContext": {"runAsUser": 1001}, "securityContext": {"privileged": False}},
        )
    )
    # helm merges a value map key by key: the override changes one field, the rest stays hardened
    assert custom["securityContext"] == {**pod["securityContext"], "runAsUser": 1001}
    assert custom["containers"][0]["securityContext"]["privileged"] is False


def test_servicemonitor_authorization_uses_the_charts_scraper_token(
    helm: Path, tmp_path: Path
) -> None:
    docs = render(helm, tmp_path, SECURE_MONITORING)
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert "bearerTokenFile" not in endpoint and endpoint["scheme"] == "https"
    auth = endpoint["authorization"]
    assert auth["type"] == "Bearer" and auth["credentials"]["key"] == "token"
    secret = one(docs, "Secret", auth["credentials"]["name"])
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["namespace"] == one(docs, "ServiceMonitor")["metadata"]["namespace"]
    scraper = one(
        docs,
        "ServiceAccount",
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
    )
    binding = one(docs, "ClusterRoleBinding", f"{FULLNAME}-metrics-scraper")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "namespace": NS, "name": scraper["metadata"]["name"]}
    ]
    reader = one(docs, "ClusterRole", binding["roleRef"]["name"])
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_servicemonitor_authorization_from_the_users_secret(helm: Path, tmp_path: Path) -> None:
    auth = {"credentials": {"name": "prom-token", "key": "bearer"}}
    values = {"monitoring": {"serviceMonitor": {"enabled": True, "authorization": auth}}}
    docs = render(helm, tmp_path, values)
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["authorization"]["credentials"] == {"name": "prom-token", "key": "bearer"}
    assert not find(docs, "Secret") and not find(
        docs, "ClusterRoleBinding", f"{FULLNAME}-metrics-scraper"
    )
    plain = render(helm, tmp_path, {**SECURE_MONITORING, "metrics": {"secure": False}})
    endpoint = one(plain, "ServiceMonitor")["spec"]["endpoints"][0]
    assert "authorization" not in endpoint and "tlsConfig" not in endpoint
    assert not find(plain, "Secret")  # no token for a plain endpoint


def test_disabled_alerts_are_absent_and_extra_rules_present(helm: Path, tmp_path: Path) -> None:
    every = _alert_names(_rules_file())
    off = [every[0], every[-1]]
    extra = [
        {
            "alert": "TeamGPUCellPoolTooMany",
            "expr": "count(gpucell_cells_desired) > 50",
            "for": "5m",
            "labels": {"severity": "info"},
        },
        {"record": "team:gpucell_cells_desired:sum", "expr": "sum(gpucell_cells_desired)"},
    ]
    values = {
        "monitoring": {
            "prometheusRule": {"enabled": True, "disabledAlerts": off, "extraRules": extra}
        }
    }
    spec = one(render(helm, tmp_path, values), "PrometheusRule")["spec"]
    names = _alert_names(spec)
    assert not set(off) & set(names)
    assert [n for n in names if n != "TeamGPUCellPoolTooMany"] == every[1:-1]
    assert spec["groups"][-1] == {"name": "gpucellpool.extra", "rules": extra}
    assert all(group["rules"] for group in spec["groups"])  # emptied groups are dropped
    promtool = required_binary("promtool")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    proc = subprocess.run(
        [str(promtool), "check", "rules", str(tmp_path / "rules.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(every) - len(off) + len(extra)} rules found" in proc.stdout


def test_an_unknown_disabled_alert_fails_the_render(helm: Path, tmp_path: Path) -> None:
    values = {
        "monitoring": {"prometheusRule": {"enabled": True, "disabledAlerts": ["GPUCellPoolTypo"]}}
    }
    proc = run_helm(helm, "template", "gcp", str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0
    assert 'no alert named "GPUCellPoolTypo"' in proc.stderr


def _rule_options() -> list[argparse.Action]:
    parser = argparse.ArgumentParser()
    rule_flags.add_arguments(parser)
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def test_every_rule_flag_is_reachable_from_webhook_rules(helm: Path, tmp_path: Path) -> None:
    rules: dict[str, Any] = {
        "strictGuestTemplate": True,
        "allowBlankDataDisks": True,
        "allowedSriovResources": ["intel.com/sriov_a", "intel.com/sriov_b"],
        "allowedPrometheusHosts": ["prometheus.monitoring.svc"],
        "allowedStorageClasses": ["fast-ssd"],
    }
    docs = render(helm, tmp_path, {"webhook": {"enabled": False, "rules": rules}})
    args = container_args(_pod(docs)["containers"][0])
    parsed = build_parser(args).parse_args(args)
    assert settings_from(parsed).rules == RuleSettings(
        strict_guest_template=True,
        allow_blank_data_disks=True,
        allowed_sriov_resources=frozenset(rules["allowedSriovResources"]),
        allowed_prometheus_hosts=frozenset(rules["allowedPrometheusHosts"]),
        allowed_storage_classes=frozenset(rules["allowedStorageClasses"]),
    )
    unset = [a.option_strings[0] for a in _rule_options() if getattr(parsed, a.dest) == a.default]
    assert not unset, f"rule flags with no chart value: {unset}"
    default_args = container_args(_pod(render(helm, tmp_path, {}))["containers"][0])
    assert settings_from(build_parser(default_args).parse_args(default_args)).rules == (
        RuleSettings()
    )


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ({}, "localhost/gpucellpool/operator:{app}"),
        ({"tag": "dev"}, "localhost/gpucellpool/operator:dev"),
        ({"digest": DIGEST, "tag": "ignored"}, f"localhost/gpucellpool/operator@{DIGEST}"),
        (
            {"repository": "registry.example/gpo", "digest": DIGEST},
            f"registry.example/gpo@{DIGEST}",
        ),
    ],
)
def test_image_defaults_to_the_built_one_and_pins_a_digest(
    helm: Path, tmp_path: Path, image: Doc, expected: str
) -> None:
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    values = {"image": image} if image else {}
    (container,) = _pod(render(helm, tmp_path, values))["containers"]
    assert container["image"] == expected.format(app=app)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"podDisruptionBudget": {"minAvailable": "most"}}, "minAvailable"),
        ({"podDisruptionBudget": {"maxUnavailable": -1}}, "maxUnavailable"),
        ({"podDisruptionBudget": {"enable": True}}, "enable"),
        ({"networkPolicy": {"enabled": "yes"}}, "enabled"),
        ({"networkPolicy": {"webhookFrom": ["10.0.0.0/8"]}}, "webhookFrom"),
        ({"podSecurityContext": {"runAsUser": "root"}}, "runAsUser"),
        ({"securityContext": {"readOnlyRootFilesystem": "true"}}, "readOnlyRootFilesystem"),
        ({"webhook": {"rules": {"strictGuestTemplate": "on"}}}, "strictGuestTemplate"),
        ({"webhook": {"rules": {"allowedPrometheusHosts": ["a,b"]}}}, "allowedPrometheusHosts"),
        ({"webhook": {"rules": {"allowedStorageClasses": ["Fast SSD"]}}}, "allowedStorageClasses"),
        ({"webhook": {"rules": {"strict": True}}}, "strict"),
        ({"image": {"digest": "latest"}}, "digest"),
        ({"monitoring": {"serviceMonitor": {"authorization": {"type": "Basic"}}}}, "type"),
        (
            {"monitoring": {"serviceMonitor": {"authorization": {"credentials": {"key": ""}}}}},
            "key",
        ),
        ({"monitoring": {"prometheusRule": {"disabledAlerts": [1]}}}, "disabledAlerts"),
        ({"monitoring": {"prometheusRule": {"extraRules": [{"expr": "up"}]}}}, "extraRules"),
        ({"monitoring": {"prometheusRule": {"extraRules": [{"alert": "A"}]}}}, "expr"),
    ],
)
def test_schema_rejects_bad_new_values(
    helm: Path, tmp_path: Path, values: Doc, complaint: str
) -> None:
    proc = run_helm(helm, "template", "gcp", str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0, f"helm accepted {values}"
    assert complaint in proc.stderr


def test_notes_name_the_image_to_load_and_the_scrape_token(
    helm: Path, infra: ClusterEndpoint, namespace: str, third_party_crds: None, tmp_path: Path
) -> None:
    """helm install --dry-run against the harness apiserver: NOTES render and say what to do."""

    def notes(values: Doc) -> str:
        path = tmp_path / "v.yaml"
        path.write_text(yaml.safe_dump(values))
        argv = [str(helm), "install", "gcp", str(CHART), "-n", namespace, "--dry-run=client",
                "--kubeconfig", str(infra.kubeconfig_path), "-f", str(path)]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split("NOTES:", 1)[1]

    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    default = notes({})
    assert f"Image: localhost/gpucellpool/operator:{app}. No registry serves it" in default
    assert "ctr -n k8s.io images import" in default
    pinned = notes({"image": {"repository": "registry.example/gpo", "digest": DIGEST}})
    assert f"Image: registry.example/gpo@{DIGEST}" in pinned and "No registry" not in pinned
    monitored = notes(SECURE_MONITORING)
    assert f"Secret\n{FULLNAME}-metrics-scraper-token (key token), bound by the chart" in monitored
    own = {"monitoring": {"serviceMonitor": {"enabled": True, "authorization": {
        "credentials": {"name": "prom-token"}}}}}  # fmt: skip
    assert "prom-token (key token), whose identity you must bind" in notes(own)
