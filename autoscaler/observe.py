"""Build the policy's ``Observation`` of one pool from cached workload objects (pure).

Why this module exists: ``decide`` speaks in plain values; the caches hold raw manifests. This
module is the translation, kept free of I/O and clocks so the loop's unit tests and the live
loop build observations identically:

* pending pods: ``autoscaler.policy.pool_demand`` (which pods a pool counts; its functions are
  re-exported here for the loop, the router and the gang controller);
* cells: the pool's status rows (the provisioner's truth about lifecycle) joined with the
  workload Nodes; per-GPU usage of Ready cells from the ``hami.io/vgpu-devices-allocated``
  annotation of the pods bound to the Node (hami-facts §2.2, HAMi's own source of truth), or
  from Prometheus when the pool configures it. A Ready cell whose usage is unknown makes the
  metrics unfresh: unknown never reads as zero.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.pool_demand import metadata
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUUsage,
    MetricsHealth,
    Observation,
    PendingPod,
)
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import PRE_GPU_PHASES, CellPhase, PlanStep

JSON = dict[str, Any]
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
_TERMINAL = ("Succeeded", "Failed")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_BOOTING = {
    CellPhase.PENDING,
    CellPhase.ALLOCATING_GPU,
    CellPhase.GUEST_PROVISIONING,
    CellPhase.BOOTING,
    CellPhase.JOINING,
    CellPhase.AWAITING_GPU_CAPACITY,
}


def _plan_entries(plan: str) -> list[tuple[str, int, int]]:
    """``UUID,NVIDIA,mem,cores:...;`` -> one (uuid, mem MiB, cores) per container device."""
    entries = []
    for container in plan.split(";"):
        for device in container.split(":"):
            fields = device.strip().split(",")
            if len(fields) < 4 or not fields[0]:
                continue
            try:
                entries.append((fields[0], int(fields[2]), int(fields[3])))
            except ValueError:
                continue
    return entries


def usage_from_pods(pods: Iterable[Mapping[str, Any]], gpus: int) -> tuple[GPUUsage, ...]:
    """Per-GPU usage of one node from its running pods' HAMi allocation annotations.

    Each container device entry takes one slot, as HAMi counts them. GPUs are ordered
    busiest first; GPUs no pod is allocated on are empty (a GPU with no allocation really is
    empty: the annotation is HAMi's source of truth).
    """
    per_gpu: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pod in pods:
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        if (status or {}).get("phase") in _TERMINAL:
            continue
        plan = (metadata(pod).get("annotations") or {}).get(ALLOCATED_ANNOTATION)
        for uuid, mem, cores in _plan_entries(str(plan or "")):
            entry = per_gpu[uuid]
            entry[0] += mem
            entry[1] += cores
            entry[2] += 1
    used = sorted(per_gpu.values(), key=lambda e: (-e[0], -e[1]))
    usages = [GPUUsage(m, c, s) for m, c, s in used[:gpus]]
    return tuple(usages + [GPUUsage()] * (gpus - len(usages)))


def pods_by_node(pods: Iterable[JSON]) -> dict[str, list[JSON]]:
    out: dict[str, list[JSON]] = defaultdict(list)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            out[str(node)].append(pod)
    return out


@dataclass(frozen=True, slots=True)
class CellInputs:
    """What ``cells_for_pool`` needs besides the pool."""

    shape: CellShape
    nodes: Mapping[str, JSON]
    node_pods: Mapping[str, Sequence[JSON]]
    prometheus_usage: Mapping[str, tuple[GPUUsage, ...]] | None = None  # None: not configured
    prometheus_asked: frozenset[str] | None = None
    """The Nodes Prometheus was asked about (``nodes_to_read``); None: every Node."""
    claim_usage: Mapping[str, tuple[GPUUsage, ...]] | None = None
    """HAMi DRA mode: per Node, what its allocated ResourceClaims hold (``claim_inputs``), read
    instead of the pods' allocation annotations; None: device-plugin mode."""
    superseded: frozenset[str] = frozenset()
    """Nodes whose pods changed after Prometheus's oldest sample (``usage_freshness``): their
    annotations alone are the allocation."""


def _state(phase: CellPhase) -> CellState:
    if phase is CellPhase.READY:
        return CellState.READY
    if phase in (CellPhase.DRAINING, CellPhase.DELETING):
        return CellState.DRAINING
    if phase in _BOOTING:
        return CellState.BOOTING
    return CellState.FAILED


def _busiest_first(gpus: Iterable[GPUUsage]) -> list[GPUUsage]:
    return sorted(gpus, key=lambda g: (-g.memory_mib, -g.cores_percent, -g.slots))


def raised(annotated: Sequence[GPUUsage], reported: Sequence[GPUUsage]) -> tuple[GPUUsage, ...]:
    """GPU by GPU (both busiest first), the larger of two readings of one cell's allocation."""
    a, b = _busiest_first(annotated), _busiest_first(reported)
    width = max(len(a), len(b))
    a += [GPUUsage()] * (width - len(a))
    b += [GPUUsage()] * (width - len(b))
    return tuple(
        GPUUsage(
            max(x.memory_mib, y.memory_mib),
            max(x.cores_percent, y.cores_percent),
            max(x.slots, y.slots),
        )
        for x, y in zip(a, b, strict=True)
    )


# A memo, not state (like ``sharing._RIVALS``): per Node name, the pods tuple last read and
# the usage its annotations give. The pod index (``pod_index.PodIndexer``) hands out the same
# tuple for a Node until one of its pods changes, so ``is`` tells whether the memo is current;
# without it every decision of every pool re-parsed the annotations of all its cells' pods.
_USAGE: dict[str, tuple[Sequence[JSON], int, tuple[GPUUsage, ...]]] = {}
_USAGE_LIMIT = 100_000


def annotated_usage(node_name: str, pods: Sequence[JSON], gpus: int) -> tuple[GPUUsage, ...]:
    """``usage_from_pods``, remembered per Node while its pods are the same tuple."""
    if not isinstance(pods, tuple):  # a list may change in place: not remembered
        return usage_from_pods(pods, gpus)
    memo = _USAGE.get(node_name)
    if memo is not None and memo[0] is pods and memo[1] == gpus:
        return memo[2]
    if len(_USAGE) >= _USAGE_LIMIT:  # Node names of many clusters over a long life
        _USAGE.clear()
    usage = usage_from_pods(pods, gpus)
    _USAGE[node_name] = (pods, gpus, usage)
    return usage


def _serves_gpu_pods(node_name: str, pods: Sequence[JSON], inputs: CellInputs) -> bool:
    """Whether HAMi has placed GPU pods on a cell's Node (its allocation annotations, or in DRA
    mode its claims): the cell serves, whatever its row's boot phase says.

    HAMi binds pods to a Node once it is Ready with devices, a moment (1-2 s on a loaded
    machine) before the provisioner's pass writes the row's Ready phase. Read as Booting, such
    a cell looked empty (a Booting cell's usage is not read), so the hedge took it for a spare
    and cancelled boots the simulator keeps: its cells run pods only once Ready
    (tests/e2e/test_fidelity.py). DaemonSet pods carry no GPU allocation and do not count.
    """
    if node_name not in inputs.nodes:
        return False
    if inputs.claim_usage is not None:
        usage = inputs.claim_usage.get(node_name) or ()
    else:
        usage = annotated_usage(node_name, pods, inputs.shape.gpus)
    return any(g.slots for g in usage)


def ready_cell_usage(
    node_name: str, pods: Sequence[JSON], inputs: CellInputs
) -> tuple[tuple[GPUUsage, ...], bool]:
    """A Ready cell's allocation, and whether it is known.

    The pods' HAMi annotations are the allocation (HAMi's own record, as current as the pod
    watch); Prometheus cross-checks it: a GPU it reports busier (allocations the pod cache
    cannot see) is taken at its figure. The usage is unknown when neither source has the
    Node, or when Prometheus was asked for the Node's series and has none (the staleness that
    freezes scale-down). A cell Prometheus was not asked about (Ready for less than
    ``staleAfter``) is known from its annotations: it packs as the busy cell it is, never as
    an empty one.
    """
    gpus = inputs.shape.gpus
    annotated = annotated_usage(node_name, pods, gpus) if node_name in inputs.nodes else None
    if inputs.claim_usage is not None and annotated is not None:
        annotated = inputs.claim_usage.get(node_name) or (GPUUsage(),) * inputs.shape.gpus
    if inputs.prometheus_usage is None:
        return annotated or (), annotated is not None
    reported = inputs.prometheus_usage.get(node_name)
    asked = inputs.prometheus_asked is None or node_name in inputs.prometheus_asked
    if annotated is None:
        return reported or (), reported is not None
    if reported is None:
        return annotated, not asked
    if node_name in inputs.superseded:  # Prometheus has not sampled the pods' change yet
        return annotated, True
    return raised(annotated, reported), True


def is_workload_pod(pod: JSON) -> bool:
    """Whether a pod bound to a cell's Node counts as running on the cell: not finished, and
    not a DaemonSet or mirror (static) pod.

    Every cell runs DaemonSet pods: HAMi's device plugin (hami-facts: its DaemonSet serves each
    Node labelled ``gpu=on``), and in most clusters a CNI agent and kube-proxy. Counted, they
    made no cell ever empty: the warm spare and ``headroomCells`` were never met (a scale-up
    per decision up to ``maxReplicas``), spare boots were never taken for spares, and empty
    victims were never marked. Cluster Autoscaler judges an empty node the same way
    (DaemonSet and mirror pods do not count); the drainer never evicts them either
    (``provisioner.fsm.drain``).
    """
    if (pod.get("status") or {}).get("phase") in _TERMINAL:
        return False
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False
    return not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or ())


