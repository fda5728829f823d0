"""``PolicyConfig`` helpers: validation, small ``replace`` helpers, and the API-spec mapping.

Why this module exists: the live loop builds a ``PolicyConfig`` from a GPUCellPool spec, and
the simulator builds many by hand to compare policies. Both need the same checks (a config that
cannot be honoured is reported, not silently clamped) and the same mapping of the API's fields,
including the original gpucellpool's legacy windows, onto the policy's knobs.

It also decides which cell shape the live loop packs with (``choose_shape``), in the original's
order (reference §3.3) with the declared shape added before giving up: a Ready cell's HAMi
registration now (``Learned``), else the shape remembered in ``status.cellDeviceShape``
(``Remembered``: makes ``minReplicas: 0`` recoverable), else ``spec.autoscaling.cellShape``
(``Declared``), else none (``CellShapeUnknown``: HAMi's defaults stand in for booting cells and
no cell is added above the floor). The provisioner writes ``cellDeviceShape`` from each pass's
HAMi reading of the Ready cells, so "learned" and "remembered" are the same field read with
and without a Ready cell behind it; the simulator passes its own shape.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autoscaler.policy.forecast import METHODS
from autoscaler.policy.packing import HEURISTICS
from autoscaler.policy.policy_config import (
    Mode,
    PolicyConfig,
    RatePolicy,
    RatePolicyType,
    ScalingRules,
)
from autoscaler.policy.types import CellShape, NodeTemplate, Taint
from gpucellpool.api.autoscaling import DrainMode, EffectiveRules, ScaleDownSignal
from gpucellpool.api.conditions import CellShapeReason
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.spares import HedgeBasis
from gpucellpool.api.spec import GPUCellPoolSpec
from gpucellpool.api.status import CellDeviceShape

SELECT_POLICIES = ("Max", "Min", "Disabled")


def _rules_errors(name: str, rules: ScalingRules) -> list[str]:
    errors = []
    if rules.stabilization_window_seconds < 0:
        errors.append(f"{name}.stabilization_window_seconds must be >= 0")
    if rules.select_policy not in SELECT_POLICIES:
        errors.append(f"{name}.select_policy must be one of {SELECT_POLICIES}")
    for i, policy in enumerate(rules.policies):
        if policy.value <= 0 or policy.period_seconds <= 0:
            errors.append(f"{name}.policies[{i}]: value and period_seconds must be > 0")
    return errors


def _spare_errors(config: PolicyConfig) -> list[str]:
    """Hedged boots and the warm spare: cells started or kept beyond what pods ask for."""
    errors = []
    if not 0.0 <= config.boot_hedge_fraction <= 10.0:
        errors.append("boot_hedge_fraction must be within [0, 10]")
    if config.boot_hedge_min_wave < 1:
        errors.append("boot_hedge_min_wave must be at least 1")
    if not 0.0 <= config.boot_hedge_delay_boots <= 1.0:
        errors.append("boot_hedge_delay_boots must be within [0, 1]")
    if not 0.0 <= config.unused_ready_grace_boots <= 1.0:
        errors.append("unused_ready_grace_boots must be within [0, 1]")
    if config.warm_spare_cells < 0:
        errors.append("warm_spare_cells must be >= 0")
    if config.warm_spare_seconds < 0:
        errors.append("warm_spare_seconds must be >= 0")
    if config.warm_spare_lone_arrivals < 0:
        errors.append("warm_spare_lone_arrivals must be >= 0")
    return errors


def validate_config(config: PolicyConfig) -> tuple[str, ...]:
    """Every reason ``config`` cannot be honoured as written; empty when it is valid."""
    errors: list[str] = []
    if config.min_replicas < 0:
        errors.append("min_replicas must be >= 0")
    if config.max_replicas < config.min_replicas:
        errors.append(f"max_replicas {config.max_replicas} < min_replicas {config.min_replicas}")
    shape = config.shape
    if min(shape.gpus, shape.memory_mib, shape.cores_percent, shape.slots) <= 0:
        errors.append("shape: gpus, memory_mib, cores_percent and slots must all be > 0")
    if not 0.0 <= config.utilization_threshold <= 1.0:
        errors.append("utilization_threshold must be within [0, 1]")
    if not 0.0 <= config.idle_hand_over_boots <= 1.0:
        errors.append("idle_hand_over_boots must be within [0, 1]")
    if config.max_cells_in_flight < 0 or config.disruption_budget < 0:
        errors.append("max_cells_in_flight and disruption_budget must be >= 0")
    if config.headroom_cells < 0:
        errors.append("headroom_cells must be >= 0")
    errors.extend(_spare_errors(config))
    if config.boot_seconds < 0 or config.forecast_window_seconds <= 0:
        errors.append("boot_seconds must be >= 0 and forecast_window_seconds > 0")
    if config.packing_heuristic not in HEURISTICS:
        errors.append(f"packing_heuristic must be one of {HEURISTICS}")
    if config.forecast_method not in METHODS:
        errors.append(f"forecast_method must be one of {METHODS}")
    errors += _rules_errors("scale_up", config.scale_up)
    errors += _rules_errors("scale_down", config.scale_down)
    return tuple(errors)


def with_replicas(config: PolicyConfig, min_replicas: int, max_replicas: int) -> PolicyConfig:
    """``config`` with a new floor and ceiling."""
    return replace(config, min_replicas=min_replicas, max_replicas=max_replicas)


def with_shape(config: PolicyConfig, shape: CellShape) -> PolicyConfig:
    """``config`` with a learned or declared cell shape."""
    return replace(config, shape=shape)


def shadow(config: PolicyConfig) -> PolicyConfig:
    """``config`` in Shadow mode: decisions are published, not acted on."""
    return replace(config, mode=Mode.SHADOW)


def _rules(rules: EffectiveRules) -> ScalingRules:
    policies = tuple(
        RatePolicy(RatePolicyType(str(kind)), value, float(period))
        for kind, value, period in rules.policies
    )
    return ScalingRules(rules.stabilization_window_seconds, policies, str(rules.select_policy))


@dataclass(frozen=True, slots=True)
class ShapeChoice:
    """The shape to pack with, where it came from, and that said in words."""

    shape: CellShape
    source: CellShapeReason
    message: str

    @property
    def known(self) -> bool:
        return self.source is not CellShapeReason.UNKNOWN


def _describe(shape: CellShape) -> str:
    return (
        f"{shape.gpus} GPU(s) per cell, {shape.memory_mib} MiB, {shape.cores_percent}% cores "
        f"and {shape.slots} slots per GPU"
    )


def choose_shape(
    spec: GPUCellPoolSpec, remembered: CellDeviceShape | None, ready_cells: int
) -> ShapeChoice:
    """The cell shape in the original's order, with the declared one before giving up.

    ``remembered``: ``status.cellDeviceShape`` (the provisioner's reading of a Ready cell's HAMi
    registration, kept when the cells are gone); ``ready_cells``: how many cells are Ready now
    (with one, the remembered shape is the live one). GPUs per cell come from
    ``expectedDevicesPerCell``; slots (HAMi's split count, not in the registration summary)
    from the declared shape, else HAMi's default.
    """
    declared = spec.autoscaling.cell_shape
    gpus = spec.expected_devices_per_cell()
    slots = declared.slots if declared is not None else CellShape().slots
    if remembered is not None and remembered.memory_mib and remembered.core_percent:
        shape = CellShape(gpus, remembered.memory_mib, remembered.core_percent, slots)
        model = remembered.model or "unnamed model"
        if ready_cells > 0:
            why = f"learned from a Ready cell's HAMi registration ({model})"
            return ShapeChoice(shape, CellShapeReason.LEARNED, f"{_describe(shape)}: {why}")
        why = f"remembered in status.cellDeviceShape ({model}); no cell is Ready"
        return ShapeChoice(shape, CellShapeReason.REMEMBERED, f"{_describe(shape)}: {why}")
    if declared is not None:
        shape = CellShape(gpus, declared.gpu_memory_mib, declared.gpu_cores, declared.slots)
        why = "declared in spec.autoscaling.cellShape; no cell has reported one yet"
        return ShapeChoice(shape, CellShapeReason.DECLARED, f"{_describe(shape)}: {why}")
    shape = CellShape(gpus=gpus)
    why = (
        "no cell has reported a shape and spec.autoscaling.cellShape is not set: no cell is "
        f"added above minReplicas until one does (HAMi's defaults, {_describe(shape)}, "
        "stand in for booting cells)"
    )
    return ShapeChoice(shape, CellShapeReason.UNKNOWN, why)


def pool_shape(pool: GPUCellPool) -> ShapeChoice:
    """``choose_shape`` for a pool as stored: its remembered shape and its Ready cells."""
    return choose_shape(pool.spec, pool.status.cell_device_shape, pool.status.ready_cells)


def _shape(spec: GPUCellPoolSpec, learned: CellShape | None) -> CellShape:
    if learned is not None:
        return learned
    declared = spec.autoscaling.cell_shape
    gpus = spec.expected_devices_per_cell()
    if declared is None:
        return CellShape(gpus=gpus)
    return CellShape(gpus, declared.gpu_memory_mib, declared.gpu_cores, declared.slots)


def _resolve(
    spec: GPUCellPoolSpec, learned: CellShape | ShapeChoice | None
) -> tuple[CellShape, bool]:
    if isinstance(learned, ShapeChoice):
        return learned.shape, learned.known
    return _shape(spec, learned), True


def _template(spec: GPUCellPoolSpec) -> NodeTemplate:
    node = spec.workload_cluster.node
    if node is None:
        return NodeTemplate()
    taints = tuple(Taint(t.key, t.value or "", str(t.effect)) for t in node.taints or ())
    return NodeTemplate(dict(node.labels or {}), taints)


def policy_config_from_spec(
    spec: GPUCellPoolSpec, learned_shape: CellShape | ShapeChoice | None = None
) -> PolicyConfig:
    """The policy's view of a GPUCellPool spec.

    The shape is ``learned_shape``: the live loop's ``choose_shape`` (whose ``CellShapeUnknown``
    turns ``shape_known`` off) or a plain shape (the simulator's); without one, the declared
    ``autoscaling.cellShape``, else HAMi's defaults with ``expectedDevicesPerCell`` GPUs.
    Legacy windows, when set and not replaced by ``behavior``, become cooldowns as the original
    used them: no scale-up within ``stabilizationWindow`` of the last one, no scale-down within
    ``scaleDownStabilizationWindow`` of any action. With autoscaling off, min = max =
    ``spec.replicas``.
    """
    auto = spec.autoscaling
    up, down = auto.scale_up_rules(), auto.scale_down_rules()
    shape, known = _resolve(spec, learned_shape)
    return PolicyConfig(
        min_replicas=auto.effective_min(spec.replicas),
        max_replicas=auto.effective_max(spec.replicas),
        shape=shape,
        shape_known=known,
        node_template=_template(spec),
        scale_up=_rules(up),
        scale_down=_rules(down),
        scale_down_enabled=down.enabled,
        scale_down_delay_after_scale_up_seconds=auto.scale_down_delay_after_scale_up.seconds,
        utilization_threshold=auto.utilization_threshold(),
        max_cells_in_flight=auto.max_cells_in_flight,
        disruption_budget=auto.disruption_budget,
        headroom_cells=auto.headroom_cells,
        warm_spare_cells=auto.warm_spare.cells,
        warm_spare_seconds=auto.warm_spare.keep_for.seconds,
        warm_spare_lone_arrivals=auto.warm_spare.lone_arrivals,
        boot_hedge_fraction=auto.boot_hedge.spare_percent / 100.0,
        boot_hedge_min_wave=auto.boot_hedge.min_wave_cells,
        boot_hedge_per_pod=auto.boot_hedge.per == HedgeBasis.PODS,
        prewarm=auto.prewarm.enabled,
        boot_seconds=auto.prewarm.boot_time.seconds,
        mode=Mode.ACTIVE if auto.acts() else Mode.SHADOW,
        scale_up_cooldown_seconds=up.cooldown_seconds,
        scale_down_cooldown_seconds=down.cooldown_seconds,
        rehome_draining_pods=auto.drain.mode == DrainMode.EVICT,
        scale_down_on_usage=auto.scale_down_on == ScaleDownSignal.USAGE,
    )
