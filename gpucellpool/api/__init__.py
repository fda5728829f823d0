"""The GPUCellPool API (cells.kubeswift.io/v1alpha1) as pydantic models.

Why this package exists: it is the bottom layer every other part of the operator imports, and
the single source of truth the CRD YAML and docs/api.md are generated from. It is pure: no I/O,
no clock, no logging. Beside the models: ``crdgen`` renders them into the CRD (its ``write`` and
``check``, the ``gpucellpool crd`` command, are the package's only file I/O) and
``metric_catalogue`` names the metrics the operator exports (the other published interface:
dashboards, alerts and the simulator's trace recorder read it).
"""

from gpucellpool.api.autoscaling import (
    AutoscalingMode,
    AutoscalingSpec,
    Behavior,
    CellShapeSpec,
    DemandSelection,
    DrainMode,
    DrainSpec,
    EffectiveRules,
    Prewarm,
    PrometheusSource,
    RatePolicyType,
    ScaleDownMode,
    ScaleDownSignal,
    ScalingPolicy,
    SelectPolicy,
)
from gpucellpool.api.conditions import Condition, ConditionStatus, ConditionType
from gpucellpool.api.durations import Duration, format_duration, parse_duration
from gpucellpool.api.pool import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    POOL_LABEL,
    VERSION,
    GPUCellPool,
    ObjectMeta,
)
from gpucellpool.api.spec import (
    CellSpec,
    GPUBackend,
    GPUCellPoolSpec,
    Provisioner,
    SpreadPolicy,
)
from gpucellpool.api.status import CellPhase, CellStatus, GPUCellPoolStatus, LastDecision

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "POOL_LABEL",
    "VERSION",
    "AutoscalingMode",
    "AutoscalingSpec",
    "Behavior",
    "CellPhase",
    "CellShapeSpec",
    "CellSpec",
    "CellStatus",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "DemandSelection",
    "DrainMode",
    "DrainSpec",
    "Duration",
    "EffectiveRules",
    "GPUBackend",
    "GPUCellPool",
    "GPUCellPoolSpec",
    "GPUCellPoolStatus",
    "LastDecision",
    "ObjectMeta",
    "Prewarm",
    "PrometheusSource",
    "Provisioner",
    "RatePolicyType",
    "ScaleDownMode",
    "ScaleDownSignal",
    "ScalingPolicy",
    "SelectPolicy",
    "SpreadPolicy",
    "format_duration",
    "parse_duration",
]
