"""The chart's rendered manifests, accepted by a real kube-apiserver (``--dry-run=server``).

Built-in kinds (Deployment, RBAC, Services, the ValidatingWebhookConfiguration, PDB) get the
apiserver's full validation. The third-party kinds (ServiceMonitor, PrometheusRule from the
Prometheus Operator; Certificate, Issuer from cert-manager) need their CRDs, which the harness
does not carry: this module installs minimal stand-ins (right group, version, kind and scope,
open schema) first, so those objects are checked for apiVersion/kind/scope/metadata only;
their specs are checked by tests/integration/test_chart_webhook_metrics.py (structure) and
test_alerts.py (promtool on the PrometheusRule's rules).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulations.harness import ClusterEndpoint
from tests.integration import chart_support
from tests.integration.chart_support import CHART, RELEASE, SCENARIOS, render, run_helm

helm = chart_support.helm  # the fixture

STAND_INS = (
    ("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"),
    ("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules"),
    ("cert-manager.io", "v1", "Certificate", "certificates"),
    ("cert-manager.io", "v1", "Issuer", "issuers"),
)


def stand_in_crd(group: str, version: str, kind: str, plural: str) -> dict[str, Any]:
    """A namespaced CRD that accepts any spec (only identity and scope are real)."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                      "listKind": f"{kind}List"},
            "versions": [{"name": version, "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": schema}}],
        },
    }  # fmt: skip


@pytest.fixture(scope="module")
def third_party_crds(infra: ClusterEndpoint) -> None:
    infra.apply_objects(*(stand_in_crd(*s) for s in STAND_INS))
    names = [f"crd/{plural}.{group}" for group, _, _, plural in STAND_INS]
    infra.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, timeout=70)


def dry_run(endpoint: ClusterEndpoint, docs: list[dict[str, Any]]) -> str:
    """Server-side dry-run apply; returns kubectl's report, raising with stderr on refusal."""
    text = yaml.safe_dump_all(docs)
    try:
        proc = endpoint.kubectl("apply", "--dry-run=server", "--server-side", "-f", "-",
                                input=text)  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise AssertionError(f"apiserver refused the chart:\n{exc.stderr}") from exc
    return proc.stdout


def _extra_namespaces(
    infra: ClusterEndpoint, namespace: str, values: dict[str, Any]
) -> dict[str, Any]:
    """Rewrite watch/pool namespaces to unique, existing ones for this test."""
    mapping: dict[str, str] = {}
    for key in ("watchNamespaces", "poolNamespaces"):
        for ns in values.get(key, ()):
            mapping.setdefault(ns, f"{namespace[:50]}-{ns}")
    for real in mapping.values():
        infra.create_namespace(real)
    keys = [key for key in ("watchNamespaces", "poolNamespaces") if key in values]
    return {**values, **{key: [mapping[n] for n in values[key]] for key in keys}}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_apiserver_accepts_every_scenario(
    helm: Path,
    infra: ClusterEndpoint,
    namespace: str,
    third_party_crds: None,
    tmp_path: Path,
    scenario: str,
) -> None:
    values = _extra_namespaces(infra, namespace, SCENARIOS[scenario])
    docs = render(helm, tmp_path, values, namespace=namespace)
    report = dry_run(infra, docs)
    for doc in docs:
        assert f"{doc['kind'].lower()}" in report.lower(), f"{doc['kind']} not applied"
    assert report.count("(server dry run)") == len(docs)


def test_apiserver_refuses_a_broken_manifest(
    helm: Path,
    infra: ClusterEndpoint,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The dry-run is a real check: a Deployment with a bad probe port is refused."""
    docs = render(helm, tmp_path, {}, namespace=namespace)
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    deploy["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = 0
    with pytest.raises(AssertionError, match="refused"):
        dry_run(infra, [deploy])


def test_workload_observer_rbac_applies_to_the_workload_cluster(
    helm: Path,
    workload: ClusterEndpoint,
    tmp_path: Path,
) -> None:
    out = run_helm(helm, "template", RELEASE, str(CHART), "--show-only",
                   "templates/workload-observer-rbac.yaml",
                   values={"workloadObserverRBAC": {"enabled": True}}, tmp=tmp_path)  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert {d["kind"] for d in docs} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    assert dry_run(workload, docs).count("(server dry run)") == 3


def test_notes_name_the_secret_namespaces(
    helm: Path,
    infra: ClusterEndpoint,
    namespace: str,
    tmp_path: Path,
) -> None:
    def notes(values: dict[str, Any]) -> str:
        path = tmp_path / "v.yaml"
        path.write_text(yaml.safe_dump(values))
        proc = subprocess.run(
            [str(helm), "install", RELEASE, str(CHART), "-n", namespace, "--dry-run=client",
             "--kubeconfig", str(infra.kubeconfig_path), "-f", str(path)],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        return proc.stdout.split("NOTES:", 1)[1]

    default = notes({})
    assert f"only in: {namespace}." in default and "default: the release" in default
    scoped = notes({"poolNamespaces": ["team-a"]})
    assert "only in: team-a." in scoped and "default: the release" not in scoped
    assert "webhook is disabled" in notes({"webhook": {"enabled": False}})
