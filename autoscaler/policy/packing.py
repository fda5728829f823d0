"""Pack pending HAMi asks into cells: free Ready capacity, then Booting cells, then new cells.

Why this module exists: the number of cells to add is the number the *packed* backlog needs,
not "one per decision" (the original's rule) nor "one per pod" (what a GPU-count autoscaler
sees with fractional pods). Packing speaks HAMi's per-GPU rules (``fit.gpu_fit``): memory,
cores, one slot per container per GPU, the exclusive rule, and N distinct GPUs on one cell per
container. A Booting cell is upcoming capacity and packs as an empty cell.

Heuristics (``heuristic`` parameter; ``DEFAULT_HEURISTIC`` is the benchmark winner, see
docs/benchmarks.md):

* ``best-fit``: pods in decreasing dominant-resource size; each goes to the cell, in the
  earliest tier that can take it (Ready, Booting, opened-new), that is fullest after placing it.
* ``first-fit``: same order; each goes to the first cell (tier order, then index) that fits.
* ``arrival``: first-fit in arrival order (``first_seen``); closest to HAMi placing pods one
  by one, useful as a reference.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from autoscaler.policy.fit import place_asks, resources_fit
from autoscaler.policy.types import CellShape, CellState, CellView, GPUAsk, GPUUsage, PendingPod

BEST_FIT = "best-fit"
FIRST_FIT = "first-fit"
ARRIVAL = "arrival"
HEURISTICS = (BEST_FIT, FIRST_FIT, ARRIVAL)
DEFAULT_HEURISTIC = FIRST_FIT
NEW_CELL_PREFIX = "new-"
TIER_READY, TIER_BOOTING, TIER_NEW = 0, 1, 2
TIERS = {CellState.READY: TIER_READY, CellState.BOOTING: TIER_BOOTING}
K = TypeVar("K")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PackingResult:
    """Where each pending pod would go, and what the cells would then hold.

    ``placements`` maps pod key to cell name (new cells are named ``new-0``, ``new-1``, ...).
    ``unplaced`` are pods no fresh cell can take, or that hit ``max_new_cells``.
    ``usage``/``utilisation`` are projected, for every Ready, Booting and new cell.
    """

    placements: tuple[tuple[str, str], ...]
    new_cells: int
    unplaced: tuple[str, ...]
    usage: Mapping[str, tuple[GPUUsage, ...]] = field(default_factory=dict)
    utilisation: Mapping[str, float] = field(default_factory=dict)
    # ``cells_used()`` as ``pack`` counted it (None: count it from ``usage`` on each call)
    used_cells: int | None = None
    # Ready or Booting cells (by name) that pods were placed on; their usage changed
    changed: tuple[str, ...] = ()

    def cells_used(self) -> int:
        """Cells (existing or new) that hold anything after packing."""
        if self.used_cells is not None:
            return self.used_cells
        return sum(1 for u in self.usage.values() if _holds_anything(u))


def _holds_anything(gpus: Sequence[GPUUsage]) -> bool:
    return any(g.slots for g in gpus)


@functools.lru_cache(maxsize=1 << 16)
def _facts(gpus: tuple[GPUUsage, ...], shape: CellShape) -> tuple[float, int, bool]:
    """(utilisation, most free MiB on a GPU with a free slot or -1, holds anything) of one
    usage. A pool's cells repeat the same few usages on every call, so this is memoised."""
    open_gpus = [g for g in gpus if g.slots < shape.slots]
    max_free_mib = max((shape.memory_mib - g.memory_mib for g in open_gpus), default=-1)
    return cell_utilisation(gpus, shape), max_free_mib, _holds_anything(gpus)


class _ByIdentity(Generic[K, T]):
    """Values computed from (an immutable object, a shape), looked up by the object's identity.

    A cell's view and usage are the very same objects from call to call while the cell is
    unchanged (the live loop's cache, the simulator's world), and hashing eight GPUs' usage
    costs more than what is computed from it. Entries hold their object, so an id is never
    reused while remembered; the memo is emptied when full.
    """

    def __init__(self, compute: Callable[[K, CellShape], T], limit: int = 1 << 16) -> None:
        self.compute = compute
        self.limit = limit
        self.entries: dict[int, tuple[K, CellShape, T]] = {}

    def __call__(self, key: K, shape: CellShape) -> T:
        hit = self.entries.get(id(key))
        if hit is not None and hit[0] is key and hit[1] is shape:
            return hit[2]
        value = self.compute(key, shape)
        if len(self.entries) >= self.limit:
            self.entries.clear()
        self.entries[id(key)] = (key, shape, value)
        return value


