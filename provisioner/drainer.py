"""Carry out the pure drain decision for one leaving cell, one re-checked step at a time.

Why this module exists: ``fsm.drain.decide_drain`` says what the next step is; somebody has to
observe the cell freshly before each step (Node, cordon, GPU pods, finalizer, outer object),
perform exactly that step and look again. A step never runs on an observation older than the
step before it, so a pod landing on the Node after the cordon still blocks the Node's deletion.
Foreign Nodes (same name, another owner) are treated as absent: never cordoned, never deleted.
Pool deletion empties cells by ``autoscaling.drain.mode`` (Evict goes through the Eviction API,
so PodDisruptionBudgets hold it until ``deletion.drainTimeout``); ``deletion.policy: Force``
deletes the pods without eviction. An eviction the apiserver refused with 429 (a PDB allows no
disruption now) is named in the step's message, so status and Events say what holds the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gpucellpool.api.autoscaling import DrainMode
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import CellStatus
from provisioner.backends.base import (
    DRAIN_STARTED_ANNOTATION,
    CellBackend,
    CellObjects,
    abandon_draining,
)
from provisioner.cells import identity, teardown_row
from provisioner.fsm.drain import (
    DrainAction,
    DrainCause,
    DrainInput,
    DrainStep,
    PodOnNode,
    decide_drain,
)
from provisioner.fsm.identity import CELL_DRAIN_FINALIZER, node_ownership
from provisioner.fsm.observations import parse_time_s
from provisioner.fsm.vocabulary import TEARDOWN_PHASES, CellPhase
from provisioner.kube import HTTP_TOO_MANY, JSON, KINDS, Conflict, KubeApi, KubeError
from provisioner.metrics_port import NULL_RECORDER, ProvisionerRecorder
from provisioner.workload import all_pods_on_node, gpu_pods_on_node

MAX_STEPS_PER_PASS = 6
DRAIN_CONCURRENCY = 8  # leaving cells driven at once in one pass


@dataclass(frozen=True, slots=True)
class DrainPolicy:
    cause: DrainCause
    started_at_s: float
    timeout_s: float | None
    force: bool
    mode: DrainMode


def drain_policy(pool: GPUCellPool, cell: CellObjects, now: float) -> DrainPolicy:
    causes = {str(c) for c in DrainCause}
    cause = DrainCause(cell.drain_cause) if cell.drain_cause in causes else DrainCause.SCALE_DOWN
    started = parse_time_s(cell.annotations.get(DRAIN_STARTED_ANNOTATION)) or now
    if pool.metadata.deletion_timestamp is not None:
        return DrainPolicy(
            DrainCause.POOL_DELETION,
            pool.metadata.deletion_timestamp.timestamp(),
            pool.spec.deletion.drain_timeout.seconds,
            pool.spec.deletion.policy == "Force",
            pool.spec.autoscaling.drain.mode,
        )
    drain = pool.spec.autoscaling.drain
    timeout = drain.timeout.seconds if drain.timeout is not None else None
    return DrainPolicy(cause, started, timeout, False, drain.mode)


def _pod(obj: JSON, uses_gpu: bool) -> PodOnNode:
    meta = obj.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    return PodOnNode(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uses_gpu=uses_gpu,
        daemonset=any(o.get("kind") == "DaemonSet" for o in owners),
        mirror="kubernetes.io/config.mirror" in (meta.get("annotations") or {}),
        terminating=meta.get("deletionTimestamp") is not None,
    )


def _owned(node: JSON | None, pool: GPUCellPool, cell: CellObjects, provider_id: str) -> bool:
    """Labels or the cell's providerID (a CAPI Node the operator had not labelled yet)."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    node_pid = str(((node or {}).get("spec") or {}).get("providerID") or "")
    ours = node_ownership(labels, node_pid, identity(pool), frozenset({cell.uid}), provider_id)
    return ours.owned


