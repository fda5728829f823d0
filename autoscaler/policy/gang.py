"""Gangs: all of a job's pods or none (ProvisioningRequests, check-capacity and atomic scale-up).

Why this module exists: AI jobs arrive as gangs (a PyTorchJob, a JobSet, a Kueue workload).
Scaling for half a gang wastes every GPU it adds, because the job cannot start until its last
member runs. Kueue asks for a gang's capacity through a ProvisioningRequest (autoscaling.x-k8s.io,
docs/concepts.md "Gangs"); this module answers such a request for one pool, purely:

* ``fits_now`` (class ``check-capacity``): every member packs onto the pool's Ready and Booting
  cells (a Booting cell is upcoming capacity), after the capacity already booked by other
  requests;
* ``cells_to_add`` (class ``best-effort-atomic-scale-up``): the new cells the whole gang needs,
  or 0 with a reason when some member fits no fresh cell or the headroom (max replicas, free
  physical GPUs, the in-flight guard, the scale-up rate policies, a known cell shape: what
  ``decide`` will apply, less the cells promised to older requests) is short of the whole
  gang. Never a part of a gang: a plan the loop could only half carry out is no plan.

Packing is ``packing.pack`` (HAMi's per-GPU rules), pool fit is ``fit.fits_fresh_cell``; the
in-flight guard is ``limits.in_flight_limit``, the same bounds ``decide`` applies to a scale-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from autoscaler.policy import limits
from autoscaler.policy.fit import fits_fresh_cell
from autoscaler.policy.packing import pack
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    NodeTemplate,
    Observation,
    PendingPod,
    PolicyMemory,
)

# Reasons (ours; the shell maps them to the ProvisioningRequest's condition reasons)
FITS_NOW = "CapacityAvailable"  # every member packs onto Ready/Booting cells
SCALE_UP = "ScaleUpPlanned"  # cells_to_add new cells hold the whole gang
MEMBER_UNFIT = "MemberFitsNoCell"  # a member fits no fresh cell of this pool
AT_MAX_REPLICAS = "AtMaxReplicas"
INSUFFICIENT_PHYSICAL_GPU = "InsufficientPhysicalGPU"
IN_FLIGHT_LIMIT = "InFlightLimit"
RATE_LIMITED = "RateLimited"  # the scale-up rate policy (behavior.scaleUp) allows fewer now
CELL_SHAPE_UNKNOWN = "CellShapeUnknown"  # decide adds no cell above the floor without a shape
EMPTY_GANG = "EmptyGang"  # no member at all: nothing to provision


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical members, each asking what ``template`` asks (a request's podSet).

    ``template.key`` names the pod set (e.g. ``namespace/podtemplate``); members are keyed
    ``<key>#<i>``. ``template.first_seen`` is ignored for ordering beyond ties.
    """

    template: PendingPod
    count: int


@dataclass(frozen=True, slots=True)
class Headroom:
    """How many cells may be added now, by bound; None means "not a constraint".

    Build it with ``headroom`` from the pool's config and cells, so the bounds are those
    ``decide`` applies.
    """

    max_new_cells: int  # max replicas - Ready and Booting cells
    physical_gpu_cells: int | None = None  # free physical GPUs // GPUs per cell
    in_flight_cells: int | None = None  # in-flight limit - Booting cells (unproven boots only)
    rate_cells: int | None = None  # what the scale-up rate policies allow now
    shape_known: bool = True  # False: ``decide`` adds no cell above minReplicas (no shape)


@dataclass(frozen=True, slots=True)
class GangPlan:
    """One pool's answer to one gang, with a reason and a message saying it with numbers."""

    fits_now: bool
    cells_to_add: int
    reason: str
    message: str
    members: int = 0
    cells_needed: int = 0  # new cells the gang needs, whether or not the headroom allows them
    # No state of this pool's cells could ever hold the gang: a member fits no fresh cell, or
    # the gang alone needs more cells than ``max_replicas`` (only known when it is given)
    permanent: bool = False


