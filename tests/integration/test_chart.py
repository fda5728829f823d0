"""The Helm chart under the real helm: lint, render, schema, and what the manifests promise.

Rendering needs no cluster; tests/integration/test_chart_apiserver.py sends the same renders
to a real kube-apiserver. Scenarios cover the default and the non-default shapes (cert-manager
with the chart's issuer or the user's, watched namespaces, two replicas, metrics off, all
monitoring on). The security claims are checked on every scenario: no cluster-wide Secret
access, a hardened pod, probes, leader election.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucellpool import dashboards
from gpucellpool.app import watched_namespaces
from gpucellpool.cli import build_parser
from gpucellpool.run import settings_from
from simulations.harness.binaries import BinaryError, ensure
from webhook.runtime import WebhookOptions

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpucellpool"
RELEASE, NS = "gcp", "gpucellpool-system"
FULLNAME = "gcp-gpucellpool"
Doc = dict[str, Any]

MONITORING_ON = {
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboards": {"enabled": True},
    }
}
SCENARIOS: dict[str, Doc] = {
    "default": {},
    "monitoring": MONITORING_ON,
    "cert-manager": {"webhook": {"certManager": {"enabled": True}}},
    "cert-manager-issuer": {
        "webhook": {
            "certManager": {
                "enabled": True,
                "issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"},
            }
        }
    },
    "watch-namespaces": {
        "watchNamespaces": ["team-a", "team-c"],
        "poolNamespaces": ["team-a", "team-b", "team-c"],
    },
    "replicas-2": {"replicaCount": 2},
    "metrics-off": {"metrics": {"enabled": False}, **MONITORING_ON},
    "webhook-off": {"webhook": {"enabled": False}},
    "metrics-plain": {"metrics": {"secure": False}, **MONITORING_ON},
    "metrics-cert": {"metrics": {"certSecret": "metrics-tls"}, **MONITORING_ON},
}


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return ensure(["helm"])["helm"]
    except BinaryError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"helm unavailable in CI: {exc}")
        pytest.skip(f"helm unavailable: {exc}")


def run_helm(helm: Path, *args: str, values: Doc | None = None, tmp: Path | None = None,
             check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """helm with ``values`` written to a file (so types survive, unlike --set)."""
    argv = [str(helm), *args]
    if values is not None:
        assert tmp is not None
        path = tmp / f"values-{abs(hash(json.dumps(values, sort_keys=True)))}.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["-f", str(path)]
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp or "/tmp"), "KUBECONFIG": "/dev/null"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def render(helm: Path, tmp: Path, values: Doc, namespace: str = NS) -> list[Doc]:
    out = run_helm(helm, "template", RELEASE, str(CHART), "-n", namespace, values=values, tmp=tmp)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(docs: list[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def rules(role: Doc) -> Iterator[Doc]:
    yield from role.get("rules") or ()


@pytest.fixture(scope="module")
def rendered(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    tmp = tmp_path_factory.mktemp("chart")
    return {name: render(helm, tmp, values) for name, values in SCENARIOS.items()}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_lint(helm: Path, tmp_path: Path, scenario: str) -> None:
    proc = run_helm(helm, "lint", "--strict", str(CHART), values=SCENARIOS[scenario], tmp=tmp_path)
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"replicaCount": 0}, "replicaCount"),
        ({"webhook": {"failurePolicy": "Never"}}, "failurePolicy"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "watchNamespaces"),
        ({"health": {"port": 70000}}, "port"),
        ({"watchNamespaces": ["a", "a"]}, "watchNamespaces"),  # repeated
        ({"metrics": {"port": 0}}, "port"),
        ({"metrics": {"secure": "yes"}}, "secure"),
        ({"monitoring": {"serviceMonitor": {"interval": "soon"}}}, "interval"),
        ({"webhook": {"certManager": {"issuerRef": {"name": "x"}}}}, "issuerRef"),
        ({"replicas": 2}, "replicas"),  # a typo of replicaCount is refused, not ignored
    ],
)
def test_schema_rejects_bad_values(helm: Path, tmp_path: Path, values: Doc, complaint: str) -> None:
    for command in (["template", RELEASE], ["lint"]):
        proc = run_helm(helm, *command, str(CHART), values=values, tmp=tmp_path, check=False)
        assert proc.returncode != 0, f"helm {command[0]} accepted {values}"
        assert complaint in proc.stderr + proc.stdout


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_pod_is_hardened_with_probes_and_leader_election(rendered: dict[str, list[Doc]],
                                                         scenario: str) -> None:  # fmt: skip
    docs = rendered[scenario]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["args"][0] == "run"
    assert "--lease-namespace=$(POD_NAMESPACE)" in container["args"]  # leader election
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_no_cluster_wide_secret_access(rendered: dict[str, list[Doc]], scenario: str) -> None:
    docs = rendered[scenario]
    for role in find(docs, "ClusterRole"):
        for rule in rules(role):
            resources = rule.get("resources") or ()  # nonResourceURLs rules have none
            assert "secrets" not in resources and "*" not in resources, role
            assert "*" not in rule["verbs"]
    allowed = set(SCENARIOS[scenario].get("poolNamespaces")
                  or SCENARIOS[scenario].get("watchNamespaces") or ()) | {NS}  # fmt: skip
    for role in find(docs, "Role"):
        for rule in rules(role):
            if "secrets" not in rule["resources"]:
                continue
            ns = role["metadata"]["namespace"]
            assert ns in allowed, f"Secrets granted in {ns}"
            if ns == NS:  # own namespace: by name, except create (cannot be limited by name)
                assert rule.get("resourceNames") or rule["verbs"] == ["create"]


def test_watch_namespaces_move_provisioning_into_roles(rendered: dict[str, list[Doc]]) -> None:
    default, scoped = rendered["default"], rendered["watch-namespaces"]

    def grants_guests(role: Doc) -> bool:
        return any("swiftguests" in r["resources"] for r in rules(role))

    assert grants_guests(one(default, "ClusterRole", f"{FULLNAME}-manager"))
    assert not grants_guests(one(scoped, "ClusterRole", f"{FULLNAME}-manager"))
    prov = {r["metadata"]["namespace"] for r in find(scoped, "Role", f"{FULLNAME}-provisioner")}
    assert prov == {"team-a", "team-c"}
    secrets = {r["metadata"]["namespace"] for r in find(scoped, "Role", f"{FULLNAME}-secrets")}
    assert secrets == {"team-a", "team-b", "team-c"}
    assert not find(default, "Role", f"{FULLNAME}-secrets")
    args = one(scoped, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    settings = settings_from(build_parser(args).parse_args(args))
    assert watched_namespaces(settings) == ("team-a", "team-c")  # every one, not the first
    selector = one(scoped, "ValidatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"]
    assert selector["matchExpressions"][0]["values"] == ["team-a", "team-c"]


def test_leases_only_in_the_release_namespace(rendered: dict[str, list[Doc]]) -> None:
    for docs in rendered.values():
        for kind in ("ClusterRole", "Role"):
            for role in find(docs, kind):
                if any("leases" in (r.get("resources") or ()) for r in rules(role)):
                    assert kind == "Role" and role["metadata"]["namespace"] == NS


def _env(docs: list[Doc]) -> dict[str, str]:
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_args_are_accepted_by_the_real_cli(rendered: dict[str, list[Doc]], scenario: str) -> None:
    """The Deployment must not crash-loop on a flag `gpucellpool run` does not know."""
    pod = one(rendered[scenario], "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    parsed = build_parser(args).parse_args(args)
    settings = settings_from(parsed)
    ports = {p["name"]: p["containerPort"] for p in pod["containers"][0]["ports"]}
    assert settings.health_port == ports["http"]
    if settings.metrics.secure:
        assert settings.metrics.port == ports["https-metrics"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert pod["containers"][0][probe]["httpGet"]["port"] == "http"


def test_webhook_env_matches_the_runtime_options_and_the_objects(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["default"]
    prefix = "GPUCELLPOOL_WEBHOOK_"
    env = {k.removeprefix(prefix).lower(): v for k, v in _env(docs).items()
           if k.startswith(prefix) and k != f"{prefix}ENABLED"}  # fmt: skip
    assert set(env) <= {f.name for f in fields(WebhookOptions)}
    hook = _webhook(docs)
    assert env["service"] == hook["clientConfig"]["service"]["name"]
    assert env["namespace"] == hook["clientConfig"]["service"]["namespace"] == NS
    assert env["configuration"] == one(docs, "ValidatingWebhookConfiguration")["metadata"]["name"]
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(env["port"]) == ports["webhook"]
    assert one(docs, "Service", env["service"])["spec"]["ports"][0]["targetPort"] == "webhook"
    secret_rule = [r for r in rules(one(docs, "Role", f"{FULLNAME}-self"))
                   if r.get("resourceNames")]  # fmt: skip
    assert env["secret"] in secret_rule[0]["resourceNames"]


def _webhook(docs: list[Doc]) -> Doc:
    (hook,) = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    return hook


def test_webhook_self_managed(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["default"]
    hook = _webhook(docs)
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
    assert _env(docs)["GPUCELLPOOL_WEBHOOK_MODE"] == "self-managed"
    assert not find(docs, "Certificate")


@pytest.mark.parametrize("scenario", ["cert-manager", "cert-manager-issuer"])
def test_webhook_cert_manager(rendered: dict[str, list[Doc]], scenario: str) -> None:
    docs = rendered[scenario]
    vwc = one(docs, "ValidatingWebhookConfiguration")
    cert = one(docs, "Certificate")
    ref = f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == ref
    svc = _webhook(docs)["clientConfig"]["service"]
    assert f"{svc['name']}.{svc['namespace']}.svc" in cert["spec"]["dnsNames"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    secret_volumes = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    assert secret_volumes == [cert["spec"]["secretName"]]
    env = _env(docs)
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


def test_replicas_two_get_a_disruption_budget(rendered: dict[str, list[Doc]]) -> None:
    assert one(rendered["replicas-2"], "Deployment")["spec"]["replicas"] == 2
    assert one(rendered["replicas-2"], "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert not find(rendered["default"], "PodDisruptionBudget")


def test_metrics_off_renders_no_scrape_objects(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["metrics-off"]
    assert not find(docs, "ServiceMonitor")
    assert not [s for s in find(docs, "Service") if s["metadata"]["name"].endswith("-metrics")]


def test_metrics_off_still_keeps_metrics_secured(rendered: dict[str, list[Doc]]) -> None:
    """metrics.enabled only drops the Service; /metrics must not fall back to plain HTTP on
    the probe port, open to anyone who reaches the pod (it did: --metrics-secure was dropped)."""
    docs = rendered["metrics-off"]
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
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
    args = pod["containers"][0]["args"]
    settings = settings_from(build_parser(args).parse_args(args))
    svc_port = one(docs, "Service", f"{FULLNAME}-metrics")["spec"]["ports"][0]
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    manager = one(docs, "ClusterRole", f"{FULLNAME}-manager")
    reviews = {r for rule in rules(manager) for r in rule.get("resources") or ()}
    reader = find(docs, "ClusterRole", f"{FULLNAME}-metrics-reader")
    if scenario == "metrics-plain":
        assert not settings.metrics.secure and svc_port["targetPort"] == "http"
        assert "scheme" not in endpoint and not reader
        assert not reviews & {"tokenreviews", "subjectaccessreviews"}
        return
    assert settings.metrics.secure and svc_port["targetPort"] == "https-metrics"
    assert endpoint["scheme"] == "https" and endpoint["bearerTokenFile"].endswith("/token")
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


def test_workload_observer_rbac(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, {"workloadObserverRBAC": {"enabled": True}})
    role = one(docs, "ClusterRole", "gpucellpool-observer")
    grants = {(res, verb) for r in rules(role) for res in r["resources"] for verb in r["verbs"]}
    needs = [("nodes", "patch"), ("nodes", "delete"), ("pods", "list"),
             ("pods/eviction", "create"), ("leases", "get"), ("namespaces", "watch")]  # fmt: skip
    for needed in needs:
        assert needed in grants
    assert not any(res == "secrets" for res, _ in grants)
    assert not find(render(helm, tmp_path, {}), "ClusterRole", "gpucellpool-observer")