async def _observe(
    pool: GPUCellPool,
    cell: CellObjects,
    workload: KubeApi | None,
    policy: DrainPolicy,
    now: float,
    provider_id: str = "",
    pods_deleted: bool = False,
) -> tuple[DrainInput, JSON | None]:
    node: JSON | None = None
    known, allocations = False, 0
    pods: tuple[PodOnNode, ...] = ()
    if workload is not None:
        node = await workload.get(KINDS["Node"], None, cell.name)
        if node is not None and not _owned(node, pool, cell, provider_id):
            node = None  # foreign: never cordoned or deleted
        if node is not None:
            try:
                gpu = await gpu_pods_on_node(workload, cell.name)
                every = await all_pods_on_node(workload, cell.name)
                gpu_names = {p["metadata"]["name"] for p in gpu}
                pods = tuple(_pod(p, p["metadata"]["name"] in gpu_names) for p in every)
                known, allocations = True, len(gpu)
            except KubeError:
                known = False
    inp = DrainInput(
        cause=policy.cause,
        now_s=now,
        started_at_s=policy.started_at_s,
        mode=policy.mode,
        timeout_s=policy.timeout_s,
        force=policy.force,
        workload_reachable=workload is not None,
        node_exists=node is not None,
        node_cordoned=bool(((node or {}).get("spec") or {}).get("unschedulable")),
        allocations_known=known,
        allocations=allocations,
        pods=pods,
        finalizer_present=CELL_DRAIN_FINALIZER in cell.finalizers,
        outer_exists=True,
        outer_deleting=cell.deleting,
        pods_deleted=pods_deleted,
    )
    return inp, node


async def _perform(
    step: DrainStep,
    cell: CellObjects,
    backend: CellBackend,
    workload: KubeApi | None,
    now: float,
    recorder: ProvisionerRecorder,
) -> tuple[str, ...]:
    """Perform one step; returns the pods whose eviction a PodDisruptionBudget refused (429)."""
    action = step.action
    if action is DrainAction.EVICT and workload is not None:
        return await _evict(step, workload, recorder)
    if action is DrainAction.DELETE_PODS and workload is not None:
        for pod in step.delete:
            with contextlib.suppress(KubeError):  # refused or gone: Force does not wait
                await workload.delete(KINDS["Pod"], pod.namespace, pod.name, grace_period_s=0)
    elif action is DrainAction.CORDON and workload is not None:
        await workload.patch(KINDS["Node"], None, cell.name, {"spec": {"unschedulable": True}})
    elif action is DrainAction.ABANDON:
        if workload is not None:
            await workload.patch(KINDS["Node"], None, cell.name, {"spec": {"unschedulable": None}})
        await abandon_draining(backend.api, backend.outer_kind, cell, now)
    elif action is DrainAction.DELETE_NODE and workload is not None:
        await workload.delete(KINDS["Node"], None, cell.name)
    elif action is DrainAction.RELEASE_FINALIZER:
        await backend.release_finalizer(cell)
    elif action is DrainAction.DELETE_OUTER:
        await backend.delete_outer(cell)
    return ()


async def _evict(
    step: DrainStep, workload: KubeApi, recorder: ProvisionerRecorder
) -> tuple[str, ...]:
    refused: list[str] = []
    for pod in step.evict:
        try:
            await workload.evict(pod.namespace, pod.name)
        except KubeError as exc:  # 429 (PDB) or gone: the next pass looks again
            if exc.status == HTTP_TOO_MANY:
                refused.append(f"{pod.namespace}/{pod.name}")
            continue
        recorder.evicted()  # counted only once the Eviction API accepted it
    return tuple(refused)


def _blocked(step: DrainStep, refused: tuple[str, ...]) -> DrainStep:
    """The evict step, its message naming the pods a PodDisruptionBudget kept."""
    if step.action is not DrainAction.EVICT or not refused:
        return step
    note = f"{step.message}; eviction refused by a PodDisruptionBudget: {', '.join(refused)}"
    return dataclasses.replace(step, message=note, refused=refused)


