"""Rolling updates in the shell: feed ``plan_rollout`` from live cells and apply its answer.

Why this module exists: the pure ``fsm.rollout.plan_rollout`` decides which stale cells
(template hash on the outer object differs from the pool's current hash) to drain and how many
extra cells membership may create; this module builds its input from the live objects - reading
whether a stale Ready cell still has GPU pods only when a rolling update could touch it - and
turns the plan into drain marks (cause ``RollingUpdate``) and the ``Updated`` condition. Each
cell's drain back-off (``drain_holds.held_for_s``: abandoned drains recorded on the outer
object) goes in too, so a cell whose rollout drain a PodDisruptionBudget blocked is not
re-picked every ``drain.timeout``.
"""

from __future__ import annotations

from dataclasses import replace

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellPhase, CellStatus
from provisioner.backends.base import CellObjects
from provisioner.drain_holds import backoff_end_s, held_for_s
from provisioner.fsm.drain import DrainCause
from provisioner.fsm.identity import TEMPLATE_HASH_ANNOTATION
from provisioner.fsm.rollout import RolloutCell, RolloutInput, RolloutPlan, is_stale, plan_rollout
from provisioner.kube import KubeApi, KubeError
from provisioner.workload import gpu_pods_on_node


async def _busy(workload: KubeApi | None, name: str) -> bool | None:
    if workload is None:
        return None
    try:
        return bool(await gpu_pods_on_node(workload, name))
    except KubeError:
        return None  # unknown counts as busy


async def rollout_plan(
    pool: GPUCellPool,
    cells: dict[str, CellObjects],
    rows: dict[str, CellStatus],
    current_hash: str,
    desired: int,
    workload: KubeApi | None,
    now: float,
) -> RolloutPlan:
    rolling = pool.spec.update_policy.type == "RollingUpdate"
    knobs = pool.spec.update_policy.rolling_update
    surge = knobs.max_surge if knobs is not None and knobs.max_surge is not None else 0
    unavailable = 1
    if knobs is not None and knobs.max_unavailable is not None:
        unavailable = knobs.max_unavailable
    entries = []
    for name, cell in sorted(cells.items(), key=lambda kv: kv[1].index):
        row = rows.get(name)
        phase = (
            CellPhase.DRAINING if cell.drain_cause else (row.phase if row else CellPhase.PENDING)
        )
        entry = RolloutCell(
            name=name,
            index=cell.index,
            phase=phase,
            template_hash=cell.annotations.get(TEMPLATE_HASH_ANNOTATION, ""),
            draining_for_rollout=cell.drain_cause == DrainCause.ROLLING_UPDATE,
            held_for_s=held_for_s(pool, cell, now),
            held_until_s=backoff_end_s(pool, cell) or 0.0,
            abandons=cell.abandon_record.count,
        )
        if rolling and phase is CellPhase.READY and is_stale(entry, current_hash):
            entry = replace(entry, busy=await _busy(workload, name))
        entries.append(entry)
    return plan_rollout(
        RolloutInput(
            cells=tuple(entries),
            current_hash=current_hash,
            desired_replicas=desired,
            rolling_update=rolling,
            workload_reachable=workload is not None,
            max_surge=surge,
            max_unavailable=unavailable,
        )
    )


def updated_condition(plan: RolloutPlan) -> tuple[bool, str, str]:
    """(status, reason, message) of the ``Updated`` condition."""
    return plan.reason == "AllCellsCurrent", plan.reason, plan.message