def live_cell_names(pool: GPUCellPool) -> list[str]:
    """The pool's Ready and Booting cells by their status rows (what scale-downs remove)."""
    live = (CellState.READY, CellState.BOOTING)
    return [row.name for row in pool.status.cells or [] if _state(row.phase) in live]


def cell_nodes(pool: GPUCellPool, nodes: Collection[str]) -> frozenset[str]:
    """The Nodes of the pool's cells (by their status rows) that exist among ``nodes``."""
    return frozenset(
        n for n in (r.node_name or r.name for r in pool.status.cells or []) if n in nodes
    )


def cells_for_pool(
    pool: GPUCellPool, inputs: CellInputs, now: float
) -> tuple[tuple[CellView, ...], list[str]]:
    """Cell views from status rows + Nodes, and the names of Ready cells with unknown usage."""
    views: list[CellView] = []
    unknown: list[str] = []
    for row in pool.status.cells or []:
        state = _state(row.phase)
        since = row.last_transition_time.timestamp() if row.last_transition_time else now
        # a Booting cell's age is its creation's, not its last boot phase's (the hedge keeps
        # the boots that have run longest); rows written before creationTime: the phase's
        created = row.creation_time.timestamp() if row.creation_time else since
        node_name = row.node_name or row.name
        bound = inputs.node_pods.get(node_name, ())
        pods = [p for p in bound if is_workload_pod(p)]
        if state is CellState.BOOTING and pods and _serves_gpu_pods(node_name, bound, inputs):
            state = CellState.READY
        gpus: tuple[GPUUsage, ...] = ()
        if state is CellState.READY:  # (the usage skips terminal pods itself)
            gpus, known = ready_cell_usage(node_name, bound, inputs)
            if not known:
                unknown.append(row.name)
        elif state is CellState.DRAINING and node_name in inputs.nodes:
            # What its pods still hold: in Evict mode they are re-homed before their eviction
            # (decide._displaced), as the simulator sees its draining cells. Unknown here
            # freezes nothing: the cell is leaving either way.
            gpus = ready_cell_usage(node_name, bound, inputs)[0]
        views.append(
            CellView(
                name=row.name,
                index=row.index,
                state=state,
                created_at=created,
                gpus=gpus,
                pods=len(pods),
                evictable_pods=len(pods),
                ready_at=since if state is CellState.READY else None,
            )
        )
    return tuple(views), unknown