_facts_of = _ByIdentity(_facts)


@dataclass(slots=True)
class _Bin:
    name: str
    tier: int
    order: int
    gpus: tuple[GPUUsage, ...]
    max_free_mib: int = 0  # most free memory on any one GPU (a cheap pre-check)

    def update(self, gpus: tuple[GPUUsage, ...], shape: CellShape) -> None:
        self.gpus = gpus
        self.max_free_mib = _facts_of(gpus, shape)[1]


def cell_utilisation(gpus: Sequence[GPUUsage], shape: CellShape) -> float:
    """Max over memory, cores and slots of the allocated fraction across the cell's GPUs."""
    n = max(shape.gpus, 1)
    memory = sum(g.memory_mib for g in gpus) / max(n * shape.memory_mib, 1)
    cores = sum(g.cores_percent for g in gpus) / max(n * shape.cores_percent, 1)
    slots = sum(g.slots for g in gpus) / max(n * shape.slots, 1)
    return max(memory, cores, slots)


def ask_size(asks: Iterable[GPUAsk], shape: CellShape) -> float:
    """Dominant-resource size of a pod, in GPUs of ``shape``."""
    total = 0.0
    for ask in asks:
        memory = ask.memory_on(shape.memory_mib) / max(shape.memory_mib, 1)
        cores = min(ask.cores_percent, 100) / max(shape.cores_percent, 1)
        total += ask.gpu_count * max(memory, cores, 1 / max(shape.slots, 1))
    return total


def padded_usage(cell: CellView, shape: CellShape) -> tuple[GPUUsage, ...]:
    """A cell's per-GPU usage, padded with empty GPUs up to ``shape.gpus`` (Booting: empty)."""
    known = cell.gpus[: shape.gpus] if cell.state == CellState.READY else ()
    if len(known) == shape.gpus:
        # the view's own tuple when it has exactly the shape's GPUs: the same object on every
        # call, so the usage memos (``_facts_of``) find it by identity
        return cell.gpus if len(cell.gpus) == shape.gpus else tuple(known)
    return tuple(known) + _empty_gpus(shape.gpus - len(known))


@functools.lru_cache(maxsize=64)
def _empty_gpus(count: int) -> tuple[GPUUsage, ...]:
    return tuple(GPUUsage() for _ in range(count))


Row = tuple[tuple[int, int, str], tuple[GPUUsage, ...], int]


def _row(cell: CellView, shape: CellShape) -> Row | None:
    """A live cell's (bin order key, padded usage, most free MiB); None if not live."""
    tier = TIERS.get(cell.state)
    if tier is None:
        return None
    gpus = padded_usage(cell, shape)
    return (tier, cell.index, cell.name), gpus, _facts_of(gpus, shape)[1]


_row_of = _ByIdentity(_row)


@dataclass(frozen=True, slots=True)
class Bins:
    """A pool's live cells as packing sees them before any pod is placed.

    ``rows`` are in bin order (Ready, then Booting; by index, then name), each (order key,
    padded usage, most free MiB on a GPU with a free slot or -1); ``usage``/``utilisation``
    map cell names to them in that order; ``used`` counts the cells holding anything;
    ``open`` lists the positions of rows with a free slot (no pod fits the others).
    ``unique`` is False when two rows share a name (``usage`` then keeps the last).
    ``cell_index`` keeps one of these up to date between ``decide`` calls.
    """

    rows: Sequence[Row]
    usage: Mapping[str, tuple[GPUUsage, ...]]
    utilisation: Mapping[str, float]
    used: int
    open: Sequence[int]
    unique: bool


def row(cell: CellView, shape: CellShape) -> Row | None:
    """``cell``'s bin row, or None if it is not live (memoised by the view's identity)."""
    return _row_of(cell, shape)