async def drive_drain(
    pool: GPUCellPool,
    cell: CellObjects,
    backend: CellBackend,
    workload: KubeApi | None,
    clock_now: float,
    recorder: ProvisionerRecorder = NULL_RECORDER,
) -> DrainStep:
    """Observe, decide, act; repeat until the cell has to wait. Returns the last step.
    Every eviction the API accepted is counted on ``recorder``."""
    policy = drain_policy(pool, cell, clock_now)
    provider_id = backend.observe(cell, pool.spec.cell.node_ip_from).provider_id
    step = DrainStep(DrainAction.WAIT, CellPhase.DRAINING, "CellDraining", "")
    pods_deleted = False
    refused: tuple[str, ...] = ()
    for _ in range(MAX_STEPS_PER_PASS):
        inp, _node = await _observe(
            pool, cell, workload, policy, clock_now, provider_id, pods_deleted
        )
        step = decide_drain(inp)
        if step.action in (DrainAction.WAIT, DrainAction.DONE):
            return step
        pods_deleted = pods_deleted or step.action is DrainAction.DELETE_PODS
        try:
            refused = await _perform(step, cell, backend, workload, clock_now, recorder)
        except Conflict:
            # Someone (CAPI, KubeSwift) wrote the object meanwhile: re-read, decide again.
            meta = cell.outer["metadata"]
            fresh = await backend.api.get(backend.outer_kind, meta.get("namespace"), cell.name)
            if fresh is None:
                return step
            cell.outer = fresh
            continue
        if step.action in (DrainAction.DELETE_OUTER, DrainAction.ABANDON):
            return step
        if refused:  # a PDB holds this drain: looking again in this pass changes nothing
            return _blocked(step, refused)
    return step


async def drive_drains(
    pool: GPUCellPool,
    cells: Sequence[CellObjects],
    backend: CellBackend,
    workload: KubeApi | None,
    clock_now: float,
    recorder: ProvisionerRecorder = NULL_RECORDER,
) -> dict[str, DrainStep]:
    """``drive_drain`` for every leaving cell, up to ``DRAIN_CONCURRENCY`` at once; the last
    step of each, by cell name. A cell's drain touches only its own Node, pods and outer
    object, so drains are independent: a scale-down of several cells costs a pass about the
    time of one drain, not the sum (the decision-to-execution lag). Each drain still runs its
    steps in order, each on a fresh observation. A drain that raises does not cut the others
    short: all run to their own end, then the first failure is raised (the pass ends as after
    a crash, and the next one starts from fresh reads; every step is idempotent)."""
    gate = asyncio.Semaphore(DRAIN_CONCURRENCY)

    async def one(cell: CellObjects) -> DrainStep:
        async with gate:
            return await drive_drain(pool, cell, backend, workload, clock_now, recorder)

    results = await asyncio.gather(*(one(c) for c in cells), return_exceptions=True)
    steps: dict[str, DrainStep] = {}
    for cell, result in zip(cells, results, strict=True):
        if isinstance(result, BaseException):
            raise result
        steps[cell.name] = result
    return steps


def drained_row(
    pool: GPUCellPool,
    cell: CellObjects,
    previous: CellStatus | None,
    step: DrainStep,
    now: float,
) -> CellStatus:
    """The status row of a leaving cell after this pass's drain steps."""
    phase = step.phase
    if cell.drain_cause == DrainCause.REPLACE_FAILED and pool.metadata.deletion_timestamp is None:
        phase = CellPhase.FAILED  # keep the failure (count, backoff) on the tombstone
    message = step.message + (
        " (Node left behind: workload unreachable)" if step.node_left_behind else ""
    )
    if step.action is DrainAction.ABANDON:  # back in service: the phase it had before
        kept = previous is not None and previous.phase not in TEARDOWN_PHASES
        phase = previous.phase if previous is not None and kept else step.phase
    return teardown_row(previous, cell, phase, str(step.reason), message, now)
