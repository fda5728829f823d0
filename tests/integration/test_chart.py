"""The Helm chart under the real helm: lint, schema, and what the pod, its CLI and its RBAC promise.

Rendering needs no cluster; tests/integration/test_chart_apiserver.py sends the same renders
to a real kube-apiserver, and tests/integration/test_chart_webhook_metrics.py checks the webhook
and metrics wiring. Scenarios (``chart_support.SCENARIOS``) cover the default and the
non-default shapes (cert-manager with the chart's issuer or the user's, watched namespaces, two
replicas, metrics off, all monitoring on). The security claims are checked on every scenario:
no cluster-wide Secret access, a hardened pod, probes, leader election.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucellpool.cli import build_parser
from gpucellpool.operator.provisioner_wiring import INFRA_WATCHES
from gpucellpool.operator.run import settings_from
from gpucellpool.operator.settings import watched_namespaces
from tests.integration import chart_support
from tests.integration.chart_support import (
    CHART,
    FULLNAME,
    NS,
    RELEASE,
    SCENARIOS,
    Doc,
    find,
    one,
    render,
    rules,
    run_helm,
)

helm = chart_support.helm  # the fixtures
rendered = chart_support.rendered


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
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount", FULLNAME)["metadata"]["name"]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_no_cluster_wide_secret_access(rendered: dict[str, list[Doc]], scenario: str) -> None:
    docs = rendered[scenario]
    for role in find(docs, "ClusterRole"):
        for rule in rules(role):
            resources = rule.get("resources") or ()  # nonResourceURLs rules have none
            assert "secrets" not in resources and "*" not in resources, role
            assert "*" not in rule["verbs"]
    pools = set(SCENARIOS[scenario].get("poolNamespaces")
                or SCENARIOS[scenario].get("watchNamespaces") or {NS})  # fmt: skip
    allowed = pools | {NS}  # default: pools live in the release namespace
    for role in find(docs, "Role"):
        for rule in rules(role):
            if "secrets" not in rule["resources"]:
                continue
            ns = role["metadata"]["namespace"]
            assert ns in allowed, f"Secrets granted in {ns}"
            if ns not in pools:  # own namespace: by name, except create (not limitable)
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
    defaults = {r["metadata"]["namespace"] for r in find(default, "Role", f"{FULLNAME}-secrets")}
    assert defaults == {NS}  # a default install serves pools in the release namespace
    container = one(scoped, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = chart_support.container_args(container)
    settings = settings_from(build_parser(args).parse_args(args))
    assert watched_namespaces(settings) == ("team-a", "team-c")  # every one, not the first
    # Pools are served only where the Secrets Role is (a pool elsewhere is ignored).
    assert set(settings.served_namespaces) == secrets
    default_container = one(default, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    default_args = chart_support.container_args(default_container)
    default_settings = settings_from(build_parser(default_args).parse_args(default_args))
    assert default_settings.served_namespaces == (NS,)  # every namespace watched, one served
    selector = one(scoped, "ValidatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"]
    assert selector["matchExpressions"][0]["values"] == ["team-a", "team-c"]


def test_the_provisioners_watches_are_granted_and_secrets_stay_namespaced(
    rendered: dict[str, list[Doc]],
) -> None:
    """Every infrastructure collection a pass reads from a watch (``INFRA_WATCHES``) may be
    listed and watched where the operator watches it (the labelled Secrets: where it serves
    pools); Secrets only through the per-namespace Secret Roles, never a ClusterRole."""
    for name in ("default", "watch-namespaces"):
        docs = rendered[name]
        container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        args = chart_support.container_args(container)
        settings = settings_from(build_parser(args).parse_args(args))
        roles = [*find(docs, "ClusterRole"), *find(docs, "Role")]
        for resource in INFRA_WATCHES:
            where = settings.served_namespaces if resource == "secrets" else None
            for ns in where or watched_namespaces(settings):
                verbs = {
                    v
                    for role in roles
                    if role["kind"] == "ClusterRole" or role["metadata"]["namespace"] == ns
                    for r in rules(role)
                    if resource in r.get("resources", ())
                    for v in r["verbs"]
                }
                assert {"list", "watch"} <= verbs, (name, resource, ns)
        for role in find(docs, "ClusterRole"):
            granted = [r for r in rules(role) if "secrets" in r.get("resources", ())]
            assert not granted, role["metadata"]


def test_leases_only_in_the_release_namespace(rendered: dict[str, list[Doc]]) -> None:
    for docs in rendered.values():
        for kind in ("ClusterRole", "Role"):
            for role in find(docs, kind):
                if any("leases" in (r.get("resources") or ()) for r in rules(role)):
                    assert kind == "Role" and role["metadata"]["namespace"] == NS


def test_workload_observer_rbac(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, {"workloadObserverRBAC": {"enabled": True}})
    role = one(docs, "ClusterRole", "gpucellpool-observer")
    grants = {(res, verb) for r in rules(role) for res in r["resources"] for verb in r["verbs"]}
    needs = [
        ("nodes", "patch"),
        ("nodes", "delete"),
        ("pods", "list"),
        ("pods/eviction", "create"),
        ("leases", "get"),
        ("namespaces", "watch"),
        ("pods", "delete"),  # deletion.policy Force
    ]
    for needed in needs:
        assert needed in grants
    assert not any(res == "secrets" for res, _ in grants)
    assert not find(render(helm, tmp_path, {}), "ClusterRole", "gpucellpool-observer")


def test_issue15_reads_stay_read_only(
    rendered: dict[str, list[Doc]], helm: Path, tmp_path: Path
) -> None:
    """Least privilege for the rows issue 15 added: infrastructure Nodes (outer-node drain) and
    HAMi's DRA objects in the workload cluster are read, never written."""
    read = {"get", "list", "watch"}
    manager = one(rendered["default"], "ClusterRole", f"{FULLNAME}-manager")
    node_verbs = {v for r in rules(manager) if "nodes" in r["resources"] for v in r["verbs"]}
    assert node_verbs == read
    observer = one(
        render(helm, tmp_path, {"workloadObserverRBAC": {"enabled": True}}),
        "ClusterRole",
        "gpucellpool-observer",
    )
    dra = {"resourceslices", "resourceclaims", "deviceclasses", "provisioningrequests"}
    for rule in rules(observer):
        if dra & set(rule["resources"]):
            assert set(rule["verbs"]) <= read, rule


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_args_are_accepted_by_the_real_cli(rendered: dict[str, list[Doc]], scenario: str) -> None:
    """The Deployment must not crash-loop on a flag `gpucellpool run` does not know."""
    pod = one(rendered[scenario], "Deployment")["spec"]["template"]["spec"]
    args = chart_support.container_args(pod["containers"][0])
    parsed = build_parser(args).parse_args(args)
    settings = settings_from(parsed)
    ports = {p["name"]: p["containerPort"] for p in pod["containers"][0]["ports"]}
    assert settings.health_port == ports["http"]
    if settings.metrics.secure:
        assert settings.metrics.port == ports["https-metrics"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert pod["containers"][0][probe]["httpGet"]["port"] == "http"


def test_replicas_two_get_a_disruption_budget(rendered: dict[str, list[Doc]]) -> None:
    assert one(rendered["default"], "Deployment")["spec"]["replicas"] == 2  # the default
    assert one(rendered["default"], "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert one(rendered["replicas-1"], "Deployment")["spec"]["replicas"] == 1
    assert not find(rendered["replicas-1"], "PodDisruptionBudget")  # it would block drains