def bins_from_rows(rows: Sequence[Row], shape: CellShape) -> Bins:
    """``Bins`` of rows already in bin order."""
    usage = {key[2]: gpus for key, gpus, _ in rows}
    facts = {name: _facts_of(g, shape) for name, g in usage.items()}
    util = {name: f[0] for name, f in facts.items()}
    used = sum(1 for f in facts.values() if f[2])
    free = [i for i, r in enumerate(rows) if r[2] >= 0]
    return Bins(rows, usage, util, used, free, len(usage) == len(rows))


def live_bins(cells: Sequence[CellView], shape: CellShape) -> Bins:
    """``Bins`` of ``cells``' Ready and Booting cells, from scratch."""
    rows = [r for r in (_row_of(c, shape) for c in cells) if r is not None]
    rows.sort(key=lambda r: r[0])
    return bins_from_rows(rows, shape)


def _order(pods: Sequence[PendingPod], heuristic: str, shape: CellShape) -> list[PendingPod]:
    if heuristic == ARRIVAL:
        return sorted(pods, key=lambda p: (p.first_seen, p.key))
    return sorted(pods, key=lambda p: (-ask_size(p.asks(), shape), p.first_seen, p.key))


# Pure and asked the same (asks, usage) again and again across calls: memoised.
_place = functools.lru_cache(maxsize=1 << 16)(place_asks)


def _need_mib(asks: Sequence[GPUAsk], shape: CellShape) -> int:
    """The least memory one GPU must have free for any of the pod's containers."""
    return min(a.memory_on(shape.memory_mib) for a in asks)


def _choose(
    bins: Sequence[_Bin],
    asks: Sequence[GPUAsk],
    shape: CellShape,
    heuristic: str,
    excluded: Collection[str],
    need_mib: int,
) -> tuple[_Bin, tuple[GPUUsage, ...]] | None:
    """The bin the heuristic picks for one pod (``need_mib``: its ``_need_mib``), and its
    usage afterwards; None if none fits."""
    best: tuple[_Bin, tuple[GPUUsage, ...]] | None = None
    best_key: tuple[int, float, int] | None = None
    for b in bins:
        if best is not None and b.tier > best[0].tier:
            break  # an earlier tier already fits: never spill into a later one
        if b.max_free_mib < need_mib or b.name in excluded:
            continue  # no GPU with a free slot has the memory, or the pod may not go there
        after, reason = _place(asks, b.gpus, shape)
        if reason is not None:
            continue
        if heuristic != BEST_FIT:
            return b, after
        key = (b.tier, -cell_utilisation(after, shape), b.order)
        if best_key is None or key < best_key:
            best, best_key = (b, after), key
    return best


def _candidates(bins: Bins, need: int) -> list[_Bin]:
    """The live bins a pod needing at least ``need`` MiB could go to. A bin's most free MiB
    only shrinks as pods land, so a bin with less than the smallest need is skipped by every
    ``_choose`` (and may leave the scan once it closes)."""
    rows = bins.rows
    return [
        _Bin(rows[i][0][2], rows[i][0][0], i, rows[i][1], rows[i][2])
        for i in bins.open
        if rows[i][2] >= need
    ]


def _result_maps(
    bins: Bins, touched: Mapping[int, _Bin], fresh: Sequence[_Bin], shape: CellShape
) -> tuple[dict[str, tuple[GPUUsage, ...]], dict[str, float], int]:
    """(usage, utilisation, cells used) after packing: ``bins``' maps with the bins pods
    went to, and the new cells, in bin order."""
    if bins.unique and not any(b.name in bins.usage for b in fresh):
        usage, util, used = dict(bins.usage), dict(bins.utilisation), bins.used
        for b in (*touched.values(), *fresh):
            before = _facts_of(bins.rows[b.order][1], shape)[2] if b.tier != TIER_NEW else False
            after = _facts_of(b.gpus, shape)
            usage[b.name], util[b.name] = b.gpus, after[0]
            used += after[2] - before
        return usage, util, used
    usage = {}
    for i, (key, gpus, _) in enumerate(bins.rows):
        usage[key[2]] = touched[i].gpus if i in touched else gpus
    usage.update((b.name, b.gpus) for b in fresh)
    facts = {name: _facts_of(g, shape) for name, g in usage.items()}
    util = {name: f[0] for name, f in facts.items()}
    return usage, util, sum(1 for f in facts.values() if f[2])