def with_requested(
    cells: tuple[CellView, ...],
    requested: int,
    since: float,
    victims: Collection[str] = (),
) -> tuple[CellView, ...]:
    """Cells as the provisioner will have them once it has caught up with ``requested``.

    Above the live count: Booting placeholders for cells asked for but not created yet. Below
    it: the victims of the scale-down in force (``victims``, ours) already count as Draining.
    Without this the policy would see the count before its own last decision until the
    provisioner writes its rows, and publish that count (a scale-up undone by a cooldown; a
    scale-down undone by a "hold" while a victim's metrics blink out as it is cordoned).
    """
    live = sum(1 for c in cells if c.state in (CellState.READY, CellState.BOOTING))
    if requested < live and victims:
        leaving = _leaving(cells, live - requested, victims)
        return tuple(
            replace(c, state=CellState.DRAINING) if c.name in leaving else c for c in cells
        )
    top = max((c.index for c in cells), default=-1)
    extra = tuple(
        CellView(f"requested-{i}", top + 1 + i, CellState.BOOTING, since)
        for i in range(max(0, requested - live))
    )
    return cells + extra


def _leaving(cells: Iterable[CellView], excess: int, victims: Collection[str]) -> set[str]:
    """The first ``excess`` victims (in the decision's order) that are still live."""
    live = {c.name for c in cells if c.state in (CellState.READY, CellState.BOOTING)}
    return set([name for name in victims if name in live][:excess])


