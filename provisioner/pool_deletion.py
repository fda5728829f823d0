"""Deleting a GPUCellPool: empty every cell by the pool's drain mode, then let the pool go.

Why this module exists: deletion is its own path through the provisioner, not a special case of
convergence. Once the pool carries a deletionTimestamp nothing is planned or created; every cell
is marked Draining (cause ``PoolDeletion``) and driven one re-checked step at a time by
``drainer.drive_drain``, which empties it by ``autoscaling.drain.mode`` (Evict goes through the
Eviction API, so PodDisruptionBudgets hold it until ``deletion.drainTimeout`` has run from the
deletionTimestamp; ``deletion.policy: Force`` deletes the pods without eviction). Evictions a
PDB refused this pass become ``Progressing=False/EvictionBlocked`` naming the pods. Only when no
cell and no dependent is left does the pool release its workload client and its finalizer.
Every step is idempotent, so a crash mid-deletion is recovered by the next pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellStatus
from provisioner.backends.base import CellBackend, mark_draining, remove_finalizer
from provisioner.drainer import drained_row, drive_drains
from provisioner.events import EventSink, announce_pass
from provisioner.fsm.drain import DrainCause, eviction_hold
from provisioner.fsm.identity import POOL_FINALIZER
from provisioner.kube import KINDS, KubeApi
from provisioner.metrics_port import ProvisionerRecorder
from provisioner.status import PassSummary, conditions, status_patch, write_status
from provisioner.workload import Reachability, WorkloadClients


@dataclass(frozen=True, slots=True)
class DeletionShell:
    """What a deletion pass writes to: the infrastructure cluster, the workload clients it
    releases at the end, and the Events it posts."""

    infra: KubeApi
    clients: WorkloadClients
    events: EventSink


async def delete_pool(
    shell: DeletionShell,
    pool: GPUCellPool,
    backend: CellBackend,
    workload: tuple[KubeApi | None, Reachability],
    now: float,
    recorder: ProvisionerRecorder,
) -> bool:
    """One deletion pass; True once the pool is gone (its finalizer released), False while
    cells are still draining (status and Events written; come back soon)."""
    api, reach = workload
    cells = await backend.list_cells(pool)
    prev = {r.name: r for r in pool.status.cells or []}
    rows: dict[str, CellStatus] = {}
    refused: list[str] = []  # evictions a PodDisruptionBudget refused (drain.mode Evict)
    for cell in cells.values():
        await mark_draining(
            backend.api, backend.outer_kind, cell, str(DrainCause.POOL_DELETION), now
        )
    steps = await drive_drains(pool, list(cells.values()), backend, api, now, recorder)
    for cell in cells.values():
        step = steps[cell.name]
        rows[cell.name] = drained_row(pool, cell, prev.get(cell.name), step, now)
        refused += [f"{pod} (cell {cell.name})" for pod in step.refused]
    deleted = await backend.sweep(pool, set(cells))
    if not cells and not deleted:
        await _release(shell, pool)
        return True
    final = list(rows.values())
    summary = PassSummary(reach, 0, *eviction_hold(tuple(refused), _left_s(pool, now)), 0)
    conds = conditions(pool, final, summary, now)
    written = await write_status(shell.infra, pool, status_patch(pool, final, conds, 0))
    await announce_pass(shell.events, pool, prev, final, written)
    return False


def _left_s(pool: GPUCellPool, now: float) -> float:
    """Seconds left of ``deletion.drainTimeout``, counted from the deletionTimestamp."""
    stamp = pool.metadata.deletion_timestamp
    started = stamp.timestamp() if stamp is not None else now
    return started + pool.spec.deletion.drain_timeout.seconds - now


async def _release(shell: DeletionShell, pool: GPUCellPool) -> None:
    """Every cell is gone: let go of the workload client, then of the pool's finalizer."""
    meta = pool.metadata
    secret = pool.spec.workload_cluster.kubeconfig_secret_ref.name
    await shell.clients.release(meta.namespace, secret, meta.name)
    raw = await shell.infra.get(KINDS["GPUCellPool"], meta.namespace, meta.name)
    if raw is not None:
        await remove_finalizer(shell.infra, KINDS["GPUCellPool"], raw, POOL_FINALIZER)


__all__ = ["DeletionShell", "delete_pool"]