def pack(
    pods: Sequence[PendingPod],
    cells: Sequence[CellView],
    shape: CellShape,
    heuristic: str = DEFAULT_HEURISTIC,
    max_new_cells: int | None = None,
    excluded: Mapping[str, Collection[str]] | None = None,
) -> PackingResult:
    """Place ``pods`` into Ready cells, then Booting cells, then as few new cells as it can.

    ``excluded`` maps a pod key to cell names it must not be placed on.
    """
    return pack_bins(pods, live_bins(cells, shape), shape, heuristic, max_new_cells, excluded)


def pack_bins(
    pods: Sequence[PendingPod],
    bins: Bins,
    shape: CellShape,
    heuristic: str = DEFAULT_HEURISTIC,
    max_new_cells: int | None = None,
    excluded: Mapping[str, Collection[str]] | None = None,
) -> PackingResult:
    """``pack`` over live cells already turned into ``Bins`` (only the bins pods go to are
    copied; the rest of the result is ``bins``' own maps)."""
    excluded = excluded or {}
    if heuristic not in HEURISTICS:
        heuristic = DEFAULT_HEURISTIC
    ordered = _order(pods, heuristic, shape)
    needs = [_need_mib(p.asks(), shape) for p in ordered]
    need = min(needs, default=0)
    scan = _candidates(bins, need) if ordered else []
    closed = 0  # bins in ``scan`` that no pod can take any more
    touched: dict[int, _Bin] = {}
    fresh: list[_Bin] = []
    placements: list[tuple[str, str]] = []
    unplaced: list[str] = []
    for pod, pod_need in zip(ordered, needs, strict=True):
        asks = pod.asks()
        chosen = _choose(scan, asks, shape, heuristic, excluded.get(pod.key, ()), pod_need)
        if chosen is None:
            can_open = max_new_cells is None or len(fresh) < max_new_cells
            if not can_open or not resources_fit(asks, shape).ok:
                unplaced.append(pod.key)
                continue
            empty = _empty_gpus(shape.gpus)
            name = f"{NEW_CELL_PREFIX}{len(fresh)}"
            new_bin = _Bin(name, TIER_NEW, len(bins.rows) + len(fresh), empty)
            new_bin.update(empty, shape)
            scan.append(new_bin)
            fresh.append(new_bin)
            chosen = (new_bin, _place(asks, empty, shape)[0])
        target, after = chosen
        target.update(after, shape)
        closed += target.max_free_mib < need
        if closed > 8 and 4 * closed > len(scan):
            scan, closed = [b for b in scan if b.max_free_mib >= need], 0
        if target.tier != TIER_NEW:
            touched.setdefault(target.order, target)
        placements.append((pod.key, target.name))
    usage, util, used = _result_maps(bins, touched, fresh, shape)
    changed = tuple(b.name for b in touched.values())
    return PackingResult(tuple(placements), len(fresh), tuple(unplaced), usage, util, used, changed)


def lower_bound_cells(pods: Sequence[PendingPod], shape: CellShape) -> int:
    """A lower bound on the empty cells ``pods`` need: per resource, total demand / capacity.

    Each container needs its ``gpu_count`` distinct GPUs, and an exclusive ask (cores == 100)
    takes a whole GPU; both are covered by the cores and slots sums only in part, so the bound
    also counts GPUs taken by exclusive asks.
    """
    if not pods:
        return 0
    memory = cores = slots = exclusive = 0.0
    for pod in pods:
        for ask in pod.asks():
            memory += ask.gpu_count * ask.memory_on(shape.memory_mib)
            cores += ask.gpu_count * min(ask.cores_percent, 100)
            slots += ask.gpu_count
            if min(ask.cores_percent, 100) == 100 and shape.cores_percent == 100:
                exclusive += ask.gpu_count
    per_cell = (
        memory / max(shape.gpus * shape.memory_mib, 1),
        cores / max(shape.gpus * shape.cores_percent, 1),
        slots / max(shape.gpus * shape.slots, 1),
        exclusive / max(shape.gpus, 1),
    )
    return max(1, math.ceil(max(per_cell) - 1e-9))


def usage_facts(gpus: tuple[GPUUsage, ...], shape: CellShape) -> tuple[float, int, bool]:
    """(utilisation, most free MiB on a GPU with a free slot or -1, holds anything) of one
    cell's padded usage, as packing counts them (memoised by the usage's identity)."""
    return _facts_of(gpus, shape)
