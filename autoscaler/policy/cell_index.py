"""What ``decide`` reads from every cell, derived once per cell view and kept between calls.

Why this module exists: a decision reads each cell of the pool several times (state counts,
packing's bins in tier order, projected emptiness, scale-down candidates). In a 400-cell pool
that was most of a decision's cost, yet between two calls only the few cells a pod landed on
or left have a new view: the live loop's cache and the simulator's world hand back the very
same ``CellView`` object for an unchanged cell. ``CellIndex`` holds each view's facts by the
view's identity and is derived from the previous index by the views that changed. Every fact
comes from the rule it stands for (``packing``'s rows, ``scale_down.is_empty``,
``scale_down.candidates``), and the answers are exactly those of a pass over every cell
(tests/unit/test_cell_index.py compares them on random pools and changes).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from autoscaler.policy.packing import (
    NEW_CELL_PREFIX,
    Bins,
    PackingResult,
    Row,
    bins_from_rows,
    live_bins,
    padded_usage,
    row,
)
from autoscaler.policy.packing import usage_facts as _usage_facts
from autoscaler.policy.scale_down import candidates, is_empty
from autoscaler.policy.types import CellShape, CellState, CellView

RECENT = 8  # indices remembered (one per pool being decided, in practice)
BUSY, EMPTY, CANDIDATES = "draining_busy", "live_empty", "candidate"  # summed facts
LIVE = (CellState.READY, CellState.BOOTING)
_STATE = operator.attrgetter("state")


def state_count(cells: Sequence[CellView], state: CellState) -> int:
    """Cells in ``state`` (one pass in C: decide asks this of every cell on every call)."""
    return operator.countOf(map(_STATE, cells), state)


@dataclass(frozen=True, slots=True)
class _Facts:
    """One cell view's facts. ``view`` is kept so that no other object takes its id."""

    view: CellView
    row: Row | None  # packing's bin row; None: not Ready or Booting
    empty: bool  # is_empty on its usage as packing projects it (none for a non-live cell)
    live_empty: bool  # live and empty
    candidate: bool  # a scale-down candidate before any pod is packed
    draining_busy: bool  # Draining and still holding something


def _cell_facts(view: CellView, shape: CellShape, threshold: float) -> _Facts:
    bin_row = row(view, shape)
    usage = bin_row[1] if bin_row is not None else ()
    util = {view.name: _usage_facts(bin_row[1], shape)[0]} if bin_row is not None else {}
    empty = is_empty(view, usage)
    busy = view.state == CellState.DRAINING and not is_empty(view, view.gpus)
    live = bin_row is not None
    candidate = bool(candidates((view,), util, threshold))
    return _Facts(view, bin_row, empty, live and empty, candidate, busy)


class FactKey(NamedTuple):
    """A cell view's facts as ``decide`` reads them when it packs nothing (``same_facts``)."""

    live: bool
    empty: bool
    live_empty: bool
    candidate: bool
    draining_busy: bool
    holds: bool  # packing's "holds anything" (the cells-used count)


def _fact_key(view: CellView, shape: CellShape, threshold: float) -> FactKey:
    """``_cell_facts`` as a ``FactKey``, without the row and dicts (tests/unit/test_same_facts
    compares the two on random views)."""
    state = view.state
    live = state in LIVE
    gpus = padded_usage(view, shape) if live else ()
    util, _, holds = _usage_facts(gpus, shape) if live else (0.0, -1, False)
    empty = is_empty(view, gpus)
    candidate = state == CellState.READY and (util < threshold or util == 0.0)
    busy = state == CellState.DRAINING and not is_empty(view, view.gpus)
    return FactKey(live, empty, live and empty, candidate, busy, holds)


_fact_keys: dict[int, tuple[CellView, CellShape, float, FactKey]] = {}  # by the view's id
FACT_KEYS = 4096  # bound on ``_fact_keys`` (emptied when full)


def fact_key(view: CellView, shape: CellShape, threshold: float) -> FactKey:
    """``view``'s facts (those of the index, plus whether its usage holds anything),
    memoised by the view's identity: a view is compared as the new one, then as the old."""
    hit = _fact_keys.get(id(view))
    if hit is not None and hit[0] is view and hit[1] is shape and hit[2] == threshold:
        return hit[3]
    key = _fact_key(view, shape, threshold)
    if len(_fact_keys) >= FACT_KEYS:
        _fact_keys.clear()
    _fact_keys[id(view)] = (view, shape, threshold, key)
    return key


