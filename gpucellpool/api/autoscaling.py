"""``spec.autoscaling``: the original's knobs with their old meaning, plus ours.

Why this module exists: the autoscaler is the heart of the operator and this is its whole user
surface. Old manifests (``enabled``, ``minReplicas``, ``maxReplicas``, ``stabilizationWindow``,
``scaleDown``, ``scaleDownStabilizationWindow``) must keep meaning what they meant; new knobs
(an HPA-shaped ``behavior``, Shadow mode, utilisation threshold, in-flight limit, disruption
budget, headroom, warm spares and hedged boots (``api.spares``), pre-warming, pool-scoped demand
selection, Prometheus, drain mode, declared cell shape) are optional with defaults. The
``effective_*`` helpers are the single place that resolves old-versus-new precedence, so the
policy never has to.

Precedence, per direction: ``behavior.scaleUp`` when present governs scale-up HPA-style; else
an explicitly set ``stabilizationWindow`` keeps the original meaning (the minimum time between
two scale-ups); else the ``behavior`` defaults apply (react at once). Likewise for scale-down
with ``behavior.scaleDown`` and ``scaleDownStabilizationWindow`` (default window 600 s). The
legacy windows have no schema default on purpose: the original's implicit 10 m between
scale-ups is the weakness this project exists to remove, and a stored default could not be told
apart from a user's explicit choice. ``scaleDown: Auto`` is still required for the pool to
remove cells by itself (``Manual`` never scales down), whatever ``behavior`` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import ConfigDict, Field

from gpucellpool.api.base import (
    NAME_MAX,
    KubeModel,
    LabelSelector,
    SecretKeyReference,
    cel,
    validations,
)
from gpucellpool.api.durations import Duration
from gpucellpool.api.spares import BootHedge, WarmSpare

INT32_MAX = 2**31 - 1  # the original typed counts as int32 with no other upper bound


class ScaleDownMode(StrEnum):
    MANUAL = "Manual"
    AUTO = "Auto"


class AutoscalingMode(StrEnum):
    ACTIVE = "Active"
    SHADOW = "Shadow"


class SelectPolicy(StrEnum):
    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


class RatePolicyType(StrEnum):
    CELLS = "Cells"
    PERCENT = "Percent"


class DrainMode(StrEnum):
    WAIT_FOR_IDLE = "WaitForIdle"
    EVICT = "Evict"


class ScaleDownSignal(StrEnum):
    ALLOCATION = "Allocation"
    USAGE = "Usage"


class ScalingPolicy(KubeModel):
    """At most value cells (or percent of current cells) per periodSeconds."""

    type: RatePolicyType
    """Cells (an absolute count, like HPA Pods) or Percent of the current cell count."""
    value: int = Field(gt=0, le=INT32_MAX)
    """How many cells (or percent) the policy allows per period."""
    period_seconds: int = Field(gt=0, le=1800)
    """Length of the sliding window the policy counts over."""


class ScalingRules(KubeModel):
    """One direction of the HPA-style behavior stanza."""

    stabilization_window_seconds: int = Field(default=0, ge=0, le=3600)
    """Past recommendations considered before acting (HPA semantics)."""
    select_policy: SelectPolicy = SelectPolicy.MAX
    """Which policy wins when several apply; Disabled turns this direction off."""
    policies: list[ScalingPolicy] | None = Field(default=None, max_length=10)
    """Rate limits; empty means no rate limit beyond maxCellsInFlight / disruptionBudget."""


class ScaleUpRules(ScalingRules):
    """Scale-up rules (stabilization defaults to 0: react at once)."""

    stabilization_window_seconds: int = Field(default=0, ge=0, le=3600)
    """Past recommendations considered before scaling up (default 0)."""


class ScaleDownRules(ScalingRules):
    """Scale-down rules (stabilization defaults to 600 seconds)."""

    stabilization_window_seconds: int = Field(default=600, ge=0, le=3600)
    """Past recommendations considered before scaling down (default 600)."""


class Behavior(KubeModel):
    """HPA-shaped scaling behaviour; each direction replaces the matching legacy window."""

    scale_up: ScaleUpRules | None = None
    """Scale-up rules; when set, stabilizationWindow is ignored."""
    scale_down: ScaleDownRules | None = None
    """Scale-down rules; when set, scaleDownStabilizationWindow is ignored."""


class Prewarm(KubeModel):
    """Predictive pre-warming: start cells one boot time ahead of forecast demand."""

    enabled: bool = False
    """Turn pre-warming on. A forecast never scales a pool in."""
    boot_time: Duration = Duration("5m")
    """Expected time from cell creation to usable capacity; how far ahead to look."""


class DemandSelection(KubeModel):
    """Which pending pods count as demand for this pool (on top of cell fit)."""

    scheduler_name: str = Field(default="hami-scheduler", max_length=NAME_MAX)
    """Only pods with this spec.schedulerName count ("" counts every scheduler)."""
    namespace_selector: LabelSelector | None = None
    """Only pods in namespaces matching this selector count (unset: all namespaces)."""
    pod_selector: LabelSelector | None = None
    """Only pods matching this selector count (unset: all pods)."""


class TLSSecretReference(KubeModel):
    """A Secret holding the CA bundle that signs the Prometheus server certificate."""

    name: str = Field(min_length=1, max_length=NAME_MAX)
    """Name of the Secret."""
    key: str = Field(default="ca.crt", min_length=1, max_length=NAME_MAX)
    """Key of the PEM CA bundle inside the Secret."""


class PrometheusSource(KubeModel):
    """Prometheus that holds the HAMi scheduler and monitor metrics."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!(has(self.tlsSecretRef) && has(self.insecureSkipVerify)"
                " && self.insecureSkipVerify)",
                "tlsSecretRef and insecureSkipVerify are mutually exclusive",
            )
        )
    )

    url: str = Field(pattern=r"^https?://", max_length=2048)
    """Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090."""
    auth_secret_ref: SecretKeyReference | None = None
    """Secret key holding a bearer token (key defaults to token)."""
    tls_secret_ref: TLSSecretReference | None = None
    """Secret key holding the CA bundle for https URLs (key defaults to ca.crt)."""
    insecure_skip_verify: bool = False
    """Skip TLS verification (testing only)."""
    stale_after: Duration = Duration("2m")
    """Samples older than this are stale: scale-down freezes, scale-up uses pending pods."""


