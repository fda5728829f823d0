"""Cell lifecycle metrics read from the pool's status, as the operator process observes it.

Why this module exists: the provisioner writes what happened to every cell into
``status.cells[]`` (one row per cell: phase, ``lastTransitionTime``, ``readyOnce``) and the
physical / HAMi readings into ``status.physicalCapacity`` / ``status.workloadCapacity``, but
counters and histograms need *changes*: a cell
created, a phase left, a first Ready, a row gone. ``status_changes`` is the pure diff of two
consecutive statuses of one pool; ``StatusMetrics`` is the thin shell the App feeds every pool
watch event to, which applies the diff to ``OperatorMetrics.pool(...)``.

Rules that keep the numbers honest:

* Startup is measured from the row's own timestamps, never a clock: a row seen in ``Pending``
  (the phase a cell is created in; ``lastTransitionTime`` moves only on a phase change) was
  created at its ``lastTransitionTime``; its first ``Ready`` happened at the ``Ready`` row's
  ``lastTransitionTime``. A row whose creation was not seen (first seen later) is not observed
  rather than guessed. The row carries no creation time, so the diff carries ``born``.
* The first sight of a pool (start, takeover) sets gauges and remembers births; it never counts
  the rows already there as created or their phases as transitions.
* A ``Failed`` row followed by a non-``Failed`` one (or a changed ``guestUID``) is a new cell at
  the same index: the old one is counted removed, the new one created.
* Removal reasons are a closed set (``REMOVAL_REASONS``) from the row's last phase: the row
  carries no drain cause (ScaleDown / RollingUpdate live on the outer object), so the cause is
  reported as what the status can tell: drained, failed, or gone without either.
* Physical GPUs and HAMi capacity come from ``status.physicalCapacity`` /
  ``status.workloadCapacity``. The provisioner keeps ``workloadCapacity`` unchanged when a read
  fails (the earlier implementation's meaning), but a metric must not be left stale: the
  object counts as unknown (None: the series is removed) while ``CapacityAvailable`` is
  ``Unknown`` and ``lastObserved`` is older than that condition's transition (a successful
  read stamps ``lastObserved`` in the same pass as the condition, a failed one does not).
* Legacy fallback, only for a status written by an operator that did not write these objects
  yet (a provisioner of this project before they were written, or another process running
  an older one with ``--no-provision`` here): the PCI devices on the rows, and the numbers in
  the ``PhysicalGPUsAvailable`` / ``CapacityAvailable`` condition messages. Once the objects
  are written, the messages are never parsed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from autoscaler.policy.demand import parse_int_quantity
from gpucellpool.api.conditions import ConditionType
from gpucellpool.api.metric_catalogue import REMOVAL_REASONS
from gpucellpool.api.status import (
    CellPhase,
    CellStatus,
    GPUCellPoolStatus,
    ResourceTotals,
    WorkloadCapacity,
)
from gpucellpool.operator.metrics import OperatorMetrics, PoolMetrics

log = logging.getLogger(__name__)

MIB = 2**20
DRAINED, FAILED, OTHER = REMOVAL_REASONS
_FREE = re.compile(r"^(\d+) free physical GPU")
_HAMI = re.compile(r"^(\d+)/(\d+) MiB, (\d+)/(\d+)% cores")


@dataclass(frozen=True, slots=True)
class Physical:
    """Whole GPUs held by the pool's cells, and free for it (None: unknown)."""

    held: int
    free: int | None


@dataclass(frozen=True, slots=True)
class Capacity:
    """HAMi capacity: devices and per-state memory (bytes) / compute (percent); None: unknown."""

    devices: int | None
    memory_bytes: Mapping[str, float] | None
    compute_percent: Mapping[str, float] | None


@dataclass(frozen=True, slots=True)
class StatusChanges:
    """What happened between two statuses of one pool, and the gauges of the newer one.

    ``born``: creation time (Unix seconds) of every current row whose creation was seen and
    that has not been Ready yet; pass it to the next call.
    """

    created: int = 0
    transitions: tuple[tuple[str, str], ...] = ()
    startup_seconds: tuple[float, ...] = ()
    removed: tuple[str, ...] = ()
    physical: Physical = Physical(0, None)
    capacity: Capacity = Capacity(None, None, None)
    born: Mapping[str, float] = field(default_factory=dict)


