"""What the scaling policy is shown: pod asks, cells, the observation and the policy's memory.

Why this module exists: the production operator and the offline simulator must drive the very
same ``decide`` function. They can only do that if both speak in the same plain, immutable
values: what a pending pod asks of HAMi, what a cell looks like, what the loop observed and what
the policy remembers between calls. The configuration lives in ``autoscaler.policy.policy_config``
and the decision ``decide`` returns in ``autoscaler.policy.decision``. Nothing here does I/O,
reads a clock or logs; time is always passed in as ``now`` (seconds on the caller's clock).
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
