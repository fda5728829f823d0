"""Shared helpers of the Helm chart tests (a plain module, not a test file).

Why this module exists: the chart is checked by three test files - what the rendered manifests
promise about the pod, its CLI and its RBAC (``test_chart``), the webhook and metrics wiring
(``test_chart_webhook_metrics``), and acceptance by a real kube-apiserver
(``test_chart_apiserver``) - which all need the same helm binary, value scenarios, rendering and
manifest lookups.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.binary_support import required_binary

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
    "replicas-1": {"replicaCount": 1},
    "conventions": {  # every chart-convention value set away from its default
        "replicaCount": 3,
        "podDisruptionBudget": {"maxUnavailable": 1},
        "image": {"digest": "sha256:" + "ab" * 32},
        "networkPolicy": {
            "enabled": True,
            "webhookFrom": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
            "metricsFrom": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
            "egress": [{"ports": [{"port": 443, "protocol": "TCP"}]}],
        },
        "webhook": {
            "rules": {
                "strictGuestTemplate": True,
                "allowBlankDataDisks": True,
                "allowedSriovResources": ["intel.com/sriov"],
                "allowedPrometheusHosts": ["prometheus.monitoring.svc"],
                "allowedStorageClasses": ["fast-ssd"],
            }
        },
        "monitoring": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {
                "enabled": True,
                "disabledAlerts": ["GPUCellPoolCellFlapping"],
                "extraRules": [{"alert": "TeamExtra", "expr": "vector(1) == 2"}],
            },
        },
    },
    "metrics-off": {"metrics": {"enabled": False}, **MONITORING_ON},
    "webhook-off": {"webhook": {"enabled": False}},
    "metrics-plain": {"metrics": {"secure": False}, **MONITORING_ON},
    "metrics-cert": {"metrics": {"certSecret": "metrics-tls"}, **MONITORING_ON},
}


@pytest.fixture(scope="session")
def helm() -> Path:
    return required_binary("helm")


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


def deployment_env(docs: list[Doc]) -> dict[str, str]:
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def container_args(container: Doc, pod_name: str = f"{FULLNAME}-0") -> list[str]:
    """The container's args as the kubelet passes them: ``$(VAR)`` expanded from its env
    (fieldRefs answered as for a pod named ``pod_name`` in ``NS``), as the CLI receives them."""
    fields = {"metadata.namespace": NS, "metadata.name": pod_name}
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        ref = (entry.get("valueFrom") or {}).get("fieldRef") or {}
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        elif ref.get("fieldPath") in fields:
            env[entry["name"]] = fields[ref["fieldPath"]]
    var = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
    return [var.sub(lambda m: env.get(m[1], m[0]), str(arg)) for arg in container["args"]]


def webhook_of(docs: list[Doc]) -> Doc:
    hooks: list[Doc] = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    (hook,) = hooks
    return hook