def removal_reason(row: CellStatus) -> str:
    """The closed-set reason of a row that is gone (or replaced), from its last phase."""
    if row.phase is CellPhase.FAILED:
        return FAILED
    if row.phase in (CellPhase.DRAINING, CellPhase.DELETING):
        return DRAINED
    return OTHER


def _seconds(row: CellStatus) -> float | None:
    return row.last_transition_time.timestamp() if row.last_transition_time else None


def _new_incarnation(prev: CellStatus, cur: CellStatus) -> bool:
    """Same name, a different cell: a Failed tombstone replaced, or another outer object."""
    if prev.phase is CellPhase.FAILED and cur.phase is not CellPhase.FAILED:
        return True
    return bool(prev.guest_uid and cur.guest_uid and prev.guest_uid != cur.guest_uid)


def _first_ready(prev: CellStatus, cur: CellStatus) -> bool:
    return (
        cur.phase is CellPhase.READY and prev.phase is not CellPhase.READY and not prev.ready_once
    )


def status_changes(
    previous: GPUCellPoolStatus | None,
    current: GPUCellPoolStatus,
    born: Mapping[str, float] | None = None,
) -> StatusChanges:
    """The diff of two consecutive statuses of one pool (``previous`` None: first sight)."""
    before = {r.name: r for r in previous.cells or []} if previous is not None else {}
    births = dict(born or {})
    created, transitions, startups, removed = 0, [], [], []
    for cur in current.cells or []:
        prev = before.get(cur.name)
        fresh = prev is None or _new_incarnation(prev, cur)
        if fresh:
            births.pop(cur.name, None)
            if previous is not None:
                created += 1
            if prev is not None:
                removed.append(removal_reason(prev))
        elif prev is not None and prev.phase is not cur.phase:
            transitions.append((prev.phase.value, cur.phase.value))
            at, start = _seconds(cur), births.get(cur.name)
            if _first_ready(prev, cur) and at is not None and start is not None:
                startups.append(max(0.0, at - start))
        created_at = _seconds(cur) if cur.phase is CellPhase.PENDING else None
        if created_at is not None and cur.name not in births:
            births[cur.name] = created_at
        if cur.ready_once or cur.phase is CellPhase.READY:
            births.pop(cur.name, None)
    names = {r.name for r in current.cells or []}
    removed += [removal_reason(r) for name, r in before.items() if name not in names]
    return StatusChanges(
        created=created,
        transitions=tuple(transitions),
        startup_seconds=tuple(startups),
        removed=tuple(removed),
        physical=physical(current),
        capacity=capacity(current),
        born={k: v for k, v in births.items() if k in names},
    )


# -- gauges of one status ----------------------------------------------------------------------


def physical(status: GPUCellPoolStatus) -> Physical:
    """Held: ``physicalCapacity.gpus``; free: its ``freeGPUsInCluster`` (absent: unknown).
    Legacy status without the object: the rows' PCI devices and the condition's message."""
    written = status.physical_capacity
    if written is not None:
        return Physical(written.gpus, written.free_gpus_in_cluster)
    held = sum(len(r.devices or ()) for r in status.cells or [])
    cond = status.condition(ConditionType.PHYSICAL_GPUS_AVAILABLE)
    if cond is None or cond.status == "Unknown":
        return Physical(held, None)
    if cond.status == "False" and cond.reason == "InsufficientPhysicalGPU":
        return Physical(held, 0)
    match = _FREE.match(cond.message or "")
    return Physical(held, int(match.group(1)) if match else None)


def _totals(totals: ResourceTotals | None) -> dict[str, float] | None:
    if totals is None:
        return None
    values = {
        s: parse_int_quantity(getattr(totals, s)) for s in ("total", "allocated", "available")
    }
    known = {s: float(v) for s, v in values.items() if v is not None}
    return known or None


def _ready_devices(status: GPUCellPoolStatus) -> int | None:
    """Devices HAMi advertises on the Ready rows; None when one of them is unknown."""
    ready = [r for r in status.cells or [] if r.phase is CellPhase.READY]
    if any(r.capacity_devices is None for r in ready):
        return None
    return sum(r.capacity_devices or 0 for r in ready)


