"""Which of its pending pods one pool counts when other pools of its cluster match them too.

Why this module exists: ``autoscaler.policy.expander`` is the rule (priority, least waste,
name); this is its translation from what the loop holds: the pools it knows (their specs) and
the workload cluster's unbound pod manifests. Each pool's task calls it with its own pending
pods and the other pools of the same workload cluster and gets the same answer the other
pools' tasks get for those pods, so no pool waits for another. Only this pool's pending pods
are judged (a pod this pool does not count cannot change what it counts), so the work is
(this pool's pending pods) x (rival pools), not every pod times every pool. Pure.

Who is an option: an autoscaled pool that is not being deleted and runs in Active mode. A pool
in Shadow mode is an option in its own view only: it shows what it would do were it switched
on, and never takes a pod from a pool that acts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.policy.config import policy_config_from_spec, pool_shape
from autoscaler.policy.demand import pod_key
from autoscaler.policy.expander import PoolOption, PoolShare, assign
from autoscaler.policy.pool_demand import counts_as_demand, hami_mode, label_pairs
from autoscaler.policy.types import PendingPod
from gpucellpool.api.autoscaling import AutoscalingMode, DemandSelection
from gpucellpool.api.pool import GPUCellPool

JSON = dict[str, Any]
Pair = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Rival:
    """Another pool of the same workload cluster: how it selects demand, and its option."""

    option: PoolOption
    selection: DemandSelection
    mode: str = "DevicePlugin"
    """Its HAMi mode (``pool_demand.hami_mode``): a DRA pool wants only pods waiting on claims."""
    match_pairs: frozenset[tuple[str, str]] = frozenset()
    """Its podSelector's ``matchLabels`` as pairs: a pod lacking one of them is not its demand
    (a quick test before ``counts_as_demand``; empty: no such shortcut)."""


def pool_key(pool: GPUCellPool) -> str:
    return f"{pool.metadata.namespace}/{pool.metadata.name}"


def eligible(pool: GPUCellPool, own_view: bool = False) -> bool:
    """Whether ``pool`` may take pods: autoscaled, not being deleted, and Active (or, in its
    own view, Shadow)."""
    auto = pool.spec.autoscaling
    if not auto.enabled or pool.metadata.deletion_timestamp is not None:
        return False
    return own_view or auto.mode == AutoscalingMode.ACTIVE


def option_of(pool: GPUCellPool) -> PoolOption:
    """The pool as the expander sees it: its priority, its cell shape (learned, declared or
    default, ``pool_shape``) and Node template as its own decision sees them."""
    config = policy_config_from_spec(pool.spec, pool_shape(pool))
    return PoolOption(
        pool_key(pool), pool.spec.autoscaling.priority, config.shape, config.node_template
    )


# A memo, not state: per pool key, the pool object last seen and its Rival (None: not
# eligible). A pool object is immutable once validated, and a changed pool arrives as a new
# object, so "is" tells whether the memo is current. Building an option costs ~0.15 ms (the
# spec mapping and the shape choice); without the memo 50 pools deciding per burst paid it
# 50 x 50 times. One entry per pool name ever seen, holding that pool's last object (a
# deleted pool's stays until the process restarts: bounded by the names, not by time).
_RIVALS: dict[str, tuple[GPUCellPool, Rival | None]] = {}


def _rival(pool: GPUCellPool) -> Rival | None:
    key = pool_key(pool)
    memo = _RIVALS.get(key)
    if memo is None or memo[0] is not pool:
        demand, mode = pool.spec.autoscaling.demand, hami_mode(pool)
        pairs = (
            frozenset((demand.pod_selector.match_labels or {}).items())
            if demand.pod_selector
            else frozenset()
        )
        rival = Rival(option_of(pool), demand, mode, pairs) if eligible(pool) else None
        memo = _RIVALS[key] = (pool, rival)
    return memo[1]


def rivals_of(pool: GPUCellPool, same_cluster: Iterable[GPUCellPool]) -> tuple[Rival, ...]:
    """The eligible pools of ``same_cluster`` other than ``pool``."""
    own = pool_key(pool)
    rivals = (_rival(other) for other in same_cluster if pool_key(other) != own)
    return tuple(r for r in rivals if r is not None)


@dataclass(frozen=True, slots=True)
class RivalIndex:
    """The eligible pools of one workload cluster, each with ``matchLabels`` filed under one
    of its pairs: a pool's decision looks only at the pools that could want one of its pods
    (those filed under a label its pods carry, and those without ``matchLabels``), not at
    every pool of the cluster (200 pools deciding a burst each walked all 200)."""

    unkeyed: tuple[Rival, ...] = ()
    by_pair: Mapping[Pair, tuple[Rival, ...]] = field(default_factory=dict)

    def near(self, carried: frozenset[Pair], own: str) -> list[Rival]:
        """The pools other than ``own`` that may select a pod carrying only ``carried``
        labels (a superset of those whose ``match_pairs`` are all carried)."""
        keyed = (r for pair in carried for r in self.by_pair.get(pair, ()))
        return [r for r in (*self.unkeyed, *keyed) if r.option.key != own]


def index_rivals(rivals: Iterable[Rival]) -> RivalIndex:
    unkeyed: list[Rival] = []
    by_pair: dict[Pair, list[Rival]] = defaultdict(list)
    for rival in rivals:
        if rival.match_pairs:
            by_pair[min(rival.match_pairs)].append(rival)
        else:
            unkeyed.append(rival)
    return RivalIndex(tuple(unkeyed), {k: tuple(v) for k, v in by_pair.items()})


class RivalBoard:
    """Every known pool's ``Rival`` by its workload cluster key, and per cluster identity the
    ``RivalIndex`` of its eligible pools, rebuilt only after a pool came, went or changed its
    Rival (a status write that leaves priority, selection and shape alone changes nothing).

    A lookup's ``identity`` maps a cluster key to the cluster it reaches
    (``WorkloadView.identity``); it is asked of every cluster key at each lookup, since it may
    change (a kube-system UID learned) without this board being told.
    """

    def __init__(self) -> None:
        self._pools: dict[Hashable, tuple[Hashable, Rival | None]] = {}
        self._clusters: dict[Hashable, dict[Hashable, Rival]] = {}
        self._memo: dict[object, tuple[tuple[Hashable, ...], RivalIndex]] = {}

    def put(self, key: Hashable, cluster: Hashable, pool: GPUCellPool) -> None:
        """``pool`` (known as ``key``) is now this object, of this cluster key."""
        entry = (cluster, _rival(pool))
        if self._pools.get(key) == entry:
            return
        self.remove(key)
        self._pools[key] = entry
        if entry[1] is not None:
            self._clusters.setdefault(cluster, {})[key] = entry[1]
        self._memo.clear()

    def remove(self, key: Hashable) -> None:
        old = self._pools.pop(key, None)
        if old is None:
            return
        members = self._clusters.get(old[0])
        if members is not None and members.pop(key, None) is not None and not members:
            del self._clusters[old[0]]
        self._memo.clear()

    def rivals(self, cluster: Hashable, identity: Callable[[Hashable], object]) -> RivalIndex:
        """The eligible pools of every cluster key reaching the same cluster as ``cluster``."""
        reached = identity(cluster)
        keys = tuple(k for k in self._clusters if identity(k) == reached)
        memo = self._memo.get(reached)
        if memo is None or memo[0] != keys:
            index = index_rivals(r for k in keys for r in self._clusters[k].values())
            memo = self._memo[reached] = (keys, index)
        return memo[1]


def sharing_facts(pool: GPUCellPool) -> tuple[Any, ...]:
    """What of a pool, when changed, can move pending pods between the pools of its cluster
    (any spec change: priority, demand selection, shape, mode; deletion; a learned shape)."""
    gone = pool.metadata.deletion_timestamp is not None
    return pool.metadata.generation, gone, pool_shape(pool).shape


def share_pending(
    pool: GPUCellPool,
    pending: tuple[PendingPod, ...],
    unbound: Iterable[JSON],
    namespace_labels: Mapping[str, Mapping[str, str]],
    rivals: Sequence[Rival] | RivalIndex,
) -> PoolShare:
    """This pool's share of its ``pending`` pods (``kept`` keeps their order). ``rivals``: the
    other pools of its cluster, or an index of the cluster's pools (this one may be in it)."""
    if not pending or not rivals:
        return PoolShare(kept=pending)
    own = pool_key(pool)
    keys = {p.key for p in pending}
    manifests = {k: pod for pod in unbound if (k := pod_key(pod)) in keys}
    pairs = {k: label_pairs(pod) for k, pod in manifests.items()}
    carried = frozenset().union(*pairs.values())  # every label pair of this pool's pods
    if isinstance(rivals, RivalIndex):
        rivals = rivals.near(carried, own)
        if not rivals:  # no other pool can want any of them: nothing to share
            return PoolShare(kept=pending)
    wanted: dict[str, Sequence[PendingPod]] = {own: pending}
    options = {r.option.key: r.option for r in rivals}
    if eligible(pool, own_view=True):
        options[own] = option_of(pool)
    counted: dict[str, list[PendingPod]] = {}  # per distinct demand selection: its pods
    for rival in rivals:
        if not rival.match_pairs <= carried:  # with many pools on a cluster: most rivals
            continue  # select none of this pool's pods: nothing to share with them
        near = [p for p in pending if p.key in pairs and rival.match_pairs <= pairs[p.key]]
        selection = rival.mode + rival.selection.model_dump_json()
        if selection not in counted:
            counted[selection] = [
                p
                for p in near
                if counts_as_demand(
                    manifests[p.key],
                    rival.selection,
                    namespace_labels.get(p.key.split("/", 1)[0]),
                    rival.mode,
                )
            ]
        if counted[selection]:  # a rival wanting none of them shares nothing
            wanted[rival.option.key] = counted[selection]
    return assign(wanted, options)[own]
