"""The generated GPUCellPool CRD against a real kube-apiserver, through kubectl.

Proves what unit tests cannot: the apiserver accepts the CRD (structural schema, CEL within
budget), accepts every shipped sample, rejects invalid objects with a message naming the field,
prunes unknown fields (but keeps the opaque guestTemplate), applies the schema defaults,
serves the scale subresource (kubectl scale, label selector) and prints the columns from
status.desiredReplicas.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucellpool.api import GPUCellPool
from simulations.harness import ClusterEndpoint

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "config" / "samples").glob("*.yaml"))
BASE: dict[str, Any] = yaml.safe_load((ROOT / "config/samples/swiftguest-dra.yaml").read_text())
CAPI: dict[str, Any] = yaml.safe_load((ROOT / "config/samples/clusterapi.yaml").read_text())

Mutation = Callable[[dict[str, Any]], None]


def apply(infra: ClusterEndpoint, namespace: str, obj: dict[str, Any], *extra: str) -> Any:
    """Server-side apply one object; never raises, the caller inspects the result."""
    return infra.kubectl(
        "apply", "--server-side", "-n", namespace, *extra, "-f", "-",
        input=yaml.safe_dump(obj), check=False,
    )  # fmt: skip


def get(infra: ClusterEndpoint, namespace: str, name: str) -> dict[str, Any]:
    out = infra.kubectl("get", "gpucellpool", name, "-n", namespace, "-o", "json").stdout
    parsed: dict[str, Any] = json.loads(out)
    return parsed


def variant(base: dict[str, Any], name: str, mutate: Mutation) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    obj["metadata"]["name"] = name
    mutate(obj)
    return obj


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_sample_is_accepted(infra: ClusterEndpoint, namespace: str, sample: Path) -> None:
    proc = infra.kubectl("apply", "--server-side", "-n", namespace, "-f", str(sample), check=False)
    assert proc.returncode == 0, proc.stderr
    for doc in yaml.safe_load_all(sample.read_text()):
        if doc["kind"] == "GPUCellPool":
            served = get(infra, namespace, doc["metadata"]["name"])
            assert GPUCellPool.model_validate(served).spec == GPUCellPool.model_validate(doc).spec


def _set(path: str, value: Any) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        target = obj
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value

    return mutate


def _delete(path: str) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        target = obj
        for part in parents:
            target = target[part]
        del target[leaf]

    return mutate


def _all(*mutations: Mutation) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        for m in mutations:
            m(obj)

    return mutate


AUTO = {"enabled": True, "minReplicas": 1, "maxReplicas": 3}

# (id, base, mutation, texts the apiserver's message must contain)
REJECTIONS: list[tuple[str, dict[str, Any], Mutation, tuple[str, ...]]] = [
    ("wrong-enum", BASE, _set("spec.cell.provisioner", "Terraform"),
     ("spec.cell.provisioner", "Unsupported value", "Terraform")),
    ("wrong-enum-autoscaling", BASE, _set("spec.autoscaling.scaleDown", "Always"),
     ("spec.autoscaling.scaleDown", "Unsupported value")),
    ("missing-required", BASE, _delete("spec.workloadCluster"),
     ("spec.workloadCluster", "Required value")),
    ("missing-required-nested", BASE, _delete("spec.cell.guestTemplate"),
     ("spec.cell.guestTemplate", "Required value")),
    ("negative-replicas", BASE, _set("spec.replicas", -1),
     ("spec.replicas", "greater than or equal to 0")),
    ("gpu-count", BASE, _set("spec.cell.gpu.count", 2), ("spec.cell.gpu.count", "Unsupported")),
    ("bad-duration", BASE, _set("spec.bootstrap.readyTimeout", "15 minutes"),
     ("spec.bootstrap.readyTimeout", "should match")),
    ("cel-clusterapi-missing", BASE, _set("spec.cell.provisioner", "ClusterAPI"),
     ("spec.cell.clusterAPI", "clusterAPI is required when provisioner is ClusterAPI")),
    ("cel-clusterapi-forbidden", BASE, _set("spec.cell.clusterAPI", {"clusterName": "w"}),
     ("spec.cell.clusterAPI", "forbidden otherwise")),
    ("cel-dra-missing", BASE, _delete("spec.cell.gpu.dra"),
     ("spec.cell.gpu", "backend DRA requires dra and forbids native")),
    ("cel-dra-with-native", BASE, _set("spec.cell.gpu.native", {"gpuProfileRef": {"name": "p"}}),
     ("spec.cell.gpu", "backend DRA requires dra and forbids native")),
    ("cel-native-missing", BASE, _set("spec.cell.gpu.backend", "Native"),
     ("spec.cell.gpu", "backend Native requires native and forbids dra")),
    ("cel-dra-both-claims", BASE, _set("spec.cell.gpu.dra.resourceClaimName", "shared"),
     ("spec.cell.gpu.dra", "exactly one of resourceClaimTemplateName and resourceClaimName")),
    ("cel-dra-no-claim", BASE, _delete("spec.cell.gpu.dra.resourceClaimTemplateName"),
     ("spec.cell.gpu.dra", "exactly one of")),
    ("cel-shared-claim-multi", BASE,
     _all(_delete("spec.cell.gpu.dra.resourceClaimTemplateName"),
          _set("spec.cell.gpu.dra.resourceClaimName", "shared")),
     ("spec.cell.gpu.dra.resourceClaimName", "needs replicas <= 1")),
    ("cel-join-secret-missing", BASE, _delete("spec.bootstrap.joinSecretRef"),
     ("spec.bootstrap.joinSecretRef", "bootstrap.joinSecretRef is required")),
    ("cel-join-secret-forbidden-under-capi", CAPI,
     _set("spec.bootstrap", {"joinSecretRef": {"name": "cell-join"}}),
     ("spec.bootstrap.joinSecretRef", "which forbids it")),
    ("cel-template-kind", CAPI,
     _set("spec.cell.clusterAPI.bootstrapConfigTemplateRef.kind", "KubeadmConfig"),
     ("spec.cell.clusterAPI.bootstrapConfigTemplateRef.kind", "kind must end with Template")),
    ("cel-max-required", BASE, _set("spec.autoscaling", {"enabled": True}),
     ("spec.autoscaling.maxReplicas", "maxReplicas is required when autoscaling is enabled")),
    ("cel-min-le-max", BASE, _set("spec.autoscaling", {**AUTO, "minReplicas": 4}),
     ("spec.autoscaling.minReplicas", "minReplicas must be less than or equal to maxReplicas")),
    ("cel-auto-needs-min", BASE,
     _set("spec.autoscaling", {"enabled": True, "maxReplicas": 3, "scaleDown": "Auto"}),
     ("spec.autoscaling.minReplicas", "minReplicas is required when scaleDown is Auto")),
    ("cel-hami-dra-class", BASE, _set("spec.capacity.hami", {"mode": "DRA"}),
     ("spec.capacity.hami.deviceClassName", "deviceClassName is required when mode is DRA")),
    ("cel-prometheus-tls", BASE,
     _set("spec.autoscaling.prometheus", {"url": "https://p:9090", "insecureSkipVerify": True,
                                          "tlsSecretRef": {"name": "ca"}}),
     ("spec.autoscaling.prometheus", "mutually exclusive")),
    ("cel-pool-name", BASE, _set("metadata.name", "p" * 58),
     ("metadata.name must be at most 57 characters",)),
    ("cel-usage-needs-prometheus", BASE, _set("spec.autoscaling", {**AUTO, "scaleDownOn": "Usage"}),
     ("spec.autoscaling.scaleDownOn", "scaleDownOn Usage needs prometheus")),
    ("cel-usage-idle-window", BASE, _set("spec.autoscaling", {**AUTO, "usageIdleWindow": "30s"}),
     ("spec.autoscaling.usageIdleWindow", "usageIdleWindow must be at least 1m")),
    ("usage-signal-enum", BASE, _set("spec.autoscaling", {**AUTO, "scaleDownOn": "Utilisation"}),
     ("spec.autoscaling.scaleDownOn", "Unsupported value")),
    ("hedge-percent", BASE, _set("spec.autoscaling", {**AUTO, "bootHedge": {"sparePercent": 401}}),
     ("spec.autoscaling.bootHedge.sparePercent", "less than or equal to 400")),
    ("hedge-basis", BASE, _set("spec.autoscaling", {**AUTO, "bootHedge": {"per": "Nodes"}}),
     ("spec.autoscaling.bootHedge.per", "Unsupported value")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "base", "mutate", "texts"), REJECTIONS, ids=[r[0] for r in REJECTIONS]
)
def test_invalid_objects_are_rejected_naming_the_field(
    infra: ClusterEndpoint,
    namespace: str,
    case: str,
    base: dict[str, Any],
    mutate: Mutation,
    texts: tuple[str, ...],
) -> None:
    obj = variant(base, case, mutate)
    proc = apply(infra, namespace, obj)
    assert proc.returncode != 0, f"{case} was accepted"
    for text in texts:
        assert text in proc.stderr, proc.stderr


def test_the_same_rules_accept_their_valid_counterparts(
    infra: ClusterEndpoint, namespace: str
) -> None:
    """Guards against rules that reject everything: each near-miss of a rule is accepted."""
    valid = [
        variant(BASE, "auto-legacy", _set("spec.autoscaling", {**AUTO, "scaleDown": "Auto"})),
        variant(BASE, "auto-off-min-gt-max", _set("spec.autoscaling",
                                                  {"minReplicas": 5, "maxReplicas": 2})),
        variant(BASE, "shared-claim-single", _all(
            _delete("spec.cell.gpu.dra.resourceClaimTemplateName"),
            _set("spec.cell.gpu.dra.resourceClaimName", "shared"), _set("spec.replicas", 1))),
        variant(BASE, "hami-dra", _set("spec.capacity.hami", {"mode": "DRA",
                                                              "deviceClassName": "hami"})),
        variant(CAPI, "capi-own-join", _all(
            _delete("spec.cell.clusterAPI.bootstrapConfigTemplateRef"),
            _set("spec.bootstrap", {"joinSecretRef": {"name": "cell-join"}}))),
        variant(BASE, "p" * 57, lambda o: None),
        variant(BASE, "usage-with-prometheus", _set("spec.autoscaling", {
            **AUTO, "scaleDownOn": "Usage", "usageIdleWindow": "1m",
            "prometheus": {"url": "http://prometheus.monitoring:9090"}})),
        variant(BASE, "hedged", _set("spec.autoscaling", {
            **AUTO, "bootHedge": {"sparePercent": 75, "minWaveCells": 1, "per": "Cells"}})),
    ]  # fmt: skip
    for obj in valid:
        proc = apply(infra, namespace, obj)
        assert proc.returncode == 0, (obj["metadata"]["name"], proc.stderr)


def test_unknown_fields_are_pruned_but_the_guest_template_is_kept(
    infra: ClusterEndpoint, namespace: str
) -> None:
    def mutate(obj: dict[str, Any]) -> None:
        obj["spec"]["cell"]["bogusField"] = "x"
        obj["spec"]["autoscaling"] = {"unknownKnob": 3}
        obj["spec"]["cell"]["guestTemplate"]["futureField"] = {"keep": ["me"]}

    obj = variant(BASE, "pruned", mutate)
    # Server-side apply refuses fields outside the schema outright; create (with client and
    # server field validation off) is the path on which the apiserver prunes.
    proc = infra.kubectl("create", "-n", namespace, "--validate=false", "-f", "-",
                         input=yaml.safe_dump(obj), check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    served = get(infra, namespace, "pruned")["spec"]
    assert "bogusField" not in served["cell"]
    assert "unknownKnob" not in served["autoscaling"]
    assert served["cell"]["guestTemplate"]["futureField"] == {"keep": ["me"]}


def test_strict_field_validation_names_the_unknown_field(
    infra: ClusterEndpoint, namespace: str
) -> None:
    obj = variant(BASE, "strict", _set("spec.cell.bogusField", "x"))
    proc = apply(infra, namespace, obj, "--validate=strict")
    assert proc.returncode != 0
    assert "bogusField" in proc.stderr


def test_the_apiserver_fills_the_original_defaults(infra: ClusterEndpoint, namespace: str) -> None:
    minimal = {
        "apiVersion": "cells.kubeswift.io/v1alpha1",
        "kind": "GPUCellPool",
        "metadata": {"name": "minimal"},
        "spec": {
            "cell": {
                "guestTemplate": {"guestClassRef": {"name": "c"}, "imageRef": {"name": "i"}},
                "gpu": {"dra": {"resourceClaimTemplateName": "t"}},
            },
            "bootstrap": {"joinSecretRef": {"name": "j"}},
            "workloadCluster": {"kubeconfigSecretRef": {"name": "k"}},
            "autoscaling": {},
        },
    }
    assert apply(infra, namespace, minimal).returncode == 0
    spec = get(infra, namespace, "minimal")["spec"]
    assert spec["replicas"] == 1
    assert spec["cell"]["provisioner"] == "SwiftGuest"
    assert spec["cell"]["gpu"] == {
        "count": 1,
        "backend": "DRA",
        "dra": {"resourceClaimTemplateName": "t", "requestName": "gpu", "tier": "pcie",
                "hugepages": ""},
    }  # fmt: skip
    assert spec["bootstrap"]["readyTimeout"] == "15m"
    assert "stabilizationWindow" not in spec["autoscaling"]  # no default: unset = react at once
    assert "scaleDownStabilizationWindow" not in spec["autoscaling"]
    assert spec["autoscaling"]["scaleDown"] == "Manual"
    assert spec["autoscaling"]["maxCellsInFlight"] == 4


def test_kubectl_scale_changes_spec_replicas(infra: ClusterEndpoint, namespace: str) -> None:
    assert apply(infra, namespace, variant(BASE, "scaled", lambda o: None)).returncode == 0
    infra.kubectl("scale", "gpucellpool/scaled", "--replicas=3", "-n", namespace)
    assert get(infra, namespace, "scaled")["spec"]["replicas"] == 3
    proc = infra.kubectl("scale", "gpucellpool/scaled", "--replicas=-1", "-n", namespace,
                         check=False)  # fmt: skip
    assert proc.returncode != 0
    assert get(infra, namespace, "scaled")["spec"]["replicas"] == 3


STATUS = {
    "replicas": 2,
    "desiredReplicas": 5,
    "readyCells": 2,
    "selector": "cells.kubeswift.io/pool=shown",
    "physicalCapacity": {"gpus": 2},
    "workloadCapacity": {"gpuMemory": {"available": "12Gi"}},
    "lastDecision": {"reason": "ScaledUp", "message": "3 pods pending", "desiredReplicas": 5,
                     "act": True, "cellsNeeded": 3, "pendingAsks": 3},
    "conditions": [{"type": "Ready", "status": "False", "reason": "CellsNotReady",
                    "message": "2 of 5", "lastTransitionTime": "2026-11-30T10:00:00Z"}],
}  # fmt: skip


def _columns(text: str, name: str) -> dict[str, str]:
    header, *rows = text.strip().splitlines()
    row = next(r for r in rows if r.split()[0] == name)
    return dict(zip(header.split(), row.split(), strict=False))


def test_printer_columns_and_scale_selector_come_from_status(
    infra: ClusterEndpoint, namespace: str
) -> None:
    assert apply(infra, namespace, variant(BASE, "shown", lambda o: None)).returncode == 0
    infra.kubectl("patch", "gpucellpool", "shown", "-n", namespace, "--subresource=status",
                  "--type=merge", "-p", json.dumps({"status": STATUS}))  # fmt: skip
    table = infra.kubectl("get", "gpucellpools", "-n", namespace).stdout
    cols = _columns(table, "shown")
    assert cols["DESIRED"] == "5"  # status.desiredReplicas, while spec.replicas is 2
    assert (cols["READY"], cols["GPUS"], cols["AVAILABLE"], cols["REASON"]) == (
        "2", "2", "False", "ScaledUp")  # fmt: skip
    assert "AGE" in cols
    wide = _columns(infra.kubectl("get", "cellpool", "-n", namespace, "-o", "wide").stdout, "shown")
    assert wide["GPUMEMFREE"] == "12Gi"
    scale = infra.request(
        "GET", f"/apis/cells.kubeswift.io/v1alpha1/namespaces/{namespace}/gpucellpools/shown/scale"
    )
    assert scale["spec"]["replicas"] == 2
    assert scale["status"] == {"replicas": 2, "selector": "cells.kubeswift.io/pool=shown"}


def test_status_is_not_writable_through_the_main_resource(
    infra: ClusterEndpoint, namespace: str
) -> None:
    obj = variant(BASE, "nostatus", lambda o: o.update(status={"desiredReplicas": 9}))
    assert apply(infra, namespace, obj).returncode == 0
    assert "desiredReplicas" not in get(infra, namespace, "nostatus").get("status", {})


def test_the_crd_is_established_and_reapplies_without_warnings(infra: ClusterEndpoint) -> None:
    crd_file = ROOT / "crds" / "cells.kubeswift.io_gpucellpools.yaml"
    proc = infra.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd_file))
    assert "Warning" not in proc.stderr, proc.stderr
    served = json.loads(
        infra.kubectl("get", "crd", "gpucellpools.cells.kubeswift.io", "-o", "json").stdout
    )
    conditions = {c["type"]: c["status"] for c in served["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions.get("NonStructuralSchema", "False") == "False"
    assert served["status"]["acceptedNames"]["shortNames"] == ["cellpool"]