class DrainSpec(KubeModel):
    """How a leaving cell is emptied: scale-down, rolling update, a drained infrastructure
    Node, and pool deletion with deletion.policy Drain."""

    mode: DrainMode = DrainMode.WAIT_FOR_IDLE
    """WaitForIdle cordons and waits for HAMi allocations to reach zero (the original);
    Evict also evicts the pods through the Eviction API, honouring PodDisruptionBudgets."""
    timeout: Duration | None = None
    """When set, a scale-down or rolling-update drain not finished within it is abandoned and
    the cell uncordoned and kept, while a drain for a drained infrastructure Node proceeds
    (the cell is deleted); unset waits for ever (the original behaviour). Pool deletion uses
    deletion.drainTimeout instead."""


class CellShapeSpec(KubeModel):
    """Declared shape of one cell's GPU, so a brand-new pool can scale from zero."""

    gpu_memory_mib: int = Field(alias="gpuMemoryMiB", ge=1, le=16 * 1024 * 1024)
    """GPU memory per GPU in MiB, as HAMi advertises it."""
    gpu_cores: int = Field(default=100, ge=1, le=10000)
    """Compute per GPU in HAMi core percent (100 x deviceCoreScaling)."""
    slots: int = Field(default=10, ge=1, le=1024)
    """Pods that may share one GPU (HAMi deviceSplitCount)."""


@dataclass(frozen=True, slots=True)
class EffectiveRules:
    """One direction's rules after resolving legacy fields against ``behavior``.

    ``cooldown_seconds`` is the original's quiet period after an action in this direction;
    ``stabilization_window_seconds`` is HPA's recommendation window (the demand-free window
    for legacy scale-down). ``policies`` are (type, value, periodSeconds).
    """

    enabled: bool
    stabilization_window_seconds: float
    cooldown_seconds: float
    select_policy: SelectPolicy
    policies: tuple[tuple[RatePolicyType, int, int], ...] = ()


def _policies(rules: ScalingRules) -> tuple[tuple[RatePolicyType, int, int], ...]:
    return tuple((p.type, p.value, p.period_seconds) for p in rules.policies or ())


