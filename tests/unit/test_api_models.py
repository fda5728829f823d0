"""The GPUCellPool models: defaults, enums, legacy meaning, samples, status round trips."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpucellpool.api import (
    ConditionType,
    GPUCellPool,
    RatePolicyType,
    SelectPolicy,
)

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "config" / "samples"

MINIMAL: dict[str, Any] = {
    "apiVersion": "cells.kubeswift.io/v1alpha1",
    "kind": "GPUCellPool",
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {
        "cell": {
            "guestTemplate": {"guestClassRef": {"name": "c"}, "imageRef": {"name": "i"}},
            "gpu": {"dra": {"resourceClaimTemplateName": "t"}},
        },
        "bootstrap": {"joinSecretRef": {"name": "join"}},
        "workloadCluster": {"kubeconfigSecretRef": {"name": "kc"}},
    },
}


def pool(**spec_patch: Any) -> GPUCellPool:
    """MINIMAL with top-level spec keys replaced."""
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(spec_patch)
    return GPUCellPool.model_validate(obj)


def dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[part]
    return obj


def sample_pools() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        found += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return [(name, d) for name, d in found if d["kind"] == "GPUCellPool"]


# The original's defaults (reference §1.1) and ours, as the API spells them.
DEFAULTS = [
    ("replicas", 1),
    ("cell.provisioner", "SwiftGuest"),
    ("cell.gpu.count", 1),
    ("cell.gpu.backend", "DRA"),
    ("cell.gpu.dra.requestName", "gpu"),
    ("cell.gpu.dra.tier", "pcie"),
    ("cell.gpu.dra.hugepages", ""),
    ("cell.spreadPolicy", "Spread"),
    ("cell.nodeIPFrom", ""),
    ("bootstrap.provider", "Opaque"),
    ("bootstrap.joinSecretKey", "user-data"),
    ("bootstrap.hostname", "CellName"),
    ("bootstrap.readyTimeout", "15m"),
    ("workloadCluster.key", "value"),
    ("capacity.provider", "HAMi"),
    ("capacity.readyTimeout", "5m"),
    ("autoscaling.enabled", False),
    ("autoscaling.scaleDown", "Manual"),
    ("deletion.policy", "Drain"),
    ("deletion.drainTimeout", "10m"),
    ("updatePolicy.type", "Manual"),
    ("autoscaling.mode", "Active"),
    ("autoscaling.utilizationThresholdPercent", 50),
    ("autoscaling.scaleDownDelayAfterScaleUp", "10m"),
    ("autoscaling.maxCellsInFlight", 4),
    ("autoscaling.disruptionBudget", 1),
    ("autoscaling.headroomCells", 0),
    ("autoscaling.warmSpare.cells", 1),
    ("autoscaling.warmSpare.keepFor", "90m"),
    ("autoscaling.warmSpare.loneArrivals", 2),
    ("autoscaling.prewarm.enabled", False),
    ("autoscaling.prewarm.bootTime", "5m"),
    ("autoscaling.demand.schedulerName", "hami-scheduler"),
    ("autoscaling.drain.mode", "WaitForIdle"),
]


@pytest.mark.parametrize(("path", "expected"), DEFAULTS)
def test_defaults_fill_an_old_minimal_manifest(path: str, expected: object) -> None:
    spec = GPUCellPool.model_validate(MINIMAL).spec.to_api()
    assert dig(spec, path) == expected


def test_absent_optional_fields_are_absent_not_null() -> None:
    spec = GPUCellPool.model_validate(MINIMAL).spec.to_api()
    for path in ("autoscaling.minReplicas", "autoscaling.maxReplicas", "autoscaling.behavior",
                 "autoscaling.prometheus", "autoscaling.cellShape", "autoscaling.drain.timeout",
                 "cell.clusterAPI", "cell.gpu.native"):  # fmt: skip
        parent, _, leaf = path.rpartition(".")
        assert leaf not in dig(spec, parent), path


@pytest.mark.parametrize(
    ("spec_patch", "field"),
    [
        ({"replicas": -1}, "replicas"),
        ({"cell": {**MINIMAL["spec"]["cell"], "provisioner": "Terraform"}}, "provisioner"),
        ({"cell": {**MINIMAL["spec"]["cell"], "spreadPolicy": "Random"}}, "spreadPolicy"),
        ({"cell": {**MINIMAL["spec"]["cell"], "gpu": {"count": 2}}}, "count"),
        ({"cell": {**MINIMAL["spec"]["cell"], "gpu": {"backend": "MIG"}}}, "backend"),
        ({"cell": {**MINIMAL["spec"]["cell"], "gpu": {"dra": {"tier": "hgx-full"}}}}, "tier"),
        ({"cell": {**MINIMAL["spec"]["cell"], "gpu": {"dra": {"hugepages": "4Ki"}}}}, "hugepages"),
        ({"bootstrap": {"provider": "KubeadmToken"}}, "provider"),
        ({"bootstrap": {"hostname": "Random"}}, "hostname"),
        ({"bootstrap": {"readyTimeout": "15 minutes"}}, "readyTimeout"),
        ({"capacity": {"provider": "NVIDIA"}}, "provider"),
        ({"capacity": {"hami": {"mode": "MIG"}}}, "mode"),
        ({"deletion": {"policy": "Orphan"}}, "policy"),
        ({"updatePolicy": {"type": "Recreate"}}, "type"),
        ({"autoscaling": {"scaleDown": "Always"}}, "scaleDown"),
        ({"autoscaling": {"mode": "DryRun"}}, "mode"),
        ({"autoscaling": {"drain": {"mode": "Kill"}}}, "mode"),
        ({"autoscaling": {"utilizationThresholdPercent": 101}}, "utilizationThresholdPercent"),
        ({"autoscaling": {"maxCellsInFlight": 0}}, "maxCellsInFlight"),
        ({"autoscaling": {"behavior": {"scaleUp": {"selectPolicy": "Avg"}}}}, "selectPolicy"),
        (
            {"autoscaling": {"behavior": {"scaleUp": {"policies": [
                {"type": "Pods", "value": 1, "periodSeconds": 60}]}}}},
            "type",
        ),
        (
            {"autoscaling": {"behavior": {"scaleDown": {"policies": [
                {"type": "Cells", "value": 1, "periodSeconds": 1801}]}}}},
            "periodSeconds",
        ),
        ({"workloadCluster": {"kubeconfigSecretRef": {"name": ""}}}, "name"),
        ({"workloadCluster": {}}, "kubeconfigSecretRef"),
    ],
)  # fmt: skip
def test_invalid_values_are_rejected_naming_the_field(
    spec_patch: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        pool(**spec_patch)
    assert field in str(caught.value)


@pytest.mark.parametrize("missing", ["cell", "workloadCluster"])
def test_required_spec_fields(missing: str) -> None:
    obj = copy.deepcopy(MINIMAL)
    del obj["spec"][missing]
    with pytest.raises(ValidationError, match=missing):
        GPUCellPool.model_validate(obj)


def test_guest_template_is_opaque_and_preserved() -> None:
    template = {"guestClassRef": {"name": "c"}, "imageRef": {"name": "i"}, "future": {"x": [1]}}
    p = pool(cell={**MINIMAL["spec"]["cell"], "guestTemplate": template})
    assert p.spec.to_api()["cell"]["guestTemplate"] == template


def test_unknown_fields_are_ignored_on_read() -> None:
    p = pool(cell={**MINIMAL["spec"]["cell"], "someFutureKnob": 3}, alsoNew={"a": 1})
    assert "someFutureKnob" not in p.spec.to_api()["cell"]
    assert "alsoNew" not in p.spec.to_api()


# ---- old manifests keep their meaning ------------------------------------------------------


def test_legacy_autoscaling_off_pins_the_pool_to_spec_replicas() -> None:
    p = pool(replicas=3, autoscaling={"enabled": False, "minReplicas": 1, "maxReplicas": 9})
    assert (p.desired_floor(), p.desired_ceiling()) == (3, 3)


@pytest.mark.parametrize(
    ("replicas", "autoscaling", "floor", "ceiling"),
    [
        (2, {"enabled": True, "maxReplicas": 5}, 2, 5),  # floor falls back to spec.replicas
        (2, {"enabled": True, "minReplicas": 0, "maxReplicas": 5}, 0, 5),
        (4, {"enabled": True, "maxReplicas": 3}, 4, 4),  # ceiling never below the floor
        (1, {"enabled": True}, 1, 1),  # no max (the CRD rejects this): hold at the floor
    ],
)
def test_effective_bounds(
    replicas: int, autoscaling: dict[str, Any], floor: int, ceiling: int
) -> None:
    a = pool(replicas=replicas, autoscaling=autoscaling).spec.autoscaling
    assert (a.effective_min(replicas), a.effective_max(replicas)) == (floor, ceiling)


def test_legacy_windows_mean_what_they_meant() -> None:
    a = pool(autoscaling={"enabled": True, "maxReplicas": 4, "minReplicas": 0,
                          "stabilizationWindow": "5m", "scaleDown": "Auto",
                          "scaleDownStabilizationWindow": "1h"}).spec.autoscaling  # fmt: skip
    up, down = a.scale_up_rules(), a.scale_down_rules()
    assert (up.enabled, up.cooldown_seconds, up.stabilization_window_seconds) == (True, 300, 0)
    assert (down.enabled, down.cooldown_seconds, down.stabilization_window_seconds) == (
        True, 3600, 3600)  # fmt: skip


def test_unset_legacy_windows_mean_react_at_once_and_manual_never_scales_down() -> None:
    a = pool(autoscaling={"enabled": True, "maxReplicas": 4}).spec.autoscaling
    assert a.stabilization_window is None and a.scale_down_stabilization_window is None
    up, down = a.scale_up_rules(), a.scale_down_rules()
    assert (up.cooldown_seconds, up.stabilization_window_seconds) == (0, 0)
    assert (down.cooldown_seconds, down.stabilization_window_seconds) == (0, 600)
    assert down.enabled is False
    assert "stabilizationWindow" not in pool(autoscaling={"enabled": True}).spec.to_api().get(
        "autoscaling", {}
    )


def test_behavior_replaces_the_legacy_window_per_direction() -> None:
    behavior = {"scaleUp": {"policies": [{"type": "Cells", "value": 4, "periodSeconds": 60}]}}
    a = pool(autoscaling={"enabled": True, "maxReplicas": 8, "minReplicas": 0, "scaleDown": "Auto",
                          "scaleDownStabilizationWindow": "30m",
                          "behavior": behavior}).spec.autoscaling  # fmt: skip
    up, down = a.scale_up_rules(), a.scale_down_rules()
    assert (up.cooldown_seconds, up.stabilization_window_seconds) == (0, 0)
    assert up.policies == ((RatePolicyType.CELLS, 4, 60),)
    assert down.cooldown_seconds == 1800  # scaleDown not in behavior: the set legacy window rules


def test_behavior_scale_down_defaults_and_disabled() -> None:
    a = pool(autoscaling={"enabled": True, "maxReplicas": 8, "minReplicas": 0, "scaleDown": "Auto",
                          "behavior": {"scaleDown": {}, "scaleUp": {"selectPolicy": "Disabled"}}}
             ).spec.autoscaling  # fmt: skip
    assert a.scale_down_rules().stabilization_window_seconds == 600
    assert a.scale_down_rules().enabled is True
    assert a.scale_up_rules().enabled is False
    assert a.scale_up_rules().select_policy == SelectPolicy.DISABLED


def test_behavior_cannot_turn_on_scale_down_under_manual() -> None:
    a = pool(autoscaling={"enabled": True, "maxReplicas": 8, "behavior": {"scaleDown": {}}})
    assert a.spec.autoscaling.scale_down_rules().enabled is False


def test_shadow_mode_does_not_act_and_threshold_is_a_fraction() -> None:
    a = pool(autoscaling={"mode": "Shadow", "utilizationThresholdPercent": 35}).spec.autoscaling
    assert a.acts() is False
    assert a.utilization_threshold() == pytest.approx(0.35)
    assert pool().spec.autoscaling.acts() is True


def test_expected_devices_per_cell_defaults_to_gpu_count() -> None:
    assert pool().spec.expected_devices_per_cell() == 1
    assert (
        pool(capacity={"hami": {"expectedDevicesPerCell": 2}}).spec.expected_devices_per_cell() == 2
    )


# ---- samples -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "obj"), sample_pools(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_sample_validates_and_round_trips(name: str, obj: dict[str, Any]) -> None:
    parsed = GPUCellPool.model_validate(obj)
    again = GPUCellPool.model_validate(parsed.to_api())
    assert again == parsed
    assert parsed.metadata.name and len(parsed.metadata.name) <= 57


def test_samples_cover_the_documented_cases() -> None:
    pools = {name: GPUCellPool.model_validate(obj) for name, obj in sample_pools()}
    assert {p.spec.cell.gpu.backend.value for p in pools.values()} == {"DRA", "Native"}
    assert {p.spec.cell.provisioner.value for p in pools.values()} == {"SwiftGuest", "ClusterAPI"}
    auto = [p for p in pools.values() if p.spec.autoscaling.enabled]
    assert auto and all(p.spec.autoscaling.behavior and p.spec.autoscaling.prometheus for p in auto)
    secrets = [d for p in sorted(SAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
               if d and d["kind"] == "Secret"]  # fmt: skip
    template = secrets[0]["stringData"]["user-data"]
    for token in ("cellName", "poolName", "nodeLabels", "nodeIPInterface", "expectedGPUs"):
        assert "{{ " + token + " }}" in template


OPERATOR_OWNED = {"seedProfileRef", "gpuProfileRef", "gpuResourceClaim", "nodeName", "migration",
                  "runPolicy", "kernelRef", "cloneFromSnapshot", "vhostUserDevices", "filesystems",
                  "schedulerName", "topologySpreadConstraints"}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "obj"), sample_pools(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_sample_guest_templates_follow_the_webhook_contract(name: str, obj: dict[str, Any]) -> None:
    cell = GPUCellPool.model_validate(obj).spec.cell
    keys = set(cell.guest_template)
    assert {"guestClassRef", "imageRef"} <= keys
    assert not keys & OPERATOR_OWNED
    if cell.provisioner == "ClusterAPI":
        assert keys <= {"imageRef", "guestClassRef", "interfaces"}
    names = [i["name"] for i in cell.guest_template.get("interfaces", [])]
    assert cell.node_ip_from in ("", *names)


# ---- status --------------------------------------------------------------------------------

STATUS = {
    "observedGeneration": 3,
    "replicas": 2,
    "selector": "cells.kubeswift.io/pool=p",
    "readyCells": 1,
    "desiredReplicas": 3,
    "physicalCapacity": {"gpus": 2, "freeGPUsInCluster": None},
    "cells": [
        {"name": "p-0", "index": 0, "phase": "Ready", "guestUID": "u0", "nodeReady": True,
         "lastTransitionTime": "2026-11-30T10:00:00Z"},
        {"name": "p-1", "index": 1, "phase": "Booting"},
    ],
    "conditions": [
        {"type": "Ready", "status": "False", "reason": "CellsNotReady", "message": "1 of 3",
         "lastTransitionTime": "2026-11-30T10:00:00Z", "observedGeneration": 3},
    ],
    "lastDecision": {"reason": "ScaledUp", "message": "2 pods pending", "desiredReplicas": 3,
                     "act": False, "cellsNeeded": 1, "pendingAsks": 2,
                     "time": "2026-11-30T10:00:01+00:00"},
}  # fmt: skip


def test_status_round_trips_with_rfc3339_times() -> None:
    obj = {**copy.deepcopy(MINIMAL), "status": STATUS}
    p = GPUCellPool.model_validate(obj)
    out = p.status.to_api()
    assert out["cells"][0]["guestUID"] == "u0"
    assert out["cells"][0]["lastTransitionTime"] == "2026-11-30T10:00:00Z"
    assert out["lastDecision"]["time"] == "2026-11-30T10:00:01Z"
    assert out["lastDecision"]["act"] is False
    assert "freeGPUsInCluster" not in out["physicalCapacity"]  # null = unknown, omitted
    ready = p.status.condition(ConditionType.READY)
    assert ready is not None and ready.status == "False" and ready.observed_generation == 3
    assert p.status.condition("ScalingActive") is None


@pytest.mark.parametrize(
    ("path", "bad"),
    [("cells.0.phase", "Exploded"), ("conditions.0.status", "Maybe"),
     ("conditions.0.lastTransitionTime", "2026-11-30T10:00:00")],  # naive times are ambiguous
)  # fmt: skip
def test_status_rejects_bad_phases_statuses_and_naive_times(path: str, bad: str) -> None:
    status = copy.deepcopy(STATUS)
    parent, _, leaf = path.rpartition(".")
    target: Any = status
    for part in parent.split("."):
        target = target[int(part)] if part.isdigit() else target[part]
    target[leaf] = bad
    with pytest.raises(ValidationError):
        GPUCellPool.model_validate({**MINIMAL, "status": status})


def test_status_times_serialize_in_utc() -> None:
    p = GPUCellPool.model_validate({**MINIMAL, "status": STATUS})
    p.status.demand_free_since = datetime(
        2026, 11, 30, 12, 0, 0, 900, tzinfo=timezone(timedelta(hours=2))
    )
    assert p.status.to_api()["demandFreeSince"] == "2026-11-30T10:00:00Z"
    assert p.selector() == "cells.kubeswift.io/pool=p"
