"""The expander: which one of several pools counts a pending pod they all could serve.

Why this module exists: pools that share a workload cluster may select the same pending pod
(overlapping demand selections, no node constraint telling them apart). Each pool decides
alone, so without a rule every one of them adds a cell for that pod and all but one cell is
waste. Cluster Autoscaler faces the same choice between node groups and answers it with an
expander (priority, least-waste, random, price; chained, e.g. ``priority,least-waste``). Ours
is fixed and deterministic, so every pool's task computes the same answer on its own and no
coordination is needed:

1. options: the pools whose demand selection counts the pod (the caller's match) and whose
   fresh cell could host it (``fit.fits_fresh_cell``'s checks: ``constraints_fit``, then
   HAMi's placement on an empty cell, ``place_asks``, which also gives the waste);
2. the highest ``priority`` wins;
3. then the least waste: the pod placed on an empty cell of the pool's shape (HAMi's spread
   placement, ``fit.place_asks``); waste = unused fraction of the cell's GPU memory + unused
   fraction of its GPU cores (the sum of the two fractions, as Cluster Autoscaler's
   least-waste sums its CPU and memory fractions), over the whole cell (every GPU), exact;
4. then the pool key (``namespace/name``) that sorts first.

A pod no option fits stays with every pool that matched it (each reports it unschedulable,
as before). The choice uses static facts only (spec priority, shape, Node template): the same
pod keeps going to the same pool while it waits, so a pool that started a cell for it keeps
counting it and packs it onto that booting cell; no other pool adds one meanwhile. Free Ready
capacity needs no rule: a pod HAMi could place on a Ready cell would not be pending. Pods
with the same asks, constraints and matching pools share one verdict (a burst of pods from one
template is judged once).
"""

from __future__ import annotations

import enum
import functools
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from autoscaler.policy.fit import constraints_fit, place_asks
from autoscaler.policy.types import CellShape, GPUAsk, GPUUsage, NodeTemplate, PendingPod


@dataclass(frozen=True, slots=True)
class PoolOption:
    """One autoscaled pool as the expander sees it."""

    key: str  # namespace/name
    priority: int
    shape: CellShape
    template: NodeTemplate


class Choice(enum.StrEnum):
    """Why the taking pool beat another one for a pod."""

    PRIORITY = "priority"
    LEAST_WASTE = "least waste"
    NAME = "name"
    FIT = "fit"  # the other pool's fresh cell could not host the pod at all
    INELIGIBLE = "not eligible"  # the other pool takes no pods (not in ``options``)


@dataclass(frozen=True, slots=True)
class GivenAway:
    """A pod this pool matched that another pool counts."""

    pod: str
    taker: str
    reason: Choice
    message: str


@dataclass(frozen=True, slots=True)
class Taken:
    """A pod this pool counts that other pools matched too; ``reason`` is why it beat the
    strongest of them (``FIT`` when none of them could host it)."""

    pod: str
    others: tuple[str, ...]
    reason: Choice
    message: str


@dataclass(frozen=True, slots=True)
class PoolShare:
    """What one pool counts after the expander, and what it gave away or took."""

    kept: tuple[PendingPod, ...] = ()
    given_away: tuple[GivenAway, ...] = ()
    taken: tuple[Taken, ...] = ()


@functools.lru_cache(maxsize=4096)  # pure; a burst asks the same few (asks, shape) pairs
def _waste_of(asks: tuple[GPUAsk, ...], shape: CellShape) -> Fraction | None:
    if shape.gpus <= 0:
        return None
    usage, reason = place_asks(asks, tuple(GPUUsage() for _ in range(shape.gpus)), shape)
    if reason is not None:
        return None
    memory = Fraction(sum(g.memory_mib for g in usage), shape.gpus * shape.memory_mib)
    cores = Fraction(sum(g.cores_percent for g in usage), shape.gpus * shape.cores_percent)
    return (1 - memory) + (1 - cores)


def waste(pod: PendingPod, shape: CellShape) -> Fraction | None:
    """Unused memory fraction + unused cores fraction of a fresh cell holding only ``pod``
    (0 = the pod fills the cell, 2 = it uses nothing); None when it does not fit one."""
    return _waste_of(pod.asks(), shape)


@dataclass(frozen=True, slots=True)
class _Scored:
    option: PoolOption
    waste: Fraction

    def rank(self) -> tuple[int, Fraction, str]:
        return -self.option.priority, self.waste, self.option.key


def _score(pod: PendingPod, option: PoolOption) -> _Scored | None:
    """The option's rank for the pod: constraints first, then HAMi's placement on an empty
    cell (``fit.fits_fresh_cell``'s two checks; the placement also gives the waste)."""
    if not constraints_fit(pod.constraints, option.template).ok:
        return None
    value = _waste_of(pod.asks(), option.shape)
    return None if value is None else _Scored(option, value)


