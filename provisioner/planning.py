"""Inputs of membership planning gathered from live state: the join template and the rows.

Why this module exists: ``plan_membership`` is pure, but what it is fed is assembled from three
places - live outer objects (including those marked Draining), this pass's state-machine rows,
and the previous status (tombstones carry failure counts and backoff across restarts). The join
template is read here too: it decides the bootstrap Secret's content, the template hash and
whether any cell may be created at all (an unknown token stalls creation with
``BootstrapTemplateInvalid`` instead of shipping a half-rendered join script).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
from dataclasses import dataclass, field

from gpucellpool.api.conditions import ConditionType
from gpucellpool.api.pool import GPUCellPool
from gpucellpool.api.status import PRE_GPU_PHASES, CellPhase, CellStatus
from provisioner.backends.base import CellObjects
from provisioner.cells import identity
from provisioner.drain_holds import drain_timeout_s, leaving
from provisioner.events import EventSink
from provisioner.fsm.bootstrap import RenderError, RenderInputs, render_template
from provisioner.fsm.drain import DrainCause
from provisioner.fsm.drain_backoff import held_until_s
from provisioner.fsm.events import PoolEvent
from provisioner.fsm.identity import RELEASE_GUARD_ANNOTATION
from provisioner.fsm.membership import (
    MembershipInput,
    MembershipLimits,
    MembershipPlan,
    plan_membership,
    release_guard_requested,
    release_guard_used,
)
from provisioner.fsm.plan_check import Bounds, CellFact, CheckedPlan, Plan, check_plan
from provisioner.fsm.rows import failure_history, member_row, tombstone
from provisioner.fsm.vocabulary import StallReason
from provisioner.kube import KINDS, KubeApi
from provisioner.workload import gpu_pods_on_node

DIGEST_HEX_CHARS = 16


@dataclass(frozen=True, slots=True)
class JoinTemplate:
    """The user's join template (None when Cluster API owns bootstrap) or why it is unusable.

    ``digest``: a hash of the template bytes (part of the template hash; never the content).
    """

    text: str | None
    error: str = ""
    digest: str = ""


async def read_join_template(api: KubeApi, pool: GPUCellPool) -> JoinTemplate:
    boot = pool.spec.bootstrap
    if boot is None or boot.join_secret_ref is None:
        return JoinTemplate(None)
    name, key = boot.join_secret_ref.name, boot.join_secret_key
    secret = await api.get(KINDS["Secret"], pool.metadata.namespace, name)
    raw = ((secret or {}).get("data") or {}).get(key)
    if raw is None:
        return JoinTemplate(None, error=f"join Secret {name} has no key {key!r}")
    try:
        data = base64.b64decode(raw)
        text = data.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return JoinTemplate(None, error=f"join Secret {name} key {key!r} is not UTF-8 text")
    return JoinTemplate(text, digest=hashlib.sha256(data).hexdigest()[:DIGEST_HEX_CHARS])


def render_inputs(pool: GPUCellPool, index: int) -> RenderInputs:
    node = pool.spec.workload_cluster.node
    return RenderInputs(
        pool=identity(pool),
        index=index,
        node_labels=(node.labels if node else None) or {},
        node_ip_interface=pool.spec.cell.node_ip_from,
        expected_gpus=pool.spec.expected_devices_per_cell(),
    )


def render(pool: GPUCellPool, join: JoinTemplate, index: int) -> str | RenderError | None:
    """The rendered join script of one cell; None when there is no template to render."""
    if join.text is None:
        return None
    return render_template(join.text, render_inputs(pool, index))


@dataclass(frozen=True, slots=True)
class PlanInput:
    pool: GPUCellPool
    cells: dict[str, CellObjects]
    rows: dict[str, CellStatus]
    previous: dict[str, CellStatus]
    desired: int
    current_hash: str
    join: JoinTemplate
    reachable: bool
    now: float
    limits: MembershipLimits = field(default_factory=MembershipLimits)
    creation_adjustment: int = 0
    free_gpus: int | None = None
    victims: tuple[str, ...] = ()
    checked: CheckedPlan | None = None


def decision_victims(pool: GPUCellPool, desired: int) -> tuple[str, ...]:
    """The autoscaler's scale-down choice, when the published decision is the one in force
    (acted on, and its target is the desired size being converged to)."""
    last = pool.status.last_decision
    if last is None or not last.act or last.desired_replicas != desired:
        return ()
    return tuple(last.victims or ())


def published_plan(pool: GPUCellPool) -> Plan:
    """The autoscaler's plan in force: ``status.desiredReplicas``, the victims of the decision
    that set it (and which of them it chose while they ran no pod), and the spec
    generation that decision saw (its ScalingActive condition)."""
    target = pool.status.desired_replicas
    active = pool.status.condition(ConditionType.SCALING_ACTIVE)
    generation = active.observed_generation if active is not None else None
    victims = decision_victims(pool, target)
    last = pool.status.last_decision
    marked = set(last.empty_victims or ()) if last is not None and victims else set()
    return Plan(target, victims, generation, tuple(v for v in victims if v in marked))


async def victims_running_pods(
    pool: GPUCellPool,
    cells: dict[str, CellObjects],
    rows: dict[str, CellStatus],
    workload: KubeApi | None,
) -> frozenset[str]:
    """The plan's victims chosen while they ran no pod that run a GPU pod now (the pods
    bound to their Nodes, from the workload cluster's cache): the check keeps them
    (``VictimInUse``). Only those victims are read, and only while they are still live; an
    unreachable cluster reads none (a leaving cell's drain pauses there anyway)."""
    plan = published_plan(pool) if pool.spec.autoscaling.enabled else None
    if workload is None or plan is None or not plan.empty_victims:
        return frozenset()
    running = set()
    for name in plan.empty_victims:
        cell, row = cells.get(name), rows.get(name)
        if cell is None or leaving(cell, row):
            continue
        node = (row.node_name if row is not None else None) or name
        if await gpu_pods_on_node(workload, node):
            running.add(name)
    return frozenset(running)


def cell_facts(
    pool: GPUCellPool,
    cells: dict[str, CellObjects],
    rows: dict[str, CellStatus],
    running: frozenset[str] = frozenset(),
) -> tuple[CellFact, ...]:
    """Each outer object as ``plan_check`` needs it: live, drain back-off, GPU taken yet, and
    whether it is one of the ``running`` victims (``victims_running_pods``)."""
    timeout = drain_timeout_s(pool)
    facts = []
    for name, cell in cells.items():
        row = rows.get(name)
        phase = row.phase if row is not None else None
        held = held_until_s(cell.abandon_record, timeout)
        live = not leaving(cell, row)
        facts.append(CellFact(name, live, held, phase in PRE_GPU_PHASES, name in running))
    return tuple(facts)


def check_pool_plan(
    pool: GPUCellPool,
    cells: dict[str, CellObjects],
    rows: dict[str, CellStatus],
    free_gpus: int | None,
    now: float,
    running: frozenset[str] = frozenset(),
) -> CheckedPlan | None:
    """The published plan checked against this pass's state; None for a pool the autoscaler
    does not drive (membership's own rules serve it). ``running``: ``victims_running_pods``."""
    if not pool.spec.autoscaling.enabled:
        return None
    bounds = Bounds(
        floor=pool.desired_floor(),
        ceiling=pool.desired_ceiling(),
        generation=pool.metadata.generation,
        free_gpus=free_gpus,
        gpus_per_cell=pool.spec.cell.gpu.count,
    )
    return check_plan(published_plan(pool), cell_facts(pool, cells, rows, running), bounds, now)


def _template_error(inp: PlanInput) -> str:
    if inp.join.error:
        return inp.join.error
    rendered = render(inp.pool, inp.join, 0)
    return rendered.message if isinstance(rendered, RenderError) else ""


def plan(inp: PlanInput) -> MembershipPlan:
    """Membership over live cells (drain-marked ones count as Draining) and tombstones."""
    members = []
    for name, cell in inp.cells.items():
        fallback = CellStatus(name=name, index=cell.index, phase=CellPhase.DRAINING)
        row = inp.rows.get(name) or inp.previous.get(name) or fallback
        if cell.drain_cause:
            row = row.model_copy(update={"phase": CellPhase.DRAINING})
        member = member_row(row, True, inp.current_hash)
        replacing = cell.drain_cause == DrainCause.REPLACE_FAILED
        members.append(dataclasses.replace(member, replacing=replacing))
    for name, old in inp.previous.items():
        if name not in inp.cells and (kept := tombstone(old)) is not None:
            members.append(member_row(kept, False, inp.current_hash))
    all_rows = [*inp.rows.values(), *(r for n, r in inp.previous.items() if n not in inp.rows)]
    result = plan_membership(
        MembershipInput(
            pool_name=inp.pool.metadata.name,
            desired_replicas=inp.desired,
            rows=tuple(members),
            history=failure_history(all_rows),
            now_s=inp.now,
            workload_reachable=inp.reachable,
            limits=inp.limits,
            creation_adjustment=inp.creation_adjustment,
            free_physical_gpus=inp.free_gpus,
            victims=inp.victims,
            plan=inp.checked,
            gpus_per_cell=inp.pool.spec.cell.gpu.count,
            pool_ever_ready=any(r.ready_once for r in all_rows),
            release_guard=release_guard_requested(inp.pool.metadata.annotations),
        )
    )
    error = _template_error(inp)
    if error and result.create:
        return MembershipPlan(
            replace=result.replace,
            remove=result.remove,
            stall=StallReason.BOOTSTRAP_TEMPLATE_INVALID,
            stall_message=error,
        )
    return result


async def spend_release_guard(
    api: KubeApi,
    events: EventSink,
    pool: GPUCellPool,
    cells: dict[str, CellObjects],
    plan_: MembershipPlan,
) -> None:
    """Remove the release-guard annotation once cells were created under it (one wave per
    annotation; ``fsm.membership.release_guard_used``), and say so in an Event."""
    requested = release_guard_requested(pool.metadata.annotations)
    replacing = any(c.drain_cause == DrainCause.REPLACE_FAILED for c in cells.values())
    if not release_guard_used(requested, plan_, replacing):
        return
    meta = pool.metadata
    patch = {"metadata": {"annotations": {RELEASE_GUARD_ANNOTATION: None}}}
    await api.patch(KINDS["GPUCellPool"], meta.namespace, meta.name, patch)
    names = ", ".join(c.name for c in plan_.create)
    note = f"release-guard used: created {names} past the guards; annotation removed"
    await events.emit(pool, PoolEvent("ReleaseGuardUsed", note, action="Create"))


def membership_limits(pool: GPUCellPool, base: MembershipLimits) -> MembershipLimits:
    """The churn limits for this pool: an autoscaled pool's in-flight cap is its own
    ``spec.autoscaling.maxCellsInFlight``, lifted once a Ready cell proves boots work (the
    rule the policy plans with), so the provisioner never throttles a scale-up the
    autoscaler sized; other pools keep ``base``."""
    if not pool.spec.autoscaling.enabled:
        return base
    return dataclasses.replace(
        base,
        max_in_flight=pool.spec.autoscaling.max_cells_in_flight,
        lift_in_flight_when_proven=True,
    )