def _tally(totals: dict[str, int], facts: _Facts, sign: int) -> None:
    """Count ``facts`` into ``totals`` (``sign`` -1 takes them out)."""
    state = facts.view.state
    totals[state] = totals.get(state, 0) + sign
    totals[BUSY] += sign * facts.draining_busy
    totals[EMPTY] += sign * facts.live_empty
    totals[CANDIDATES] += sign * facts.candidate


@dataclass(frozen=True, slots=True)
class CellIndex:
    """One observation's cells, their facts by view identity, and packing's bins.

    ``exact`` is True when no view appears twice and names are unique: then a cell's name
    finds its facts, and the answers below add up per-cell facts; otherwise they are the
    plain passes over every cell.
    """

    cells: Sequence[CellView]
    shape: CellShape
    threshold: float
    facts: Mapping[int, _Facts]
    by_name: Mapping[str, _Facts]
    bins: Bins
    positions: Mapping[tuple[int, int, str], int]  # row key -> position in bins.rows
    exact: bool
    # when exact: cells per state, and the facts' sums (keys BUSY, EMPTY, CANDIDATES)
    totals: Mapping[str, int]

    def _each(self, views: Sequence[CellView], attr: str) -> Iterator[bool]:
        return map(operator.attrgetter(attr), map(self.facts.__getitem__, map(id, views)))

    def _plain(self, packing: PackingResult) -> bool:
        """Whether to answer by a pass over every cell: names are not unique, or a new cell
        of ``packing`` took the name of one of ours (its usage then replaced that cell's)."""
        if not self.exact:
            return True
        names = (f"{NEW_CELL_PREFIX}{k}" for k in range(packing.new_cells))
        return any(map(self.by_name.__contains__, names))

    def count(self, state: CellState) -> int:
        return self.totals.get(state, 0) if self.exact else state_count(self.cells, state)

    def draining_busy(self) -> int:
        """Draining cells that still hold pods or allocations."""
        if self.exact:
            return self.totals[BUSY]
        return sum(self._each(self.cells, "draining_busy"))

    def empty_after(self, packing: PackingResult) -> int:
        """Ready and Booting cells that hold nothing once ``packing``'s pods are placed."""
        if self._plain(packing):
            return sum(
                1
                for c in self.cells
                if c.state in LIVE and is_empty(c, packing.usage.get(c.name, ()))
            )
        base = self.totals[EMPTY]
        for name in packing.changed:
            f = self.by_name[name]
            base += is_empty(f.view, packing.usage[name]) - f.live_empty
        return base

    def below(self, packing: PackingResult) -> list[CellView]:
        """``scale_down.candidates`` of the cells on ``packing``'s projected utilisation.

        Packing only adds asks, so only a cell a pod went to can stop being a candidate."""
        if self._plain(packing):
            return candidates(self.cells, packing.utilisation, self.threshold)
        if not self.totals[CANDIDATES]:
            return []  # packing only adds asks: no cell becomes a candidate
        base = list(itertools.compress(self.cells, self._each(self.cells, "candidate")))
        changed = set(packing.changed)
        if not changed:
            return base
        util = packing.utilisation
        return [c for c in base if c.name not in changed or candidates((c,), util, self.threshold)]

    def empty_among(self, views: Sequence[CellView], packing: PackingResult) -> int:
        """How many of ``views`` (cells of this index) hold nothing after ``packing``."""
        if self._plain(packing) or not all(map(self.facts.__contains__, map(id, views))):
            return sum(1 for c in views if is_empty(c, packing.usage.get(c.name, ())))
        base = sum(self._each(views, "empty"))
        if packing.changed:
            ids = set(map(id, views))
            for name in packing.changed:
                f = self.by_name[name]
                if id(f.view) in ids:
                    base += is_empty(f.view, packing.usage[name]) - f.empty
        return base


def _build(cells: Sequence[CellView], shape: CellShape, threshold: float) -> CellIndex:
    """An index from scratch."""
    facts = {id(c): _cell_facts(c, shape, threshold) for c in cells}
    by_name = {f.view.name: f for f in facts.values()}
    exact = len(facts) == len(cells) == len(by_name)
    if not exact:
        bins = live_bins(cells, shape)
        return CellIndex(cells, shape, threshold, facts, {}, bins, {}, False, {})
    rows = sorted((f.row for f in facts.values() if f.row is not None), key=lambda r: r[0])
    positions = {r[0]: i for i, r in enumerate(rows)}
    bins = bins_from_rows(rows, shape)
    totals = dict.fromkeys((BUSY, EMPTY, CANDIDATES), 0)
    for f in facts.values():
        _tally(totals, f, +1)
    return CellIndex(cells, shape, threshold, facts, by_name, bins, positions, True, totals)


