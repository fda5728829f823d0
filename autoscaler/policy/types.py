"""Value types shared by the scaling policy, the live control loop and the simulator.

Why this module exists: the production operator and the offline simulator must drive the very
same ``decide`` function. They can only do that if both speak in the same plain, immutable
values: what a pending pod asks of HAMi, what a cell looks like, what the loop observed, what
the policy remembers between calls, and the decision it returns. Nothing here does I/O, reads
a clock or logs; time is always passed in as ``now`` (seconds on the caller's clock).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------
# What pods ask for
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GPUAsk:
    """One container's (or one pod's combined) HAMi ask, per GPU.

    ``gpu_count`` distinct physical GPUs on one node, each giving ``memory_mib`` MiB (or
    ``memory_percent`` of the GPU when only ``nvidia.com/gpumem-percentage`` was given; when
    both are None the ask takes the whole GPU's memory), ``cores_percent`` of its SMs and one
    slot.
    """

    gpu_count: int = 1
    memory_mib: int | None = None
    memory_percent: int | None = None
    cores_percent: int = 0

    def memory_on(self, gpu_memory_mib: int) -> int:
        """MiB this ask takes on a GPU with ``gpu_memory_mib`` of memory."""
        if self.memory_mib is not None:
            return self.memory_mib
        if self.memory_percent is not None:
            return gpu_memory_mib * min(self.memory_percent, 100) // 100
        return gpu_memory_mib


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" matches every effect


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PlacementConstraints:
    """The parts of a pod spec that decide whether a fresh cell's Node could take it.

    ``required_terms`` are the pod's requiredDuringScheduling node-affinity terms (ORed; the
    requirements inside one term are ANDed). Empty means no affinity constraint.
    """

    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_terms: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingPod:
    """A pod the workload scheduler could not place, with its whole-pod HAMi ask.

    ``ask`` is the pod total as HAMi places it: ``gpu_count`` GPUs on one node, each needing
    ``memory``/``cores`` and one slot (hami-facts §3.3). ``first_seen`` is when the loop (or the
    simulator) first saw it pending, on the caller's clock.
    """

    key: str  # namespace/name
    ask: GPUAsk
    first_seen: float
    constraints: PlacementConstraints = field(default_factory=PlacementConstraints)
    # Per-container asks, in HAMi's allocation order, when the pod has more than one GPU
    # container. HAMi allocates each container its own ``gpu_count`` distinct GPUs on the same
    # node; two containers may share one GPU. Empty means "one container asking ``ask``".
    # ``ask`` is then a conservative summary (see autoscaler.policy.demand.summarise).
    container_asks: tuple[GPUAsk, ...] = ()

    def asks(self) -> tuple[GPUAsk, ...]:
        """The asks HAMi places one after another on one node for this pod."""
        return self.container_asks or (self.ask,)


# ---------------------------------------------------------------------------------------------
# What cells look like
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CellShape:
    """The declared (or learned) shape of one cell: its GPUs as HAMi will advertise them."""

    gpus: int = 1
    memory_mib: int = 24576  # per GPU
    cores_percent: int = 100  # per GPU (100 x deviceCoreScaling)
    slots: int = 10  # per GPU (deviceSplitCount)


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """Labels and taints every Node of this pool carries; what pool-fit is tested against."""

    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class GPUUsage:
    """What HAMi has allocated on one GPU of a cell."""

    memory_mib: int = 0
    cores_percent: int = 0
    slots: int = 0


class CellState(enum.StrEnum):
    BOOTING = "Booting"  # requested, not yet usable: upcoming capacity
    READY = "Ready"  # usable by HAMi
    DRAINING = "Draining"  # being removed: no capacity, not a candidate
    FAILED = "Failed"  # counts toward nothing


@dataclass(frozen=True, slots=True)
class CellView:
    """One cell as the policy sees it.

    ``gpus`` holds per-GPU usage for Ready and Draining cells (length = shape.gpus); a Booting
    cell has no usage yet (treated as empty). ``pods`` is the number of pods running on it
    (DaemonSet and mirror pods do not count: ``observe.is_workload_pod``) and
    ``evictable_pods`` how many of them the Eviction API could remove now; both feed the
    drain-cost ordering of scale-down victims.
    """

    name: str
    index: int
    state: CellState
    created_at: float
    gpus: tuple[GPUUsage, ...] = ()
    pods: int = 0
    evictable_pods: int = 0
    ready_at: float | None = None
    # Optional: the asks of the pods running on the cell (one tuple of container asks per
    # pod), when the caller knows them (the simulator does). Scale-down uses them to re-pack a
    # victim's pods exactly; without them each used GPU is moved as one indivisible block.
    pod_asks: tuple[tuple[GPUAsk, ...], ...] = ()


# ---------------------------------------------------------------------------------------------
# What the loop observed and what the policy remembers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricsHealth:
    """Whether utilisation metrics are trustworthy right now.

    Missing or stale metrics must never read as zero: when ``fresh`` is False the policy
    freezes scale-down and scales up from pending pods only.
    """

    fresh: bool = True
    age_seconds: float = 0.0
    detail: str = ""
    # The read itself failed (no answer, an HTTP error, a malformed body), as opposed to series
    # that are missing or old. The policy treats both alike; only a failed read is counted as a
    # scrape error (``gpucell_capacity_scrape_errors_total{reason="demand"}``).
    read_failed: bool = False


@dataclass(frozen=True, slots=True)
class Observation:
    """One snapshot handed to ``decide``."""

    pending: tuple[PendingPod, ...]
    cells: tuple[CellView, ...]
    metrics: MetricsHealth = field(default_factory=MetricsHealth)
    free_physical_gpus: int | None = None  # None = unknown (not a constraint)
    workload_cluster_reachable: bool = True
    # Ready cells whose every pod has been idle (no GPU kernel) for the usage idle window, per
    # a fresh monitor reading; empty when unmeasured. Used only with scaleDownOn: Usage.
    idle_cells: frozenset[str] = frozenset()
    # Cells the provisioner refused to drain for this plan (status.planRejections: a drain
    # abandoned recently): not chosen as victims until it accepts them again.
    protected: frozenset[str] = frozenset()


# A pool's growth episode: (first scale-up, last scale-up, most new cells its pending pods
# needed, whether the pool shared GPUs at each of its scale-ups). policy.warm_spare
GrowthEpisode = tuple[float, float, int, bool]


@dataclass(frozen=True, slots=True)
class PolicyMemory:
    """What ``decide`` remembers between calls. The caller stores it and hands it back.

    ``recommendations`` are (time, desired) pairs inside the longest stabilisation window,
    HPA-style; ``idle_since`` maps a cell name to when it was first seen below the utilisation
    threshold; ``demand_samples`` are (time, cells needed) pairs for the forecaster.
    """

    last_scale_up_at: float | None = None
    last_scale_down_at: float | None = None
    recommendations: tuple[tuple[float, int], ...] = ()
    idle_since: Mapping[str, float] = field(default_factory=dict)
    demand_samples: tuple[tuple[float, float], ...] = ()
    scale_events: tuple[tuple[float, int], ...] = ()  # (time, +n / -n) for rate policies
    # A cell was Ready since the last Failed one: boots work, so the in-flight limit is lifted
    # even when the pool has scaled to zero (policy.limits.in_flight_limit)
    boots_proven: bool = False
    # With hedged boots: the cells that have never run a pod (Booting, or Ready and empty ever
    # since). Such a Ready cell is a bet that lost and retires at once (policy.hedge)
    never_used: frozenset[str] = frozenset()
    # With hedged boots: the recent scale-ups, oldest first, as (time, Ready + Booting cells
    # before it, ``last_scale_up_at`` before it). When cancelled bets bring the count back to
    # where a scale-up started, that scale-up is forgotten (``policy.hedge.forget_cancelled``).
    scale_ups: tuple[tuple[float, int, float | None], ...] = ()
    # With the warm spare's lone-arrival rule: the recent growth episodes, oldest first
    # (policy.warm_spare.grown)
    growth_episodes: tuple[GrowthEpisode, ...] = ()
    # Idle times of Ready cells a pod took off the idle set, not handed over yet, as (idle
    # since, left at), oldest first (``scale_down.hand_over_idle``)
    idle_left: tuple[tuple[float, float], ...] = ()


# ---------------------------------------------------------------------------------------------
# Configuration (built from the GPUCellPool spec by the shell, or directly by the simulator)
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# The decision
# ---------------------------------------------------------------------------------------------


class Reason(enum.StrEnum):
    """Machine-readable reason for every outcome, including doing nothing."""

    SCALED_UP = "ScaledUp"
    SCALED_DOWN = "ScaledDown"
    # hedged spare cells that never ran a pod given up (boots cancelled, unused Ready cells
    # retired; autoscaler.policy.hedge): not a scale-down of cells that served
    SPARES_CANCELLED = "SparesCancelled"
    PREWARMED = "Prewarmed"
    HEADROOM = "Headroom"
    STABILIZING = "Stabilizing"
    RATE_LIMITED = "RateLimited"
    AT_MAX_REPLICAS = "AtMaxReplicas"
    AT_MIN_REPLICAS = "AtMinReplicas"
    BELOW_MIN_REPLICAS = "BelowMinReplicas"
    IN_FLIGHT_LIMIT = "InFlightLimit"
    INSUFFICIENT_PHYSICAL_GPU = "InsufficientPhysicalGPU"
    DEMAND_UNSATISFIABLE = "DemandUnsatisfiable"
    CELL_SHAPE_UNKNOWN = "CellShapeUnknown"  # no cell above the floor until a shape is known
    DEMAND_SATISFIED = "DemandSatisfied"  # pending pods fit free or booting capacity
    METRICS_STALE = "MetricsStale"  # scale-down frozen
    SCALE_DOWN_DISABLED = "ScaleDownDisabled"
    SCALE_DOWN_DELAYED = "ScaleDownDelayed"  # too soon after a scale-up
    DISRUPTION_BUDGET = "DisruptionBudget"
    NO_IDLE_CELL = "NoIdleCell"
    WORKLOAD_CLUSTER_UNREACHABLE = "WorkloadClusterUnreachable"
    IDLE = "Idle"  # nothing pending, nothing to remove


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A pending pod no fresh cell of this pool could ever host, and why."""

    key: str
    reason: str  # e.g. NodeSelectorMismatch, TooManyGPUs, CardInsufficientMemory
    message: str