def _kept_after_failed_read(status: GPUCellPoolStatus, written: WorkloadCapacity) -> bool:
    """The provisioner kept an older reading: the condition went Unknown after it was read."""
    cond = status.condition(ConditionType.CAPACITY_AVAILABLE)
    if cond is None or cond.status != "Unknown" or written.last_observed is None:
        return False
    return written.last_observed < cond.last_transition_time


def capacity(status: GPUCellPoolStatus) -> Capacity:
    """``workloadCapacity`` (unknown while it is a kept, stale reading). Legacy status
    without the object: the Ready rows' ``capacityDevices`` and the condition's message."""
    written = status.workload_capacity
    if written is not None and written.gpu_memory is not None:
        if _kept_after_failed_read(status, written):
            return Capacity(None, None, None)
        return Capacity(
            written.gpu_devices, _totals(written.gpu_memory), _totals(written.gpu_compute)
        )
    return _legacy_capacity(status)


def _legacy_capacity(status: GPUCellPoolStatus) -> Capacity:
    devices = _ready_devices(status)
    cond = status.condition(ConditionType.CAPACITY_AVAILABLE)
    if cond is not None and cond.reason == "ScaledToZero":
        zero = {"total": 0.0, "allocated": 0.0, "available": 0.0}
        return Capacity(devices, zero, zero)
    match = _HAMI.match(cond.message or "") if cond is not None else None
    if match is None or cond is None or cond.status == "Unknown":
        return Capacity(devices, None, None)
    used_mem, total_mem, used_cores, total_cores = (int(g) for g in match.groups())
    memory = {
        "total": float(total_mem * MIB),
        "allocated": float(used_mem * MIB),
        "available": float(max(0, total_mem - used_mem) * MIB),
    }
    compute = {
        "total": float(total_cores),
        "allocated": float(used_cores),
        "available": float(max(0, total_cores - used_cores)),
    }
    return Capacity(devices, memory, None if cond.reason == "Heterogeneous" else compute)


# -- the shell ---------------------------------------------------------------------------------


def apply(recorder: PoolMetrics, changes: StatusChanges) -> None:
    """Write one diff onto a pool's recorder."""
    for _ in range(changes.created):
        recorder.cell_created()
    for from_phase, to_phase in changes.transitions:
        recorder.cell_transition(from_phase, to_phase)
    for seconds in changes.startup_seconds:
        recorder.cell_ready(seconds)
    for reason in changes.removed:
        recorder.cell_removed(reason)
    recorder.record_physical(held=changes.physical.held, free=changes.physical.free)
    cap = changes.capacity
    recorder.record_capacity(
        devices=cap.devices, memory_bytes=cap.memory_bytes, compute_percent=cap.compute_percent
    )


@dataclass(frozen=True, slots=True)
class _Seen:
    status: GPUCellPoolStatus
    born: Mapping[str, float]


class StatusMetrics:
    """Feeds every pool watch event through ``status_changes`` while this replica leads.

    Memory is per pool and only kept while leading: a replica that was standing by (or just
    started) treats its next sight of a pool as the first, so it never counts history twice.
    """

    def __init__(self, metrics: OperatorMetrics, is_leader: Callable[[], bool]) -> None:
        self.metrics = metrics
        self.is_leader = is_leader
        self._seen: dict[tuple[str, str], _Seen] = {}

    def reset(self, keys: Iterable[tuple[str, str]] | None = None) -> None:
        """Forget these pools' last status (None: every pool's; their leadership changed)."""
        if keys is None:
            self._seen.clear()
        for key in keys or ():
            self._seen.pop(key, None)

    def observe(
        self, kind: str, raw: Mapping[str, Any], status: GPUCellPoolStatus | None = None
    ) -> None:
        """One GPUCellPool watch event (``status``: its status already validated by the
        caller; validated here when None)."""
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if kind == "DELETED":
            self._seen.pop(key, None)
            self.metrics.forget(*key)
            return
        if not self.is_leader():
            self._seen.pop(key, None)
            return
        try:
            if status is None:
                status = GPUCellPoolStatus.model_validate(raw.get("status") or {})
        except ValidationError as exc:
            log.warning("unreadable status of %s/%s: %s", *key, exc)
            return
        seen = self._seen.get(key)
        changes = status_changes(seen.status if seen else None, status, seen.born if seen else {})
        self._seen[key] = _Seen(status, changes.born)
        apply(self.metrics.pool(*key), changes)
