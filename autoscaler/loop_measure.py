"""The loop's measured-use step: read HAMi's monitor, judge it, add it to what is published.

Why this module exists: ``autoscaler.loop`` is the control flow and is already long; reading
measured use (one bounded call to the ``ActivitySource`` port) and folding its result into the
status body and the pool's metrics are three small steps kept here, next to the pure judgement
in ``autoscaler.measured_use``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from autoscaler.loop_ports import ActivitySource, PoolRecorder
from autoscaler.measured_use import (
    MeasuredUse,
    condition,
    is_dra,
    judge,
    pods_by_cell,
    published,
    utilization_status,
)
from autoscaler.policy.types import MetricsHealth
from autoscaler.signals.hami_activity import Verdict, failed
from gpucellpool.api.pool import GPUCellPool

JSON = dict[str, Any]


async def measure(
    activity: ActivitySource | None,
    pool: GPUCellPool,
    nodes: Sequence[str],
    by_node: Mapping[str, Sequence[JSON]],
    allocation: MetricsHealth,
    timeout_s: float,
) -> MeasuredUse:
    """Measured use of the pool's Ready cells (``nodes``: the Nodes Prometheus must report).

    The pods on each cell are gathered only when the HAMi monitor is read: without a reading
    ``judge`` does not look at them (a walk over every pod of the pool per decision saved)."""
    if activity is None or pool.spec.autoscaling.prometheus is None or is_dra(pool):
        return judge(pool, allocation, None, {})
    by_cell = pods_by_cell(pool, by_node)
    pods = sorted({key for keys in by_cell.values() for key in keys})
    try:
        async with asyncio.timeout(timeout_s):
            reading = await activity.activity(pool, nodes, pods)
    except TimeoutError:
        reading = failed(Verdict.UNREACHABLE, f"HAMi monitor read timed out ({timeout_s:g}s)")
    return judge(pool, allocation, reading, by_cell)


def add_to_status(body: JSON, pool: GPUCellPool, use: MeasuredUse, raw: JSON, now: float) -> None:
    """The MetricsAvailable condition and ``status.utilization`` into a status apply body.

    The last utilisation written is re-applied while the reading is not fresh: a server-side
    apply that left it out would remove it (we own the field), and a stale figure with its
    ``lastObserved`` says more than none.
    """
    status = body["status"]
    status.setdefault("conditions", []).append(condition(pool, use, now))
    util = utilization_status(use, now) or raw.get("utilization")
    if util:
        status["utilization"] = util


def due(use: MeasuredUse | None, written: tuple[Any, ...] | None) -> bool:
    """Whether measured use changed since it was last written."""
    return use is not None and published(use) != written


def record(recorder: PoolRecorder, use: MeasuredUse | None) -> None:
    """The pool's measured-use gauges; unknown values are removed, never written as 0."""
    if use is None:
        return
    fresh = use.available and use.reading is not None
    mean = use.reading.mean_gpu_percent() if fresh and use.reading is not None else None
    recorder.record_measured_use(
        use.available,
        None if mean is None else mean / 100.0,
        use.idle.idle_pods if fresh else None,
        len(use.idle.idle_cells) if fresh else None,
    )
