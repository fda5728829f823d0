"""Focused tests of the admission rules' parts: paths, messages, settings, ratchet, scale.

The corpus (test_webhook_corpus.py) covers one manifest per rule; these tests pin the pieces
whose behaviour is easier to state directly: how pydantic locations become field paths, that
messages never echo string inputs (they may be credentials), every denied key in every case
and at every depth, strict mode's allowlist, the update ratchet and the scale bounds.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.rules import (
    DEFAULT_SETTINGS,
    FieldError,
    RuleSettings,
    new_secret_references,
    referenced_secrets,
    validate_create,
    validate_scale,
    validate_update,
)
from webhook.rules import guest_fields as gf
from webhook.rules.paths import describe, loc_to_path
from webhook.rules.verdict import MAX_REASONS, Findings

G = "spec.cell.guestTemplate"
POOL: dict[str, Any] = {
    "apiVersion": "cells.kubeswift.io/v1alpha1",
    "kind": "GPUCellPool",
    "metadata": {"name": "unit", "namespace": "cells"},
    "spec": {
        "replicas": 1,
        "cell": {
            "guestTemplate": {
                "guestClassRef": {"name": "c"},
                "imageRef": {"name": "i"},
                "interfaces": [{"name": "mgmt", "primary": True}],
            },
            "gpu": {"dra": {"resourceClaimTemplateName": "t"}},
        },
        "bootstrap": {"joinSecretRef": {"name": "join"}},
        "workloadCluster": {"kubeconfigSecretRef": {"name": "kc"}},
    },
}
STRICT = RuleSettings(strict_guest_template=True)


def pool(**template: Any) -> dict[str, Any]:
    obj = copy.deepcopy(POOL)
    obj["spec"]["cell"]["guestTemplate"].update(template)
    return obj


def reasons(obj: Any, settings: RuleSettings = DEFAULT_SETTINGS) -> dict[str, str]:
    return {r.path: r.message for r in validate_create(obj, settings).reasons}


def test_base_pool_is_admitted_without_warnings() -> None:
    verdict = validate_create(POOL)
    assert verdict.allowed and verdict.reasons == () and verdict.warnings == ()


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("cell", "gpu", "count"), "spec.cell.gpu.count"),
        (
            ("workloadCluster", "node", "taints", 0, "effect"),
            "spec.workloadCluster.node.taints[0].effect",
        ),
        (
            ("workloadCluster", "node", "labels", "app.kubernetes.io/name"),
            "spec.workloadCluster.node.labels[app.kubernetes.io/name]",
        ),
        (
            ("autoscaling", "behavior", "function-plain[_validate()]", "x"),
            "spec.autoscaling.behavior.x",
        ),
        (("labels", "k", "[key]"), "spec.labels.k (key)"),
        ((), "spec"),
    ],
)
def test_pydantic_locations_become_field_paths(loc: tuple[Any, ...], path: str) -> None:
    assert loc_to_path("spec", loc) == path


def test_messages_never_echo_string_inputs() -> None:
    obj = copy.deepcopy(POOL)
    obj["spec"]["replicas"] = "hunter2-secret"
    obj["spec"]["autoscaling"] = {
        "enabled": True,
        "maxReplicas": 2,
        "prometheus": {"url": "https://admin:hunter2-secret@prom:9090"},
    }
    obj["spec"]["autoscaling"]["stabilizationWindow"] = "hunter2-secret"
    verdict = validate_create(obj)
    assert not verdict.allowed
    assert "hunter2" not in verdict.message()
    assert "spec.autoscaling.stabilizationWindow" in verdict.paths()
    assert "spec.replicas" in verdict.paths()


def test_describe_says_what_to_do() -> None:
    assert describe({"type": "missing"}) == "is required; set it"
    assert "at most 100" in describe({"type": "less_than_equal", "ctx": {"le": 100}})
    assert describe({"type": "value_error", "msg": "Value error, bad"}) == "bad"
    typed = describe({"type": "int_type", "input": "x"})
    assert typed == "must be an integer (got string); write a whole number"
    for kind in ("missing", "dict_type", "list_type", "bool_parsing", "string_too_long", "other"):
        message = describe({"type": kind, "msg": "m", "ctx": {"max_length": 3}})
        assert "; " in message, message  # a problem, then what to do


def test_findings_deduplicate_and_cap() -> None:
    found = Findings()
    for i in range(MAX_REASONS + 20):
        found.error(f"p{i}", "m")
        found.error(f"p{i}", "m")
    verdict = found.verdict()
    assert len(verdict.reasons) == MAX_REASONS and not verdict.allowed
    assert str(FieldError("a.b", "fix")) == "a.b: fix"


@pytest.mark.parametrize("key", sorted(set(gf.OPERATOR_OWNED) | set(gf.DENIED)))
@pytest.mark.parametrize("spelling", [str, str.upper, str.capitalize])
def test_every_refused_top_level_key_in_any_case(key: str, spelling: Any) -> None:
    spelled = spelling(key)
    found = reasons(pool(**{spelled: {"name": "x"}}))
    assert f"{G}.{spelled}" in found, found
    assert key in found[f"{G}.{spelled}"]


@pytest.mark.parametrize("key", sorted(gf.DEEP_DENIED))
def test_every_deep_denied_key_is_refused_inside_a_list(key: str) -> None:
    obj = pool(interfaces=[{"name": "mgmt", "primary": True, key: "x"}])
    found = reasons(obj)
    assert any(p.startswith(f"{G}.interfaces[0]") for p in found), (key, found)


def test_control_annotation_keys_are_refused_at_any_depth_and_case() -> None:
    obj = pool(network={"binding": "nat", "x": {"SNAPSHOT.kubeswift.io/restore-path": "/"}})
    assert f"{G}.network.x[SNAPSHOT.kubeswift.io/restore-path]" in reasons(obj)


def test_label_keys_inside_selectors_are_data_not_fields() -> None:
    spread = [{"maxSkew": 1, "topologyKey": "k", "labelSelector": {"matchLabels": {"Name": "a"}}}]
    verdict = validate_create(pool(topologySpreadConstraints=spread))
    assert verdict.allowed, verdict.message()
    assert [w.path for w in verdict.warnings] == [f"{G}.topologySpreadConstraints"]


def test_strict_mode_admits_every_allowlisted_shape() -> None:
    template: dict[str, Any] = {
        "guestClassRef": {"name": "c"},
        "imageRef": {"name": "i"},
        "osType": "linux",
        "guestAgent": {"enabled": True},
        "dataDiskRef": {"name": "d"},
        "dataDiskRefs": [{"name": "d2", "imageRef": {"name": "img"}}],
        "interfaces": [
            {"name": "mgmt", "primary": True, "type": "bridge", "mac": "02:00:00:00:00:01"},
            {"name": "node", "networkRef": {"name": "n", "namespace": "cells"}},
        ],
        "network": {"binding": "nat", "ports": [{"name": "s", "port": 22, "protocol": "TCP"}]},
    }
    obj = copy.deepcopy(POOL)
    obj["spec"]["cell"]["guestTemplate"] = template
    assert validate_create(obj, STRICT).allowed, validate_create(obj, STRICT).message()
    template["guestAgent"]["extra"] = 1
    assert f"{G}.guestAgent.extra" in reasons(obj, STRICT)


def test_strict_mode_refuses_a_shape_mismatch_cleanly() -> None:
    found = reasons(pool(guestAgent=[1]), STRICT)
    assert found[f"{G}.guestAgent"].startswith("must be an object")


def test_unknown_top_level_key_warns_by_default() -> None:
    verdict = validate_create(pool(futureField=1))
    assert verdict.allowed and verdict.warnings[0].path == f"{G}.futureField"


@pytest.mark.parametrize(
    ("interfaces", "path", "text"),
    [
        ([{"name": "a"}, {"name": "a"}], f"{G}.interfaces[1].name", "duplicates"),
        (
            [{"name": "a", "primary": True}, {"name": "b", "primary": True}],
            f"{G}.interfaces",
            "at most one",
        ),
        ([{"primary": True}], f"{G}.interfaces[0].name", "is required"),
        ([{"name": "a", "type": "macvtap"}], f"{G}.interfaces[0].type", "must be bridge"),
        (
            [{"name": "a", "resourceName": "x/y"}],
            f"{G}.interfaces[0].resourceName",
            "only meaningful",
        ),
        (["a"], f"{G}.interfaces[0]", "must be an object"),
    ],
)
def test_interface_shapes(interfaces: list[Any], path: str, text: str) -> None:
    obj = pool(interfaces=interfaces)
    assert text in reasons(obj).get(path, ""), reasons(obj)


def test_cross_namespace_network_with_unknown_pool_namespace_is_refused() -> None:
    obj = pool(interfaces=[{"name": "a", "networkRef": {"name": "n", "namespace": "cells"}}])
    del obj["metadata"]["namespace"]
    assert f"{G}.interfaces[0].networkRef.namespace" in reasons(obj)


def test_too_many_data_disks() -> None:
    disks = [{"name": f"d{i}", "imageRef": {"name": "i"}} for i in range(9)]
    assert "at most 8" in reasons(pool(dataDiskRefs=disks))[f"{G}.dataDiskRefs"]


def test_capi_allows_interfaces_only_besides_refs() -> None:
    obj = pool(osType="linux")
    obj["spec"]["cell"]["provisioner"] = "ClusterAPI"
    obj["spec"]["cell"]["clusterAPI"] = {"clusterName": "w"}
    assert set(reasons(obj)) == {f"{G}.osType"}


@pytest.mark.parametrize(
    ("prefix", "ok"), [("gpu-", True), ("g" * 52, True), ("g" * 53, False), ("Bad_", False)]
)
def test_generate_name(prefix: str, ok: bool) -> None:
    obj = copy.deepcopy(POOL)
    obj["metadata"] = {"generateName": prefix, "namespace": "cells"}
    assert validate_create(obj).allowed is ok


def test_autoscaling_warnings() -> None:
    obj = copy.deepcopy(POOL)
    obj["spec"]["autoscaling"] = {
        "enabled": True,
        "minReplicas": 0,
        "maxReplicas": 2,
        "stabilizationWindow": "5m",
        "behavior": {"scaleUp": {}, "scaleDown": {}},
        "headroomCells": 2,
        "prometheus": {
            "url": "http://prom:9090",
            "authSecretRef": {"name": "t"},
            "insecureSkipVerify": True,
        },
    }
    verdict = validate_create(obj)
    assert verdict.allowed, verdict.message()
    warned = {w.path for w in verdict.warnings}
    assert warned == {
        "spec.autoscaling.stabilizationWindow",
        "spec.autoscaling.behavior.scaleDown",
        "spec.autoscaling.headroomCells",
        "spec.autoscaling.prometheus.authSecretRef",
        "spec.autoscaling.prometheus.insecureSkipVerify",
    }


@pytest.mark.parametrize(
    "url", ["https://[::1", "https://", "http://p:0", "https://p:9090#x", "https://p:99999"]
)
def test_bad_prometheus_urls(url: str) -> None:
    obj = copy.deepcopy(POOL)
    obj["spec"]["autoscaling"] = {"prometheus": {"url": url}}
    assert "spec.autoscaling.prometheus.url" in reasons(obj)


def _live(reachable: str | None, **spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(POOL)
    obj["spec"].update(spec)
    conditions = (
        [] if reachable is None else [{"type": "WorkloadClusterReachable", "status": reachable}]
    )
    obj["status"] = {"replicas": 1, "conditions": conditions}
    return obj


@pytest.mark.parametrize(("reachable", "ok"), [("True", True), (None, True), ("Unknown", False)])
def test_lowering_replicas_depends_on_reachability(reachable: str | None, ok: bool) -> None:
    old = _live(reachable, replicas=3)
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 2
    assert validate_update(old, new).allowed is ok
    assert validate_scale(old, {"spec": {"replicas": 2}}).allowed is ok


def test_update_ratchet_only_when_spec_is_unchanged() -> None:
    old = _live("True")
    old["spec"]["cell"]["guestTemplate"]["nodeName"] = "n"
    same = copy.deepcopy(old)
    same["metadata"]["finalizers"] = []
    verdict = validate_update(old, same)
    assert verdict.allowed and verdict.warnings[0].path == f"{G}.nodeName"
    changed = copy.deepcopy(old)
    changed["spec"]["replicas"] = 2
    assert f"{G}.nodeName" in validate_update(old, changed).paths()


def test_immutable_fields_change_freely_on_an_empty_pool() -> None:
    old = copy.deepcopy(POOL)
    old["spec"]["replicas"] = 0
    new = copy.deepcopy(old)
    new["spec"]["workloadCluster"]["kubeconfigSecretRef"]["name"] = "other"
    assert validate_update(old, new).allowed
    old["status"] = {"cells": [{"name": "unit-0"}]}
    assert "spec.workloadCluster.kubeconfigSecretRef.name" in validate_update(old, new).paths()


def test_scale_without_autoscaling_is_free_and_floor_is_warned() -> None:
    assert validate_scale(_live("True"), {"spec": {"replicas": 50}}).allowed
    auto = _live("True", autoscaling={"enabled": True, "maxReplicas": 4})
    verdict = validate_scale(auto, {"spec": {"replicas": 3}})
    assert verdict.allowed and verdict.warnings[0].path == "spec.replicas"
    assert not validate_scale(auto, {"spec": {"replicas": True}}).allowed


def test_non_object_inputs_are_refused_not_raised() -> None:
    junks: tuple[Any, ...] = (None, [], "pool", 3)
    for junk in junks:
        assert validate_create(junk).paths() == ("(root)",)
        assert not validate_update(POOL, junk).allowed
        assert not validate_scale(junk, junk).allowed


@pytest.mark.parametrize(
    ("spelled", "field"),
    [
        ("\u017feedProfileRef", "seedProfileRef"),  # LONG S folds to s in Go
        ("\u212aernelRef", "kernelRef"),  # KELVIN SIGN folds to k
        ("kernelCmdl\u0131ne", "kernelCmdline"),  # DOTLESS I folds to i
        ("\u0130mageRef", "imageRef"),  # DOTTED CAPITAL I folds to i (Go's simple mapping)
        ("NODENAME", "nodeName"),
    ],
)
def test_keys_fold_like_go_encoding_json(spelled: str, field: str) -> None:
    assert gf.fold(spelled) == gf.fold(field)
    assert f"{G}[{spelled}]" in reasons(pool(**{spelled: {"name": "x"}})) or f"{G}.{spelled}" in (
        reasons(pool(**{spelled: {"name": "x"}}))
    )


def test_fold_keeps_distinct_names_apart() -> None:
    assert gf.fold("stra\u00dfe") != gf.fold("strasse")  # Go has no single-rune fold for sharp s
    assert gf.fold("nodeName") != gf.fold("nodeNames")


def test_integers_too_big_to_print_are_refused_not_raised() -> None:
    huge = 10**5000  # str() refuses it (CPython's 4300-digit limit)
    old = _live("False", replicas=huge)
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 1
    new["spec"]["cell"]["provisioner"] = huge
    assert not validate_create(new).allowed
    assert not validate_update(old, new).allowed
    assert not validate_scale(old, {"spec": {"replicas": huge}}).allowed


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://[fe80::1]:9090",
        "http://[::ffff:169.254.169.254]/",
        "http://2852039166/",
        "http://0xa9.0xfe.0xa9.0xfe/",
        "http://metadata.google.internal/",
    ],
)
def test_prometheus_url_cannot_reach_metadata_services(url: str) -> None:
    obj = copy.deepcopy(POOL)
    obj["spec"]["autoscaling"] = {"prometheus": {"url": url}}
    assert "link-local" in reasons(obj)["spec.autoscaling.prometheus.url"]


def test_prometheus_host_allowlist_setting() -> None:
    obj = copy.deepcopy(POOL)
    obj["spec"]["autoscaling"] = {"prometheus": {"url": "https://prometheus.monitoring:9090"}}
    allow = RuleSettings(allowed_prometheus_hosts=frozenset({"prometheus.monitoring"}))
    deny = RuleSettings(allowed_prometheus_hosts=frozenset({"prom.other"}))
    assert validate_create(obj, allow).allowed
    assert "spec.autoscaling.prometheus.url" in reasons(obj, deny)


def test_referenced_secrets_for_the_servers_access_check() -> None:
    obj = copy.deepcopy(POOL)
    obj["spec"]["autoscaling"] = {
        "prometheus": {"url": "https://p", "authSecretRef": {"name": "tok"}},
    }
    assert referenced_secrets(obj) == (
        ("spec.bootstrap.joinSecretRef.name", "join"),
        ("spec.workloadCluster.kubeconfigSecretRef.name", "kc"),
        ("spec.autoscaling.prometheus.authSecretRef.name", "tok"),
    )
    assert new_secret_references(POOL, obj) == (
        ("spec.autoscaling.prometheus.authSecretRef.name", "tok"),
    )
    assert referenced_secrets(None) == () and new_secret_references(obj, obj) == ()
