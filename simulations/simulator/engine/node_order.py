"""Ready cells in HAMi's node order, kept up to date by moving only the cells that changed.

Why this module exists: HAMi tries nodes best score first (``binpack``: highest; ``spread``:
lowest; ties to the lowest cell index here), and the simulator asks for that order after almost
every event. Sorting every Ready cell again after each bind or unbind cost more than the
placement itself on a pool of hundreds of cells; one event changes one or two cells, so those
are taken out and put back where their new score belongs. The order is a total one (the index
breaks ties), so it is exactly what a full sort gives (tests/unit/test_sim_speed_identity.py).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Generic, Protocol, TypeVar

from autoscaler.policy.types import CellShape, CellState
from simulations.simulator.engine import hami


class Scored(Protocol):
    """What the order reads of a cell: its index, its state, whether HAMi places on it yet,
    and HAMi's node score."""

    @property
    def index(self) -> int: ...

    @property
    def state(self) -> CellState: ...

    @property
    def accepting(self) -> bool: ...

    def score(self, shape: CellShape) -> float: ...


C = TypeVar("C", bound=Scored)


class NodeOrder(Generic[C]):
    """The Ready cells of one world HAMi places on (``accepting``), sorted by (signed score,
    index)."""

    def __init__(self, shape: CellShape, node_policy: str) -> None:
        self.shape = shape
        self._sign = -1.0 if node_policy == hami.BINPACK else 1.0
        self._keys: list[tuple[float, int]] = []
        self._cells: list[C] = []
        self._key_of: dict[int, tuple[float, int]] = {}  # cell index -> its key while listed
        self._stale: dict[int, tuple[C, bool]] = {}  # changed since: (cell, still in world)

    def changed(self, cell: C, present: bool = True) -> None:
        """``cell``'s state or usage changed (``present`` False: it left the world)."""
        self._stale[cell.index] = (cell, present)

    def cells(self) -> list[C]:
        """Ready cells, best first; the list is the order's own (do not change it)."""
        if self._stale:
            for cell, present in self._stale.values():
                self._move(cell, present)
            self._stale.clear()
        return self._cells

    def _move(self, cell: C, present: bool) -> None:
        old = self._key_of.pop(cell.index, None)
        if old is not None:
            at = bisect_left(self._keys, old)
            del self._keys[at]
            del self._cells[at]
        if present and cell.state is CellState.READY and cell.accepting:
            key = (self._sign * cell.score(self.shape), cell.index)
            at = bisect_left(self._keys, key)
            self._keys.insert(at, key)
            self._cells.insert(at, cell)
            self._key_of[cell.index] = key