class Reads(enum.StrEnum):
    """What of the cells a decision read (``policy.same_facts``), for a caller to tell which
    changed observations would give the same decision."""

    FACTS = "facts"  # counts and each cell's facts (state, empty, below threshold, busy drain)
    CELLS = "cells"  # any cell's usage (pods packed, a victim's pods re-packed)


@dataclass(frozen=True, slots=True)
class Steady:
    """How long a decision holds while the observation stays the same (``policy.next_change``).

    Before ``until`` (seconds, the caller's clock), calling ``decide`` again with the same
    observation gives the same count, reason, victims and ``act``; each such call would only
    record ``raw`` (the raw recommendation; None: nothing) and ``cells_used`` (a demand sample;
    None: nothing) in memory, trimmed to the horizons. A caller may skip those calls (the
    simulator) or sleep until ``until`` (the live loop's requeue) and lose nothing. So does an
    observation that differs only in what ``reads`` says the decision did not look at
    (``policy.same_facts.holds_after``).
    """

    until: float
    raw: int | None = None
    cells_used: float | None = None
    recommendation_horizon_seconds: float = 0.0
    event_horizon_seconds: float | None = None  # None: scale events are not trimmed
    sample_window_seconds: float = 0.0
    reads: Reads = Reads.CELLS  # a changed observation may repeat it (``policy.same_facts``)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy wants, and why.

    ``desired_replicas`` is the target cell count. ``victims`` names cells to drain (cheapest
    first) when scaling down. ``act`` is False in Shadow mode: publish, do not act.
    """

    desired_replicas: int
    reason: Reason
    message: str
    memory: PolicyMemory
    victims: tuple[str, ...] = ()
    act: bool = True
    cells_needed: int = 0  # cells the packed backlog needs beyond free and booting capacity
    pending_asks: int = 0  # pending pods that count for this pool
    unschedulable: tuple[Unschedulable, ...] = ()
    forecast_cells: float | None = None
    # None: no promise, decide again at the next tick (see ``Steady``)
    steady: Steady | None = None
    # Of ``victims``, those chosen while they ran no pod (surplus boots and unused spares
    # cancelled, empty idle cells scaled down): the provisioner keeps one that a pod runs on by
    # the time it acts (``provisioner.fsm.plan_check``, ``VictimInUse``)
    empty_victims: tuple[str, ...] = ()