def members(pod_sets: Sequence[PodSet]) -> tuple[PendingPod, ...]:
    """Every member of the gang as a pending pod (``<podset key>#<i>``)."""
    return tuple(
        replace(ps.template, key=f"{ps.template.key}#{i}")
        for ps in pod_sets
        for i in range(max(ps.count, 0))
    )


def headroom(
    max_replicas: int,
    cells: Sequence[CellView],
    max_cells_in_flight: int,
    free_physical_gpus: int | None = None,
    gpus_per_cell: int = 1,
    boots_proven: bool = False,
    rate_cells: int | None = None,
    shape_known: bool = True,
) -> Headroom:
    """The bounds ``decide`` puts on a scale-up, for this pool's cells now (``rate_cells``:
    ``limits.rate_allowance`` of the scale-up rules; ``shape_known``: the config's)."""
    count = {s: sum(1 for c in cells if c.state == s) for s in CellState}
    current = count[CellState.READY] + count[CellState.BOOTING]
    limit = limits.in_flight_limit(
        max_cells_in_flight, count[CellState.READY], count[CellState.FAILED], boots_proven
    )
    return Headroom(
        max_new_cells=max(0, max_replicas - current),
        physical_gpu_cells=(
            None if free_physical_gpus is None else free_physical_gpus // max(gpus_per_cell, 1)
        ),
        in_flight_cells=None if limit is None else max(0, limit - count[CellState.BOOTING]),
        rate_cells=rate_cells,
        shape_known=shape_known,
    )


def less(room: Headroom, cells: int) -> Headroom:
    """``room`` once ``cells`` new cells are already promised (booked by older requests, not
    created yet): they count against every bound, as they will when the loop adds them."""

    def minus(bound: int | None) -> int | None:
        return None if bound is None else max(0, bound - cells)

    return replace(
        room,
        max_new_cells=max(0, room.max_new_cells - cells),
        physical_gpu_cells=minus(room.physical_gpu_cells),
        in_flight_cells=minus(room.in_flight_cells),
        rate_cells=minus(room.rate_cells),
    )


def promised_cells(
    cells: Sequence[CellView], booked: Sequence[PendingPod], shape: CellShape
) -> int:
    """How many new cells ``booked`` pods need beyond ``cells`` (``booked_cells`` adds them)."""
    return len(booked_cells(cells, booked, shape)) - len(cells)


def booked_cells(
    cells: Sequence[CellView], booked: Sequence[PendingPod], shape: CellShape
) -> tuple[CellView, ...]:
    """The pool's cells once ``booked`` pods (other requests' capacity) are packed onto them.

    Cells the booked pods need beyond the live ones are included as Booting cells (they are
    promised capacity); the result is what a new gang may use.
    """
    if not booked:
        return tuple(cells)
    packed = pack(booked, cells, shape)
    by_name = {c.name: c for c in cells}
    out: list[CellView] = [c for c in cells if c.name not in packed.usage]
    for i, (name, usage) in enumerate(packed.usage.items()):
        old = by_name.get(name)
        if old is None:
            out.append(CellView(name, -1 - i, CellState.READY, 0.0, gpus=usage))
        else:
            out.append(replace(old, state=CellState.READY, gpus=usage))
    return tuple(out)


def _unfit(gang: Sequence[PodSet], shape: CellShape, template: NodeTemplate) -> str | None:
    for ps in gang:
        if ps.count <= 0:
            continue
        result = fits_fresh_cell(ps.template, shape, template)
        if not result.ok:
            return f"pod set {ps.template.key}: {result.reason}: {result.message}"
    return None


