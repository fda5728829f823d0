"""The scaling policy's configuration: limits, rate rules, windows and the knobs of each path.

Why this module exists: a ``PolicyConfig`` is what a pool's owner chose, as opposed to what the
loop observed (``autoscaler.policy.types``) or what the policy decided
(``autoscaler.policy.decision``). The shell builds one from the GPUCellPool spec
(``autoscaler.policy.config.policy_config_from_spec``; ``validate_config`` there checks it) and
the simulator builds many by hand to compare policies; each knob's default and the measurements
behind it are documented here, in one place. Plain frozen values: nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from autoscaler.policy.types import CellShape, NodeTemplate


class Mode(enum.StrEnum):
    ACTIVE = "Active"
    SHADOW = "Shadow"


class RatePolicyType(enum.StrEnum):
    CELLS = "Cells"  # like HPA "Pods"
    PERCENT = "Percent"


@dataclass(frozen=True, slots=True)
class RatePolicy:
    """At most ``value`` cells (or percent of current cells) per ``period_seconds``."""

    type: RatePolicyType
    value: int
    period_seconds: float


@dataclass(frozen=True, slots=True)
class ScalingRules:
    """One direction of the HPA-style ``behavior`` stanza."""

    stabilization_window_seconds: float
    policies: tuple[RatePolicy, ...] = ()
    select_policy: str = "Max"  # Max | Min | Disabled


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    min_replicas: int = 0
    max_replicas: int = 10
    shape: CellShape = field(default_factory=CellShape)
    node_template: NodeTemplate = field(default_factory=NodeTemplate)
    scale_up: ScalingRules = field(default_factory=lambda: ScalingRules(0.0))
    scale_down: ScalingRules = field(default_factory=lambda: ScalingRules(600.0))
    scale_down_enabled: bool = True
    scale_down_delay_after_scale_up_seconds: float = 600.0
    utilization_threshold: float = 0.5  # a cell below this is a scale-down candidate
    # A Ready cell that a pod took off the idle set hands its idle time to the next cell that
    # falls idle within this share of the expected boot (``boot_seconds``): the pod landed on
    # one idle cell as another's pod ended, and which came first is a race of moments between
    # worlds (``scale_down.hand_over_idle``; docs/autoscaling.md, session 23). Not an API field.
    idle_hand_over_boots: float = 0.05
    max_cells_in_flight: int = 4  # chosen from the sweep in docs/autoscaling.md
    disruption_budget: int = 1  # cells draining at once
    headroom_cells: int = 0
    prewarm: bool = False
    boot_seconds: float = 300.0  # expected boot time; the forecaster looks this far ahead
    mode: Mode = Mode.ACTIVE
    packing_heuristic: str = "first-fit"  # first-fit | best-fit | arrival (see policy.packing)
    forecast_method: str = "theil-sen"  # theil-sen | holt (autoscaler.policy.forecast)
    forecast_window_seconds: float = 1800.0  # recent demand the forecaster looks at
    # Quiet periods of the original gpucellpool's legacy fields (spec.autoscaling
    # stabilizationWindow / scaleDownStabilizationWindow when no ``behavior`` is set): no
    # scale-up within ``scale_up_cooldown_seconds`` of the last one; no scale-down within
    # ``scale_down_cooldown_seconds`` of any scaling action. 0 disables them.
    scale_up_cooldown_seconds: float = 0.0
    scale_down_cooldown_seconds: float = 0.0
    # A pod pending this long is not packed onto Ready cells that were already Ready when it
    # arrived: HAMi had the chance to place it there and did not (stale usage, cordoned GPU,
    # node lock), so it needs other capacity. At most one extra cell per such pod: a cell that
    # became Ready after the pod arrived still counts. 0 disables.
    stuck_pending_seconds: float = 600.0
    # Whether scale-down drains evict (spec drain.mode Evict): pods on Draining cells will then
    # need a home, so they are packed like pending pods and capacity is started before the
    # eviction. With WaitForIdle drains (the default) they finish where they are.
    rehome_draining_pods: bool = False
    # scaleDownOn: Usage. A cell in Observation.idle_cells is a scale-down candidate even when
    # allocated; its idle pods are drained, not re-packed (they do no work worth a home).
    scale_down_on_usage: bool = False
    # Whether ``shape`` was observed or declared (``autoscaler.policy.config.choose_shape``).
    # False: HAMi's defaults stand in for booting cells, and no cell is added above the floor
    # (reason CellShapeUnknown), as the original refused to scale a pool whose shape it never saw.
    shape_known: bool = True
    # Hedged boots (autoscaler.policy.hedge): with every wave, this fraction of the cells
    # pending pods wait for is started as spare boots; pods take the first cells Ready and the
    # spares still booting are cancelled once nobody waits. 0 disables. API:
    # ``spec.autoscaling.bootHedge.sparePercent`` / 100. On by default since session 18: 0.75
    # (min wave 1, per pod) was ahead of Cluster Autoscaler on cost and p95 wait on the four
    # helios-earth months, and with the simulator given the bind delay after a boot (HAMi's
    # pass opening a wave's cells together) tests/e2e/test_fidelity.py passed 7 of 7 runs at
    # x20, 98.1-99.2 % within one cell (2 beside two busy cores); docs/autoscaling.md.
    boot_hedge_fraction: float = 0.75
    # With the hedge: spares are started only for waves of at least this many cells (the
    # cells pending pods wait for). API: ``bootHedge.minWaveCells``. 1: a lone pod gets a
    # spare too (vcSoL's p95 is 5.4 min with 1, above 1.1 boots with 3; session 16).
    boot_hedge_min_wave: int = 1
    # With the hedge: spares are started only once a pending pod has waited this fraction of
    # the expected boot (``boot_seconds``): a pod that finds room within seconds (another pod
    # ending, a bind in flight) starts no spare. In boots so it scales with the pool's boot
    # (and with the demo's compressed time). 0 starts them with the wave. Not an API field.
    # 0.05 (15 s of a 300 s boot) costs no more and waits at most 0.1 min longer at p95 than 0
    # on the whole helios-earth months, and takes most of the twin-vs-simulator races of a few
    # seconds out of the hedge (docs/autoscaling.md, session 15).
    boot_hedge_delay_boots: float = 0.05
    # With the hedge: a Ready cell that has never run a pod retires only once it has been
    # Ready this fraction of the expected boot (``boot_seconds``; plus 1 s for the whole-second
    # Ready time, ``hedge.unused_grace_seconds``), whether it was started as a
    # spare or for a pod that then took a faster cell. The pod a cell was started for binds as
    # it turns Ready and may show on it a decision or two later; after the grace an empty cell
    # is a bet that lost. Without the grace a cell some pod had been packed on while it booted
    # idled out the scale-down window, and which cells pods were packed on is a race of
    # seconds between two worlds (docs/autoscaling.md, session 21). Not an API field.
    unused_ready_grace_boots: float = 0.05
    # With the hedge: size the spares by the pods waiting too, not only the cells:
    # ``ceil(fraction x max(cells waited for, pods waiting for them))``, the pods being those
    # the packing puts on Booting or new cells. Whole-GPU pods on one-GPU cells: unchanged; a
    # wave of fractional pods (four on a cell) starts up to a spare per pod, so its last pods
    # take the fastest of as many boots as a whole-GPU view (Cluster Autoscaler) starts, and
    # the spares are still cancelled while booting (session 18). API: ``bootHedge.per: Pods``
    # (the default; ``Cells`` turns it off).
    boot_hedge_per_pod: bool = True
    # Warm spare (autoscaler.policy.warm_spare): while the pool grew within the last
    # ``warm_spare_seconds``, keep at least this many empty cells, as ``headroom_cells`` does
    # all the time; a quiet pool keeps none and still scales to its floor. 0 disables.
    # API: spec.autoscaling.warmSpare (cells, keepFor).
    warm_spare_cells: int = 1
    warm_spare_seconds: float = 5400.0
    # Keep the warm spare only while this many lone arrivals in a pool that shares GPUs (growth
    # episodes the spare would have absorbed, policy.warm_spare) ended within
    # ``warm_spare_seconds``; 0 keeps it after any growth. API: warmSpare.loneArrivals. On
    # by default since session 19 (1 cell, 90 min, 2): ahead of Cluster Autoscaler on openb's
    # p95 wait, and never opened on the whole-GPU helios months or on bursts.
    warm_spare_lone_arrivals: int = 2
