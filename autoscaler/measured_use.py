"""Measured use of a pool's cells as the autoscaler publishes it: status, condition, idle cells.

Why this module exists: the loop reads HAMi's monitor (``autoscaler.signals.hami_activity``);
what follows from that reading is pure judgement kept here so it is unit-tested without a
server: which pods live on which cell, which cells are idle for ``usageIdleWindow``, the
``status.utilization`` block, and the ``MetricsAvailable`` condition (the autoscaler is its one
writer). The condition is True only when both the allocation metrics and the measured use are
fresh; False names the reason (``NotConfigured``, ``Unreachable``, ``Stale``, ``Unparseable``).
An unfresh reading makes no cell idle, so usage-driven scale-down freezes with it; stale
allocation metrics freeze every scale-down, as before (``Reason.METRICS_STALE``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.explain import rfc3339
from autoscaler.observe import ALLOCATED_ANNOTATION
from autoscaler.policy.types import MetricsHealth
from autoscaler.signals.hami_activity import ActivityReading, IdleVerdict, Verdict, idle_cells
from gpucellpool.api.autoscaling import ScaleDownSignal
from gpucellpool.api.conditions import ConditionType
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellPhase

JSON = dict[str, Any]
NOT_CONFIGURED = "NotConfigured"
_TERMINAL = ("Succeeded", "Failed")
NOTHING_IDLE = IdleVerdict(frozenset(), 0, 0)


def pods_by_cell(pool: GPUCellPool, by_node: Mapping[str, Sequence[JSON]]) -> dict[str, list[str]]:
    """``namespace/name`` of the live HAMi GPU pods on each Ready or Draining cell's Node."""
    out: dict[str, list[str]] = {}
    for cell in pool.status.cells or []:
        if cell.phase not in (CellPhase.READY, CellPhase.DRAINING):
            continue
        keys = []
        for pod in by_node.get(cell.node_name or cell.name, ()):
            meta = pod.get("metadata") or {}
            phase = (pod.get("status") or {}).get("phase")
            if phase in _TERMINAL or ALLOCATED_ANNOTATION not in (meta.get("annotations") or {}):
                continue
            keys.append(f"{meta.get('namespace')}/{meta.get('name')}")
        out[cell.name] = keys
    return out


@dataclass(frozen=True, slots=True)
class MeasuredUse:
    """One decision's view of measured use: the reading, its idle verdict, the condition."""

    available: bool
    reason: str
    message: str
    reading: ActivityReading | None = None
    idle: IdleVerdict = NOTHING_IDLE

    def idle_for_policy(self, pool: GPUCellPool) -> frozenset[str]:
        """The cells the policy may treat as idle: Usage mode and a fresh reading only."""
        usage = pool.spec.autoscaling.scale_down_on == ScaleDownSignal.USAGE
        return self.idle.idle_cells if usage and self.available else frozenset()


def judge(
    pool: GPUCellPool,
    allocation: MetricsHealth,
    reading: ActivityReading | None,
    by_cell: Mapping[str, Sequence[str]],
) -> MeasuredUse:
    """The condition's status and reason, and the idle cells, from both readings."""
    if pool.spec.autoscaling.prometheus is not None and is_dra(pool):
        return _judge_dra(allocation)
    if pool.spec.autoscaling.prometheus is None or reading is None:
        msg = "spec.autoscaling.prometheus is not set: allocation from pod annotations only"
        return MeasuredUse(False, NOT_CONFIGURED, msg)
    # Draining cells too: their idle pods then need no new home while they are evicted.
    verdict = idle_cells(by_cell, reading, pool.spec.autoscaling.usage_idle_window.seconds)
    if not allocation.fresh:
        reason = Verdict.UNREACHABLE if allocation.read_failed else Verdict.STALE
        msg = f"HAMi allocation metrics not fresh ({allocation.detail}): scale-down frozen"
        return MeasuredUse(False, reason.value, msg, reading, verdict)
    if not reading.fresh:
        msg = f"HAMi monitor metrics not fresh ({reading.detail}): usage-driven scale-down frozen"
        return MeasuredUse(False, reading.verdict.value, msg, reading, verdict)
    return MeasuredUse(True, Verdict.FRESH.value, reading.detail, reading, verdict)


def is_dra(pool: GPUCellPool) -> bool:
    """HAMi in DRA mode: allocations from HAMi-DRA's monitor, which measures no use."""
    hami = pool.spec.capacity.hami
    return hami is not None and hami.mode == "DRA"


def _judge_dra(allocation: MetricsHealth) -> MeasuredUse:
    """A DRA pool: only the allocation series exist (hami-facts §5), so they alone decide.

    No ``status.utilization`` and no idle cell follow from them: a ``scaleDownOn: Usage``
    pool in DRA mode never finds a cell idle, it does not guess."""
    if not allocation.fresh:
        reason = Verdict.UNREACHABLE if allocation.read_failed else Verdict.STALE
        msg = f"HAMi-DRA allocation metrics not fresh ({allocation.detail}): scale-down frozen"
        return MeasuredUse(False, reason.value, msg)
    msg = (
        f"HAMi-DRA allocation metrics fresh ({allocation.detail}); HAMi-DRA exports no "
        "measured utilisation, so no cell is judged idle by usage"
    )
    return MeasuredUse(True, Verdict.FRESH.value, msg)


def condition(pool: GPUCellPool, use: MeasuredUse, now: float) -> JSON:
    """The ``MetricsAvailable`` condition (transition time kept while its status holds)."""
    status = "True" if use.available else "False"
    old = pool.status.condition(ConditionType.METRICS_AVAILABLE)
    moved = old is None or old.status.value != status
    since = now if moved or old is None else old.last_transition_time.timestamp()
    return {
        "type": ConditionType.METRICS_AVAILABLE.value,
        "status": status,
        "reason": use.reason,
        "message": use.message[:4000],
        "lastTransitionTime": rfc3339(since),
        "observedGeneration": pool.metadata.generation,
    }


def utilization_status(use: MeasuredUse, now: float) -> JSON | None:
    """``status.utilization`` from a fresh reading; None keeps the last one written."""
    if not use.available or use.reading is None:
        return None
    mean = use.reading.mean_gpu_percent()
    body: JSON = {
        "gpus": sum(len(g) for g in use.reading.gpu_utilisation.values()),
        "pods": use.idle.pods,
        "idlePods": use.idle.idle_pods,
        "lastObserved": rfc3339(now),
    }
    if mean is not None:
        body["gpuUtilizationPercent"] = round(mean)
    if use.idle.idle_cells:
        body["idleCells"] = sorted(use.idle.idle_cells)
    return body


def published(use: MeasuredUse) -> tuple[Any, ...]:
    """What of ``use`` must be written again when it changes (not the reading's age)."""
    util = utilization_status(use, 0.0)
    if util is not None:
        util = {k: v for k, v in util.items() if k != "lastObserved"}
    return use.available, use.reason, use.message if not use.available else "", str(util)