def _short(needed: int, room: Headroom) -> tuple[str, str] | None:
    """The first bound that cannot hold ``needed`` new cells, as (reason, detail)."""
    bounds = (
        (CELL_SHAPE_UNKNOWN, None if room.shape_known else 0, "no cell shape is known: it allows"),
        (AT_MAX_REPLICAS, room.max_new_cells, "max replicas leave"),
        (INSUFFICIENT_PHYSICAL_GPU, room.physical_gpu_cells, "free physical GPUs allow"),
        (IN_FLIGHT_LIMIT, room.in_flight_cells, "the in-flight limit (unproven boots) allows"),
        (RATE_LIMITED, room.rate_cells, "the scale-up rate policy allows"),
    )
    for reason, allowed, what in bounds:
        if allowed is not None and allowed < needed:
            return reason, f"{what} {allowed} new cell(s)"
    return None


def plan_gang(
    gang: Sequence[PodSet],
    cells: Sequence[CellView],
    shape: CellShape,
    template: NodeTemplate,
    room: Headroom,
    booked: Sequence[PendingPod] = (),
    max_replicas: int | None = None,
) -> GangPlan:
    """Whether the gang fits the pool now, else how many cells hold all of it (or why none).

    ``cells`` are the pool's cells (Ready and Booting ones count; Draining and Failed do not);
    ``booked`` are members of other requests whose capacity is already promised. With
    ``max_replicas`` a short plan says whether waiting could ever help (``permanent``).
    """
    pods = members(gang)
    if not pods:
        return GangPlan(True, 0, EMPTY_GANG, "the request has no members", 0, 0)
    unfit = _unfit(gang, shape, template)
    if unfit is not None:
        return GangPlan(False, 0, MEMBER_UNFIT, unfit, len(pods), 0, permanent=True)
    available = booked_cells(cells, booked, shape)
    packed = pack(pods, available, shape)
    needed = packed.new_cells
    if needed == 0 and not packed.unplaced:
        msg = f"all {len(pods)} member(s) fit the pool's Ready and Booting cells"
        return GangPlan(True, 0, FITS_NOW, msg, len(pods), 0)
    short = _short(needed, room)
    if short is not None:
        reason, detail = short
        msg = f"{len(pods)} member(s) need {needed} new cell(s) but {detail}; adding none"
        alone = pack(pods, (), shape).new_cells if max_replicas is not None else 0
        if max_replicas is not None and alone > max_replicas:
            reason = AT_MAX_REPLICAS
            msg = (
                f"{len(pods)} member(s) need {alone} cell(s) even on an empty pool; "
                f"max replicas is {max_replicas}; adding none"
            )
            return GangPlan(False, 0, reason, msg, len(pods), needed, permanent=True)
        return GangPlan(False, 0, reason, msg, len(pods), needed)
    msg = f"{len(pods)} member(s) need {needed} new cell(s), added together"
    return GangPlan(False, needed, SCALE_UP, msg, len(pods), needed)


def plan_on_pool(
    gang: Sequence[PodSet],
    observation: Observation,
    memory: PolicyMemory,
    config: PolicyConfig,
    booked: Sequence[PendingPod],
    now: float,
) -> GangPlan:
    """``plan_gang`` on one pool as its decision sees it, within every bound ``decide`` will
    apply to the scale-up (max replicas, in-flight guard, free physical GPUs, the rate policies,
    a known shape) less the cells promised to the requests ``booked`` before this one.

    The one way to plan a gang: the live controller and the simulator both call it, so an
    atomic scale-up means the same in both worlds."""
    cells, shape = observation.cells, config.shape
    current = sum(1 for c in cells if c.state in (CellState.READY, CellState.BOOTING))
    room = headroom(
        config.max_replicas,
        cells,
        config.max_cells_in_flight,
        observation.free_physical_gpus,
        shape.gpus,
        memory.boots_proven,
        limits.rate_allowance(config.scale_up, memory.scale_events, now, current, +1),
        config.shape_known,
    )
    room = less(room, promised_cells(cells, booked, shape))
    return plan_gang(gang, cells, shape, config.node_template, room, booked, config.max_replicas)
