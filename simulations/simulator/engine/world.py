"""The simulated pool's state: cells, the pods running on them, and the pending queue.

Why this module exists: the event loop (``engine.sim``) should read as "what happens when";
this module holds "what is", places pending pods the way HAMi would (``engine.hami``), and
turns the world into the ``Observation`` the policy sees, with per-GPU usage, exactly like the
live loop builds it from HAMi annotations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    MetricsHealth,
    Observation,
    PendingPod,
)
from simulations.simulator.engine import hami
from simulations.simulator.engine.cell_rows import CellRows
from simulations.simulator.engine.node_order import NodeOrder
from simulations.simulator.traces.model import TracePod

_UNKNOWN = object()  # a cell's GPU choice for an ask not computed yet
USAGE_MEMO_ENTRIES = 1 << 14  # bound on the usages whose GPU choices are kept
# the simulated metrics are always fresh: one immutable value shared by every observation (no
# new object per observation, and equal observations compare it by identity)
FRESH = MetricsHealth()
LIVE = (CellState.BOOTING, CellState.READY)
Choices = dict[int, tuple[int, ...] | None]  # HAMi's GPU choice per ask number on one usage


@dataclass(slots=True)
class Running:
    """A pod placed on a cell."""

    pod: TracePod
    cell: str
    gpus: tuple[int, ...]
    started_at: float
    end_at: float
    token: int


def busy_until(running: Running) -> float:
    """When the pod stops computing: ``usage`` of its run from its start (1 = its end)."""
    return running.started_at + running.pod.usage * (running.end_at - running.started_at)


@dataclass(slots=True)
class Pending:
    """A pod waiting for HAMi to place it; ``remaining_seconds`` shrinks after an eviction."""

    pod: TracePod
    since: float
    remaining_seconds: float
    view: PendingPod


@dataclass(slots=True)
class SimCell:
    name: str
    index: int
    state: CellState
    created_at: float
    gpus: list[GPUUsage]
    ready_at: float | None = None
    # HAMi places on a Ready cell only once it could (``SimConfig.bind_delay_seconds`` after
    # its boot ended): until then the policy sees it Ready and empty, and no pod lands on it
    accepting: bool = True
    pods: dict[str, Running] = field(default_factory=dict)
    cached_view: CellView | None = None
    cached_util: float | None = None
    cached_score: float | None = None
    cached_usage: tuple[GPUUsage, ...] | None = None  # ``gpus`` as a tuple (a memo key)
    # HAMi's GPU choice per ask on the current usage (None: does not fit), keyed by the
    # world's small-int number for the ask; placement asks the same few asks of every cell
    # after every event, while a cell's usage changes rarely. The dict is the world's for
    # this usage, shared by every cell with an equal one (None: not looked up since a change)
    cached_choice: Choices | None = None

    def touch(self) -> None:
        self.cached_view = None
        self.cached_util = None
        self.cached_score = None
        self.cached_usage = None
        self.cached_choice = None

    def score(self, shape: CellShape) -> float:
        """``hami.node_score`` of this cell, memoised until the usage changes."""
        if self.cached_score is None:
            self.cached_score = hami.node_score(self.gpus, shape)
        return self.cached_score

    def utilisation(self, shape: CellShape) -> float:
        if self.cached_util is None:
            self.cached_util = hami.utilisation(self.gpus, shape)
        return self.cached_util

    def usage(self) -> tuple[GPUUsage, ...]:
        """The GPUs' usage as a tuple, the same object until the usage changes."""
        if self.cached_usage is None:
            self.cached_usage = tuple(self.gpus)
        return self.cached_usage

    def view(self) -> CellView:
        if self.cached_view is None:
            usage = self.usage()
            self.cached_view = CellView(
                name=self.name,
                index=self.index,
                state=self.state,
                created_at=self.created_at,
                gpus=usage if self.state is not CellState.BOOTING else (),
                pods=len(self.pods),
                evictable_pods=len(self.pods),
                ready_at=self.ready_at,
                pod_asks=tuple([(r.pod.ask,) for r in self.pods.values()]),
            )
        return self.cached_view