class AutoscalingSpec(KubeModel):
    """Demand-driven sizing of the pool."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!self.enabled || has(self.maxReplicas)",
                "maxReplicas is required when autoscaling is enabled",
                ".maxReplicas",
            ),
            cel(
                "!self.enabled || !has(self.minReplicas) || !has(self.maxReplicas)"
                " || self.minReplicas <= self.maxReplicas",
                "minReplicas must be less than or equal to maxReplicas",
                ".minReplicas",
            ),
            cel(
                "!self.enabled || self.scaleDown != 'Auto' || has(self.minReplicas)",
                "minReplicas is required when scaleDown is Auto",
                ".minReplicas",
            ),
            cel(
                "self.scaleDownOn != 'Usage' || has(self.prometheus)",
                "scaleDownOn Usage needs prometheus: measured use is read from HAMi's monitor",
                ".scaleDownOn",
            ),
            cel(
                "!has(self.usageIdleWindow) || duration(self.usageIdleWindow) >= duration('1m')",
                "usageIdleWindow must be at least 1m (a pod between two kernels is not idle)",
                ".usageIdleWindow",
            ),
        )
    )

    enabled: bool = False
    """Turn on demand-driven sizing; off means the pool has exactly spec.replicas cells."""
    min_replicas: int | None = Field(default=None, ge=0, le=INT32_MAX)
    """Floor (default: spec.replicas). Required when scaleDown is Auto."""
    max_replicas: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Ceiling; required when enabled."""
    stabilization_window: Duration | None = None
    """Legacy: minimum time between two scale-ups, honoured when set (ignored when
    behavior.scaleUp is set). Unset: scale up at once by what the backlog needs."""
    scale_down: ScaleDownMode = ScaleDownMode.MANUAL
    """Auto lets the pool remove idle cells itself; Manual never scales down."""
    scale_down_stabilization_window: Duration | None = None
    """Legacy: how long demand must be absent, and how long after any scaling action, before a
    scale-down, honoured when set (ignored when behavior.scaleDown is set). Unset: the
    behavior.scaleDown defaults (600 s stabilisation window)."""
    mode: AutoscalingMode = AutoscalingMode.ACTIVE
    """Shadow computes and publishes decisions (status, events, metrics) without acting."""
    behavior: Behavior | None = None
    """HPA-shaped scale-up/scale-down rules; each direction replaces its legacy window."""
    utilization_threshold_percent: int = Field(default=50, ge=0, le=100)
    """A cell whose HAMi allocation (max of memory, cores, slots) stays below this percent is
    a scale-down candidate; 0 means only empty cells are."""
    scale_down_delay_after_scale_up: Duration = Duration("10m")
    """No scale-down this soon after a scale-up."""
    max_cells_in_flight: int = Field(default=4, ge=1, le=100)
    """At most this many cells booting at once while no cell is Ready (boots not yet proven)
    or any cell is Failed; no in-flight limit while a Ready cell shows boots work."""
    disruption_budget: int = Field(default=1, ge=1, le=100)
    """At most this many cells draining at once (scale-down, and cells leaving a cordoned or
    drained infrastructure Node; applies with autoscaling disabled too)."""
    headroom_cells: int = Field(default=0, ge=0, le=100)
    """Keep this many empty cells beyond the demand (within maxReplicas)."""
    warm_spare: WarmSpare = Field(default_factory=WarmSpare)
    """Empty cells kept only while lone pods keep arriving at a pool that shares GPUs (on by
    default: 1 cell)."""
    boot_hedge: BootHedge = Field(default_factory=BootHedge)
    """Spare boots with each scale-up, cancelled while still booting (on by default)."""
    prewarm: Prewarm = Field(default_factory=Prewarm)
    """Predictive pre-warming (off by default)."""
    demand: DemandSelection = Field(default_factory=DemandSelection)
    """Which pending pods count as this pool's demand."""
    prometheus: PrometheusSource | None = None
    """Prometheus for utilisation; unset means HAMi pod annotations only."""
    drain: DrainSpec = Field(default_factory=DrainSpec)
    """How scale-down empties a cell."""
    cell_shape: CellShapeSpec | None = None
    """Declared cell shape, used until a cell reports one: from then on the shape a Ready cell
    reports, and with no cell Ready the last one reported (status.cellDeviceShape). Without
    either, no cell is added above minReplicas (CellShapeKnown False, CellShapeUnknown)."""
    priority: int = Field(default=0, ge=-1000, le=1000)
    """Expander priority among the autoscaled pools of one workload cluster (higher wins).
    A pending pod that several pools' demand selections match, and that a fresh cell of more
    than one of them could host, is counted by exactly one of them: the highest priority; on a
    tie the pool whose fresh cell the pod would leave least unused (memory and cores); on a tie
    again the pool whose namespace/name sorts first. The other pools say so in
    lastDecision.message."""
    scale_down_on: ScaleDownSignal = ScaleDownSignal.ALLOCATION
    """What makes a Ready cell a scale-down candidate. Allocation (the default): its HAMi
    allocation is below utilizationThresholdPercent, and its pods must re-pack elsewhere.
    Usage: also a cell whose every pod has launched no GPU kernel for usageIdleWindow (HAMi
    monitor's hami_container_last_kernel_elapsed_seconds), even if fully allocated; its idle
    pods are drained (drain.mode, PodDisruptionBudgets and disruptionBudget apply) and are not
    re-packed. Needs prometheus; frozen while the MetricsAvailable condition is False."""
    usage_idle_window: Duration = Duration("30m")
    """With scaleDownOn Usage: how long every pod of a cell must have launched no GPU kernel
    before the cell counts as idle (at least 1m). The scale-down stabilisation window still
    applies after it."""

    def effective_min(self, spec_replicas: int) -> int:
        """The floor: minReplicas, else spec.replicas; spec.replicas itself when disabled."""
        if not self.enabled:
            return spec_replicas
        return spec_replicas if self.min_replicas is None else self.min_replicas

    def effective_max(self, spec_replicas: int) -> int:
        """The ceiling: maxReplicas (never below the floor); spec.replicas when disabled."""
        floor = self.effective_min(spec_replicas)
        if not self.enabled or self.max_replicas is None:
            return floor
        return max(self.max_replicas, floor)

    def acts(self) -> bool:
        """False in Shadow mode: decisions are published, not carried out."""
        return self.mode == AutoscalingMode.ACTIVE

    def utilization_threshold(self) -> float:
        """The utilisation threshold as a fraction in [0, 1]."""
        return self.utilization_threshold_percent / 100.0

    def scale_up_rules(self) -> EffectiveRules:
        """Scale-up rules after legacy/behavior precedence."""
        rules = self.behavior.scale_up if self.behavior else None
        if rules is None and self.stabilization_window is None:
            rules = ScaleUpRules()
        if rules is None:
            assert self.stabilization_window is not None
            return EffectiveRules(
                enabled=True,
                stabilization_window_seconds=0.0,
                cooldown_seconds=self.stabilization_window.seconds,
                select_policy=SelectPolicy.MAX,
            )
        return EffectiveRules(
            enabled=rules.select_policy != SelectPolicy.DISABLED,
            stabilization_window_seconds=float(rules.stabilization_window_seconds),
            cooldown_seconds=0.0,
            select_policy=rules.select_policy,
            policies=_policies(rules),
        )

    def scale_down_rules(self) -> EffectiveRules:
        """Scale-down rules after legacy/behavior precedence (disabled unless scaleDown Auto)."""
        auto = self.scale_down == ScaleDownMode.AUTO
        rules = self.behavior.scale_down if self.behavior else None
        if rules is None and self.scale_down_stabilization_window is None:
            rules = ScaleDownRules()
        if rules is None:
            assert self.scale_down_stabilization_window is not None
            window = self.scale_down_stabilization_window.seconds
            return EffectiveRules(
                enabled=auto,
                stabilization_window_seconds=window,
                cooldown_seconds=window,
                select_policy=SelectPolicy.MAX,
            )
        return EffectiveRules(
            enabled=auto and rules.select_policy != SelectPolicy.DISABLED,
            stabilization_window_seconds=float(rules.stabilization_window_seconds),
            cooldown_seconds=0.0,
            select_policy=rules.select_policy,
            policies=_policies(rules),
        )