def utilisation(cells: Iterable[CellView], shape: CellShape) -> float | None:
    """Mean over the Ready cells' GPUs of max(memory, cores, slots) allocated; None if none."""
    ratios = [
        max(
            g.memory_mib / shape.memory_mib,
            g.cores_percent / shape.cores_percent,
            g.slots / shape.slots,
        )
        for c in cells
        if c.state is CellState.READY
        for g in c.gpus
    ]
    return sum(ratios) / len(ratios) if ratios else None


def free_gpus_for_new_cells(
    pool: GPUCellPool, cells: Iterable[CellView], gpus_per_cell: int
) -> int | None:
    """Free physical GPUs left for cells beyond ``cells`` (the pool's live ones and the
    placeholders ``with_requested`` added); None when unknown (no bound).

    The count is the provisioner's last ledger reading, ``status.physicalCapacity
    .freeGPUsInCluster``, read from the cached pool object (no request of its own): the same
    source the provisioner creates cells against. The ledger still counts as free the GPUs of
    this pool's cells that have not taken theirs yet (rows in a pre-GPU phase, written with that
    reading) and of cells asked for but not created (placeholders): both already count in the
    policy's current size, so their GPUs are taken off here, as the provisioner does.
    """
    physical = pool.status.physical_capacity
    free = physical.free_gpus_in_cluster if physical is not None else None
    if free is None:
        return None
    rows = {row.name: row.phase for row in pool.status.cells or []}
    waiting = sum(1 for phase in rows.values() if phase in PRE_GPU_PHASES)
    requested = sum(1 for c in cells if c.name not in rows and c.state is CellState.BOOTING)
    return max(free - max(gpus_per_cell, 1) * (waiting + requested), 0)


def refused_victims(pool: GPUCellPool) -> frozenset[str]:
    """The victims the provisioner rejected on its last check of our plan
    (``status.planRejections``, step Remove): not in force, and not chosen again meanwhile."""
    rows = pool.status.plan_rejections or []
    return frozenset(r.cell for r in rows if r.step is PlanStep.REMOVE and r.cell)


def plan_feedback(last: Decision | None, before: JSON, after: JSON) -> bool:
    """Whether a status update is the provisioner's answer to our plan, worth a decision now
    rather than at the next resync: its plan rejections changed, or a pool held by the physical
    bound got more free GPUs (a new ledger reading)."""
    if before.get("planRejections") != after.get("planRejections"):
        return True
    if last is None or last.reason is not Reason.INSUFFICIENT_PHYSICAL_GPU:
        return False
    old, new = _ledger_free(before), _ledger_free(after)
    return new is not None and (old is None or new > old)


def _ledger_free(raw_status: JSON) -> int | None:
    physical = raw_status.get("physicalCapacity")
    free = physical.get("freeGPUsInCluster") if isinstance(physical, Mapping) else None
    return free if isinstance(free, int) else None


def observation(
    pending: tuple[PendingPod, ...],
    cells: tuple[CellView, ...],
    unknown_usage: Sequence[str],
    metrics: MetricsHealth,
    reachable: bool,
    free_physical_gpus: int | None = None,
) -> Observation:
    """The snapshot; any Ready cell with unknown usage makes the metrics unfresh.
    ``free_physical_gpus``: ``free_gpus_for_new_cells`` (None: unknown, no bound)."""
    if unknown_usage and metrics.fresh:
        metrics = MetricsHealth(
            False, metrics.age_seconds, f"usage unknown for {', '.join(unknown_usage)}"
        )
    return Observation(pending, cells, metrics, free_physical_gpus, reachable)


def nodes_to_read(
    pool: GPUCellPool, node_names: Iterable[str], now: float, grace_s: float
) -> list[str]:
    """The cell Nodes whose HAMi series must be in Prometheus: Ready cells with a Node, Ready
    for at least ``grace_s`` (the pool's ``staleAfter``). A booting cell has no series yet, a
    draining one loses them as its Node goes, and a cell Ready for less than ``staleAfter`` may
    simply not have been scraped yet: none of those can be stale, so none of them may freeze
    scale-down. Their allocation still comes from the pods' HAMi annotations."""
    present = set(node_names)
    names = []
    for cell in pool.status.cells or []:
        name = cell.node_name or cell.name
        since = cell.last_transition_time
        settled = since is None or now - since.timestamp() >= grace_s  # unknown: read it
        if cell.phase is CellPhase.READY and name in present and settled:
            names.append(name)
    return names
