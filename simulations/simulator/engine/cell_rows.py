"""One value per cell, for the world's cells in index order, patched only where cells changed.

Why this module exists: after every event the simulator hands the policy the cells' views and
integrates the Ready cells' utilisation, and both were rebuilt from every cell in a Python loop
although one event changes one or two cells; on a pool of dozens to hundreds of cells that
loop was a tenth of a replay. Here the values stay in a list in the order the world iterates
its cells (creation order, which is index order: cells are never re-inserted), and only the
changed cells' entries are recomputed, removed or inserted, so the list is exactly what the
full loop would build (tests/unit/test_sim_cell_rows.py) and a sum over it adds the same floats
in the same order.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Indexed(Protocol):
    """What the rows read of a cell: its index (the world's iteration order)."""

    @property
    def index(self) -> int: ...


C = TypeVar("C", bound=Indexed)
T = TypeVar("T")


class CellRows(Generic[C, T]):
    """``value(cell)`` of each cell for which it is not None, in index order."""

    def __init__(self, value: Callable[[C], T | None]) -> None:
        self._value = value
        self._indices: list[int] = []
        self._values: list[T] = []
        self._stale: dict[int, tuple[C, bool]] = {}  # changed since: (cell, still in world)

    def changed(self, cell: C, present: bool = True) -> None:
        """``cell`` changed (``present`` False: it left the world); its row is redone lazily."""
        self._stale[cell.index] = (cell, present)

    def values(self) -> list[T]:
        """The rows, in index order; the list is the rows' own (do not change it)."""
        if self._stale:
            for cell, present in self._stale.values():
                self._patch(cell, present)
            self._stale.clear()
        return self._values

    def _patch(self, cell: C, present: bool) -> None:
        index, indices = cell.index, self._indices
        at = bisect_left(indices, index)
        listed = at < len(indices) and indices[at] == index
        value = self._value(cell) if present else None
        if value is None:
            if listed:
                del indices[at]
                del self._values[at]
        elif listed:
            self._values[at] = value
        else:
            indices.insert(at, index)
            self._values.insert(at, value)
