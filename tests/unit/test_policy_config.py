"""PolicyConfig validation, helpers, and the GPUCellPool spec mapping (on the shipped samples)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from autoscaler.policy.config import (
    policy_config_from_spec,
    shadow,
    validate_config,
    with_replicas,
    with_shape,
)
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.policy_config import (
    Mode,
    PolicyConfig,
    RatePolicy,
    RatePolicyType,
    ScalingRules,
)
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    Observation,
    PendingPod,
    PolicyMemory,
    Taint,
)
from gpucellpool.api.pool import GPUCellPool

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"


def sample(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((SAMPLES / name).read_text()) if d]
    body: dict[str, Any] = next(d for d in docs if d.get("kind") == "GPUCellPool")
    return body


def test_default_config_is_valid_and_helpers() -> None:
    config = PolicyConfig()
    assert validate_config(config) == ()
    assert with_replicas(config, 1, 3).max_replicas == 3
    assert with_shape(config, CellShape(gpus=2)).shape.gpus == 2
    assert shadow(config).mode == Mode.SHADOW


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"min_replicas": -1}, "min_replicas"),
        ({"min_replicas": 5, "max_replicas": 2}, "max_replicas 2 < min_replicas 5"),
        ({"shape": CellShape(slots=0)}, "shape"),
        ({"utilization_threshold": 1.5}, "utilization_threshold"),
        ({"headroom_cells": -1}, "headroom_cells"),
        ({"packing_heuristic": "worst-fit"}, "packing_heuristic"),
        ({"forecast_method": "oracle"}, "forecast_method"),
        ({"scale_up": ScalingRules(-1.0)}, "scale_up.stabilization_window_seconds"),
        ({"scale_down": ScalingRules(0.0, select_policy="Avg")}, "scale_down.select_policy"),
        (
            {"scale_up": ScalingRules(0.0, (RatePolicy(RatePolicyType.CELLS, 0, 60.0),))},
            "scale_up.policies[0]",
        ),
    ],
)
def test_invalid_configs_are_reported(change: dict[str, Any], fragment: str) -> None:
    errors = validate_config(replace(PolicyConfig(), **change))
    assert any(fragment in e for e in errors), errors


def test_mapping_of_the_autoscaling_sample() -> None:
    pool = GPUCellPool.model_validate(sample("autoscaling-on.yaml"))
    config = policy_config_from_spec(pool.spec)
    assert validate_config(config) == ()
    assert (config.min_replicas, config.max_replicas) == (0, 8)
    assert config.shape == CellShape(1, 24576, 100, 10)
    assert dict(config.node_template.labels) == {"gpu": "on"}
    assert config.scale_up.policies == (
        RatePolicy(RatePolicyType.CELLS, 4, 60.0),
        RatePolicy(RatePolicyType.PERCENT, 100, 60.0),
    )
    assert config.scale_down == ScalingRules(
        600.0, (RatePolicy(RatePolicyType.CELLS, 1, 300.0),), "Min"
    )
    assert config.scale_down_enabled
    assert config.prewarm and config.boot_seconds == 300.0
    assert config.utilization_threshold == 0.5
    assert (config.scale_up_cooldown_seconds, config.scale_down_cooldown_seconds) == (0.0, 0.0)
    assert config.rehome_draining_pods  # the sample drains with mode Evict
    assert policy_config_from_spec(pool.spec, CellShape(gpus=1, memory_mib=81920)).shape == (
        CellShape(gpus=1, memory_mib=81920)
    )


def test_mapping_with_autoscaling_off_pins_the_count() -> None:
    pool = GPUCellPool.model_validate(sample("autoscaling-off.yaml"))
    config = policy_config_from_spec(pool.spec)
    assert config.min_replicas == config.max_replicas == pool.spec.replicas
    assert not config.scale_down_enabled


def test_legacy_windows_become_cooldowns_and_taints_map() -> None:
    body = sample("autoscaling-on.yaml")
    auto = body["spec"]["autoscaling"]
    del auto["behavior"], auto["cellShape"]
    auto["mode"] = "Shadow"
    body["spec"]["workloadCluster"]["node"]["taints"] = [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    ]
    config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
    assert config.scale_up_cooldown_seconds == 0.0  # unset legacy windows: behavior defaults
    assert config.scale_down.stabilization_window_seconds == 600.0
    auto["stabilizationWindow"], auto["scaleDownStabilizationWindow"] = "10m", "30m"
    config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
    assert config.scale_up_cooldown_seconds == 600.0
    assert config.scale_down_cooldown_seconds == 1800.0
    assert config.scale_down.stabilization_window_seconds == 1800.0
    assert config.mode == Mode.SHADOW
    assert config.shape == CellShape(gpus=1)
    assert config.node_template.taints == (Taint("dedicated", "gpu", "NoSchedule"),)
    del auto["drain"]
    assert not policy_config_from_spec(GPUCellPool.model_validate(body).spec).rehome_draining_pods


def test_cooldowns_are_enforced_by_decide() -> None:
    now = 5000.0
    config = PolicyConfig(scale_up_cooldown_seconds=600.0, scale_down_cooldown_seconds=1800.0)
    pods = (PendingPod("ns/p", GPUAsk(1, None, None, 100), now),)
    mem = PolicyMemory(last_scale_up_at=now - 100)
    d = decide(Observation(pods, ()), mem, config, now)
    assert (d.reason, d.desired_replicas) == (Reason.STABILIZING, 0)
    assert "cooldown 600s" in d.message
    cell = CellView("a", 0, CellState.READY, 0.0)
    down = PolicyMemory(last_scale_down_at=now - 1000, idle_since={"a": 0.0})
    d = decide(Observation((), (cell,)), down, replace(config, scale_down=ScalingRules(0.0)), now)
    assert (d.reason, d.desired_replicas) == (Reason.STABILIZING, 1)
    later = replace(down, last_scale_down_at=now - 2000)
    d = decide(Observation((), (cell,)), later, replace(config, scale_down=ScalingRules(0.0)), now)
    assert (d.reason, d.victims) == (Reason.SCALED_DOWN, ("a",))


def test_warm_spare_maps_and_is_on_by_default() -> None:
    body = sample("autoscaling-on.yaml")
    config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
    warm = (config.warm_spare_cells, config.warm_spare_seconds, config.warm_spare_lone_arrivals)
    assert warm == (1, 5400.0, 2) == (1, PolicyConfig().warm_spare_seconds, 2)
    body["spec"]["autoscaling"]["warmSpare"] = {"cells": 2, "keepFor": "30m", "loneArrivals": 0}
    config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
    warm = (config.warm_spare_cells, config.warm_spare_seconds, config.warm_spare_lone_arrivals)
    assert warm == (2, 1800.0, 0)
    body["spec"]["autoscaling"]["warmSpare"] = {"cells": 0}  # off, the other fields default
    config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
    assert (config.warm_spare_cells, config.warm_spare_lone_arrivals) == (0, 2)
    for bad in ({"cells": -1}, {"loneArrivals": -1}, {"loneArrivals": 101}):
        body["spec"]["autoscaling"]["warmSpare"] = bad
        with pytest.raises(ValidationError, match="warmSpare"):
            GPUCellPool.model_validate(body)


def test_boot_hedge_maps_and_is_on_by_default() -> None:
    body = sample("autoscaling-on.yaml")
    config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
    hedge = (config.boot_hedge_fraction, config.boot_hedge_min_wave, config.boot_hedge_per_pod)
    assert hedge == (0.75, 1, True)  # a lone pod's wave gets a spare; fractional pods count
    body["spec"]["autoscaling"]["bootHedge"] = {"sparePercent": 0}
    config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
    assert config.boot_hedge_fraction == 0.0  # off: no spare boot
    body["spec"]["autoscaling"]["bootHedge"] = {
        "sparePercent": 50,
        "minWaveCells": 3,
        "per": "Cells",
    }
    config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
    hedge = (config.boot_hedge_fraction, config.boot_hedge_min_wave, config.boot_hedge_per_pod)
    assert hedge == (0.5, 3, False)
    assert validate_config(config) == ()


@pytest.mark.parametrize(
    "hedge",
    [{"sparePercent": -1}, {"sparePercent": 401}, {"minWaveCells": 0}, {"per": "Nodes"}],
)
def test_a_bad_boot_hedge_is_refused_naming_the_field(hedge: dict[str, Any]) -> None:
    body = sample("autoscaling-on.yaml")
    body["spec"]["autoscaling"]["bootHedge"] = hedge
    with pytest.raises(ValidationError, match="bootHedge"):
        GPUCellPool.model_validate(body)


def test_a_hedged_pool_from_a_manifest_starts_a_spare_per_waiting_pod_through_decide() -> None:
    """The mapped fields reach ``decide``: by default (``sparePercent: 75``) a proven pool
    whose two quarter-GPU pods have waited past the hedge's delay for a new cell starts that
    cell and ceil(0.75 x 2) spares (per pod); ``per: Cells`` starts ceil(0.75 x 1); off, none."""
    body = sample("autoscaling-on.yaml")
    body["spec"]["autoscaling"]["maxReplicas"] = 20
    now = 5000.0
    quarter = GPUAsk(memory_percent=25, cores_percent=25)
    pods = tuple(PendingPod(f"ns/q{i}", quarter, now - 60) for i in range(2))
    proven = PolicyMemory(boots_proven=True)
    wanted = {}
    for hedge in ({"sparePercent": 0}, {}, {"per": "Cells"}):
        body["spec"]["autoscaling"]["bootHedge"] = hedge
        config = policy_config_from_spec(GPUCellPool.model_validate(body).spec)
        used = tuple(GPUUsage(config.shape.memory_mib, 100, 1) for _ in range(config.shape.gpus))
        full = CellView("a", 0, CellState.READY, 0.0, gpus=used, pods=len(used), ready_at=0.0)
        d = decide(Observation(pods, (full,)), proven, config, now)
        wanted[str(hedge.get("per", "off" if "sparePercent" in hedge else "Pods"))] = (
            d.desired_replicas
        )
    assert wanted == {"off": 2, "Pods": 4, "Cells": 3}