def _percent(value: Fraction) -> str:
    return f"{float(value) * 50:.1f}%"  # the sum of two fractions, as a mean percentage


def _why(
    winner: _Scored, loser: _Scored | None, loser_key: str, eligible: bool = True
) -> tuple[Choice, str]:
    """Why ``winner`` beat ``loser`` (None: the loser's fresh cell cannot host the pod)."""
    won = winner.option
    if not eligible:
        return Choice.INELIGIBLE, f"{loser_key} takes no pods (not autoscaled or being deleted)"
    if loser is None:
        return Choice.FIT, f"a fresh cell of {loser_key} cannot host it; one of {won.key} can"
    if won.priority != loser.option.priority:
        return Choice.PRIORITY, f"priority {won.priority} > {loser.option.priority}"
    if winner.waste != loser.waste:
        return Choice.LEAST_WASTE, (
            f"same priority; a fresh cell of {won.key} would be left {_percent(winner.waste)} "
            f"unused, one of {loser.option.key} {_percent(loser.waste)}"
        )
    return Choice.NAME, f"same priority and waste; {won.key} sorts before {loser.option.key}"


def _matches(wanted: Mapping[str, Sequence[PendingPod]]) -> dict[str, dict[str, PendingPod]]:
    """Pod key -> {pool key: that pool's PendingPod}."""
    out: dict[str, dict[str, PendingPod]] = defaultdict(dict)
    for pool, pods in wanted.items():
        for pod in pods:
            out[pod.key][pool] = pod
    return out


def _signature(pod: PendingPod, pools: Sequence[str]) -> Hashable:
    """What the verdict on a pod depends on: its asks, its constraints and who matched it.
    A burst of pods from one template shares one signature, so one verdict."""
    c = pod.constraints
    return (
        pod.asks(),
        tuple(sorted(c.node_selector.items())),
        c.required_terms,
        c.tolerations,
        (tuple(pools)),
    )


@dataclass(frozen=True, slots=True)
class _Verdict:
    """The expander's answer for one pod (None as a verdict: no option fits it)."""

    taker: str
    given: tuple[tuple[str, Choice, str], ...]  # (loser pool, reason, message)
    taken: tuple[tuple[str, ...], Choice, str] | None  # (losers, reason, message)


def _judge(
    pod: PendingPod, pools: Sequence[str], options: Mapping[str, PoolOption]
) -> _Verdict | None:
    scored = {pool: _score(pod, options[pool]) for pool in pools if pool in options}
    fitting = [s for s in scored.values() if s is not None]
    if not fitting:
        return None
    winner = min(fitting, key=_Scored.rank)
    taker = winner.option.key
    losers = tuple(pool for pool in pools if pool != taker)
    given = tuple((pool, *_why(winner, scored.get(pool), pool, pool in options)) for pool in losers)
    if not losers:
        return _Verdict(taker, given, None)
    rivals = [s for p, s in scored.items() if p != taker and s is not None]
    if not rivals:
        return _Verdict(
            taker, given, (losers, Choice.FIT, f"no fresh cell of {', '.join(losers)} can host it")
        )
    runner_up = min(rivals, key=_Scored.rank)
    return _Verdict(taker, given, (losers, *_why(winner, runner_up, runner_up.option.key)))


def assign(
    wanted: Mapping[str, Sequence[PendingPod]], options: Mapping[str, PoolOption]
) -> dict[str, PoolShare]:
    """Each pool's share of the pending pods its demand selection counts (``wanted``).

    A pool in ``wanted`` without an entry in ``options`` (not autoscaled, or being deleted)
    is never a taker: it keeps only pods no option fits. The result has one entry per pool of
    ``wanted``; ``kept`` keeps that pool's order of its pods.
    """
    kept: dict[str, set[str]] = {pool: set() for pool in wanted}
    given: dict[str, list[GivenAway]] = defaultdict(list)
    taken: dict[str, list[Taken]] = defaultdict(list)
    verdicts: dict[Hashable, _Verdict | None] = {}
    for pod_key, by_pool in sorted(_matches(wanted).items()):
        pools = sorted(by_pool)
        pod = by_pool[pools[0]]
        signature = _signature(pod, pools)
        if signature not in verdicts:
            verdicts[signature] = _judge(pod, pools, options)
        verdict = verdicts[signature]
        if verdict is None:
            for pool in pools:
                kept[pool].add(pod_key)
            continue
        kept[verdict.taker].add(pod_key)
        for pool, reason, message in verdict.given:
            given[pool].append(GivenAway(pod_key, verdict.taker, reason, message))
        if verdict.taken is not None:
            taken[verdict.taker].append(Taken(pod_key, *verdict.taken))
    return {
        pool: PoolShare(
            tuple(p for p in pods if p.key in kept[pool]),
            tuple(given.get(pool, ())),
            tuple(taken.get(pool, ())),
        )
        for pool, pods in wanted.items()
    }