def _rows_replaced(prev: CellIndex, old: list[Row], new: list[Row]) -> Bins:
    """``prev``'s bins with rows of the same keys replaced in place (only usage changed)."""
    shape, bins = prev.shape, prev.bins
    rows, usage, util = list(bins.rows), dict(bins.usage), dict(bins.utilisation)
    used = bins.used - sum(_usage_facts(r[1], shape)[2] for r in old)
    free = set(bins.open)
    for r in new:
        position, facts = prev.positions[r[0]], _usage_facts(r[1], shape)
        rows[position], usage[r[0][2]], util[r[0][2]] = r, r[1], facts[0]
        used += facts[2]
        if r[2] >= 0:
            free.add(position)
        else:
            free.discard(position)
    return Bins(rows, usage, util, used, sorted(free), True)


def _diff(
    prev: CellIndex, cells: Sequence[CellView]
) -> tuple[dict[int, CellView], set[int]] | None:
    """(views of ``cells`` not in ``prev``, by id; ids of ``prev``'s views not in ``cells``),
    or None when ``cells`` holds a view twice.

    When only views changed in place (as many cells as before, a changed cell's new view at
    its old position: a pod landed or left), the positions that differ say it all."""
    old_cells = prev.cells
    if len(old_cells) == len(cells):
        moved = list(itertools.compress(range(len(cells)), map(operator.is_not, old_cells, cells)))
        new = {id(cells[i]): cells[i] for i in moved}
        old = {id(old_cells[i]) for i in moved}
        added = {i: v for i, v in new.items() if i not in old}
        if len(new) == len(moved) and not any(map(prev.facts.__contains__, added)):
            return added, old - new.keys()
    by_id = dict(zip(map(id, cells), cells, strict=True))
    if len(by_id) != len(cells):
        return None
    added = {i: by_id[i] for i in by_id.keys() - prev.facts.keys()}
    return added, prev.facts.keys() - by_id.keys()


def _update(prev: CellIndex, cells: Sequence[CellView]) -> CellIndex:
    """``prev`` moved on to ``cells``: facts only for the views not seen before."""
    diff = _diff(prev, cells) if prev.exact else None
    if diff is None or len(diff[0]) > len(cells) // 2 + 8:
        return _build(cells, prev.shape, prev.threshold)
    by_id, removed = diff
    added = by_id.keys()
    facts, by_name, totals = dict(prev.facts), dict(prev.by_name), dict(prev.totals)
    old = [prev.facts[i].row for i in removed]
    for i in removed:
        left = facts.pop(i)
        del by_name[left.view.name]
        _tally(totals, left, -1)
    for i in added:
        f = _cell_facts(by_id[i], prev.shape, prev.threshold)
        if f.view.name in by_name:
            return _build(cells, prev.shape, prev.threshold)
        facts[i] = by_name[f.view.name] = f
        _tally(totals, f, +1)
    old_rows = [r for r in old if r is not None]
    new_rows = [f.row for i in added if (f := facts[i]).row is not None]
    bins, positions = prev.bins, prev.positions
    if {r[0] for r in old_rows} == {r[0] for r in new_rows}:
        if new_rows:
            bins = _rows_replaced(prev, old_rows, new_rows)
    else:
        gone = {r[0] for r in old_rows}
        rows = [r for r in bins.rows if r[0] not in gone] + new_rows
        rows.sort(key=lambda r: r[0])
        bins, positions = bins_from_rows(rows, prev.shape), {r[0]: i for i, r in enumerate(rows)}
    return CellIndex(
        cells, prev.shape, prev.threshold, facts, by_name, bins, positions, True, totals
    )


_recent: list[CellIndex] = []


def index_of(cells: Sequence[CellView], shape: CellShape, threshold: float) -> CellIndex:
    """The index of ``cells``: derived from a remembered index that shares views with them
    (the same pool's previous call), or built from scratch."""
    related = None
    probes = {id(cells[i]) for i in (0, len(cells) // 2, -1)} if cells else set()
    for slot, known in enumerate(_recent):
        if known.shape != shape or known.threshold != threshold:
            continue
        if known.cells is cells:
            return known
        if related is None and any(p in known.facts for p in probes):
            related = slot
    if related is None:
        index = _build(cells, shape, threshold)
        _recent.insert(0, index)
        del _recent[RECENT:]
    else:
        index = _update(_recent[related], cells)
        _recent[related] = index
    return index