def _view_of(cell: SimCell) -> CellView | None:
    """What the policy sees of ``cell`` (nothing of a Failed one)."""
    return None if cell.state is CellState.FAILED else cell.view()


class World:
    """Cells, running pods and the pending queue, with HAMi placement."""

    def __init__(self, shape: CellShape, node_policy: str, gpu_policy: str) -> None:
        self.shape = shape
        self.node_policy = node_policy
        self.gpu_policy = gpu_policy
        self.cells: dict[str, SimCell] = {}
        self.pending: dict[str, Pending] = {}
        self.next_index = 0
        self.live = 0  # cells Booting or Ready (kept as cells come, go and change state)
        self._pending_views: tuple[PendingPod, ...] | None = None
        self._observation: Observation | None = None
        # Ready cells in HAMi's node order (best score first, then index)
        self._order: NodeOrder[SimCell] = NodeOrder(shape, node_policy)
        # since the last change: find_cell's answer per ask number, the cells' views, the
        # Ready cells' utilisation sum (all cleared by ``_changed``)
        self._found: dict[int, tuple[SimCell, tuple[int, ...]] | None] = {}
        self._cell_views: tuple[CellView, ...] | None = None
        self._util_sum: tuple[float, int] | None = None
        # the views of the cells not Failed and the Ready cells' utilisation, in cell order,
        # redone only for the cells that changed (``engine.cell_rows``)
        self._view_rows: CellRows[SimCell, CellView] = CellRows(_view_of)
        self._util_rows: CellRows[SimCell, float] = CellRows(self._ready_utilisation)
        self._ask_numbers: dict[GPUAsk, int] = {}  # equal asks share one number
        # HAMi's GPU choices per usage (by ask number): cells often pass through equal usages;
        # a cell looks its usage up once per change, not once per (change, ask)
        self._choices: dict[tuple[GPUUsage, ...], Choices] = {}

    # ----- cells -----------------------------------------------------------------------------

    def add_cell(self, now: float, state: CellState) -> SimCell:
        index = self.next_index
        self.next_index += 1
        gpus = [hami.EMPTY] * self.shape.gpus
        cell = SimCell(f"cell-{index}", index, state, now, gpus)
        if state is CellState.READY:
            cell.ready_at = now
        self.cells[cell.name] = cell
        self.live += state in LIVE
        self._changed(cell)
        return cell

    def remove_cell(self, name: str) -> SimCell | None:
        cell = self.cells.pop(name, None)
        if cell is not None:
            self.live -= cell.state in LIVE
            self._changed(cell, present=False)
        return cell

    def set_state(self, cell: SimCell, state: CellState, now: float) -> None:
        self.live += (state in LIVE) - (cell.state in LIVE)
        cell.state = state
        if state is CellState.READY:
            cell.ready_at = now
        cell.touch()
        self._changed(cell)

    def _changed(self, cell: SimCell, present: bool = True) -> None:
        """``cell``'s state or usage changed (or it left): the observation, its place in the
        node order and the memos are stale."""
        self._order.changed(cell, present)
        self._view_rows.changed(cell, present)
        self._util_rows.changed(cell, present)
        self._observation = None
        self._found.clear()
        self._cell_views = None
        self._util_sum = None

    def open_cell(self, cell: SimCell) -> None:
        """``cell`` takes pods from now on (its bind delay is over)."""
        cell.accepting = True
        self._changed(cell)

    def count(self, state: CellState) -> int:
        return sum(1 for c in self.cells.values() if c.state is state)

    # ----- pods ------------------------------------------------------------------------------

    def enqueue(self, pod: TracePod, now: float, remaining_seconds: float) -> None:
        view = PendingPod(key=pod.key, ask=pod.ask, first_seen=now, constraints=pod.constraints())
        self.pending[pod.key] = Pending(pod, now, remaining_seconds, view)
        self._pending_views = None
        self._observation = None

    def find_cell(self, ask: GPUAsk) -> tuple[SimCell, tuple[int, ...]] | None:
        """The Ready cell and GPUs HAMi would choose for ``ask``, or None: the first cell in
        node order (``binpack``: highest score first; ``spread``: lowest; then lowest index)
        that fits. The order is kept until a cell changes, so most calls stop early; the
        answer per ask, too (asks repeat: arrivals into a full pool, the pending queue)."""
        number = self._ask_numbers.get(ask)
        if number is None:
            number = self._ask_numbers[ask] = len(self._ask_numbers)
        found = self._found
        if number in found:
            return found[number]
        answer = found[number] = self._first_fit(self._order.cells(), ask, number)
        return answer

    def _first_fit(
        self, order: list[SimCell], ask: GPUAsk, number: int
    ) -> tuple[SimCell, tuple[int, ...]] | None:
        """The first cell of ``order`` HAMi's GPU choice fits ``ask`` on (memoised per usage,
        under the ask's ``number``)."""
        for cell in order:
            choices = cell.cached_choice
            if choices is None:
                choices = cell.cached_choice = self._choices_of(cell.usage())
            chosen = choices.get(number, _UNKNOWN)
            if chosen is _UNKNOWN:
                usage = cell.usage()
                chosen = choices[number] = hami.choose_gpus(usage, self.shape, ask, self.gpu_policy)
            if chosen is not None:
                return cell, chosen  # type: ignore[return-value]
        return None

    def _choices_of(self, usage: tuple[GPUUsage, ...]) -> Choices:
        """The GPU choices known for ``usage`` (filled in by ``_first_fit``)."""
        memo = self._choices
        choices = memo.get(usage)
        if choices is None:
            if len(memo) >= USAGE_MEMO_ENTRIES:
                memo.clear()  # cells keep the dicts they hold: still right for their usage
            choices = memo[usage] = {}
        return choices

    def bind(
        self, entry: Pending, cell: SimCell, gpus: tuple[int, ...], now: float, token: int
    ) -> Running:
        hami.allocate(cell.gpus, self.shape, entry.pod.ask, gpus)
        running = Running(entry.pod, cell.name, gpus, now, now + entry.remaining_seconds, token)
        cell.pods[entry.pod.key] = running
        cell.touch()
        del self.pending[entry.pod.key]
        self._pending_views = None
        self._changed(cell)
        return running

    def unbind(self, running: Running) -> SimCell:
        cell = self.cells[running.cell]
        hami.release(cell.gpus, self.shape, running.pod.ask, running.gpus)
        del cell.pods[running.pod.key]
        cell.touch()
        self._changed(cell)
        return cell

    # ----- what the policy sees --------------------------------------------------------------

    def observation(self, free_physical_gpus: int | None) -> Observation:
        """The snapshot handed to ``decide``; the same object while nothing changed."""
        cached = self._observation
        if cached is not None and cached.free_physical_gpus == free_physical_gpus:
            return cached
        if self._pending_views is None:
            self._pending_views = tuple(p.view for p in self.pending.values())
        cells = self._cell_views
        if cells is None:
            cells = self._cell_views = tuple(self._view_rows.values())
        self._observation = Observation(
            pending=self._pending_views,
            cells=cells,
            metrics=FRESH,
            free_physical_gpus=free_physical_gpus,
        )
        return self._observation

    def idle_cells(self, now: float, window_seconds: float) -> frozenset[str]:
        """Ready or Draining cells whose every pod has computed nothing for ``window_seconds``
        (``TracePod.usage``): what HAMi's monitor shows the live loop (``scaleDownOn: Usage``)."""
        return frozenset(
            cell.name
            for cell in self.cells.values()
            if cell.state in (CellState.READY, CellState.DRAINING)
            and cell.pods
            and all(now - busy_until(r) >= window_seconds for r in cell.pods.values())
        )

    def utilisation_sum(self) -> tuple[float, int]:
        """(sum of Ready cells' utilisation, number of Ready cells), kept until a change."""
        if self._util_sum is None:
            utils = self._util_rows.values()
            self._util_sum = sum(utils), len(utils)
        return self._util_sum

    def _ready_utilisation(self, cell: SimCell) -> float | None:
        return cell.utilisation(self.shape) if cell.state is CellState.READY else None

    def demand_asks(self) -> list[GPUAsk]:
        """Asks of every pod running or pending: what the pool must hold right now."""
        asks = [r.pod.ask for c in self.cells.values() for r in c.pods.values()]
        asks.extend(p.pod.ask for p in self.pending.values())
        return asks
