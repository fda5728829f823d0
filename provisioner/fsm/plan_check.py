"""Check the autoscaler's plan against fresh state: accept or reject each step, with a reason.

Why this module exists: ``decide`` makes the whole plan (target, victims in drain order, every
bound applied: max, in-flight, rates, budgets, physical GPUs). The provisioner must not decide
again - no re-ordering of victims, no stand-in for one it cannot drain - but the state it acts
on is newer than the state the plan was made from, so it re-validates each step first, like
Karpenter re-validates a disruption command before executing it and Cluster Autoscaler's
actuator re-checks its planner's choice (autoscaler-anchors):

* Target: kept when inside the spec's bounds (minReplicas..maxReplicas); otherwise clamped and
  rejected as ``StaleGeneration`` (the plan was made for an older spec) or ``TargetOutOfBounds``.
* Remove, per victim in the plan's order: nothing to do when it is already leaving (or gone once
  the pool is down to the target, or the plan's other victims cover what is left: the step is
  done); ``VictimGone`` when it no longer exists while the pool is still above the target by
  more than the remaining victims (no other cell stands in: the next plan chooses);
  ``VictimInDrainBackoff`` while a drain of it was abandoned recently (``fsm.drain_backoff``):
  its slot is not filled by another cell, the scale-down waits. Every other live cell in drain
  back-off is reported the same way while it lasts (a standing refusal): otherwise the next plan,
  which leaves the refused victim out, would clear the row, the plan after would choose it again
  and the pool's target would flap with a status write each way until the back-off ends.
  ``VictimInUse`` when the plan chose the victim while it ran no pod (a cancelled boot, an
  unused spare, an empty idle cell: ``Plan.empty_victims``) and a pod runs on it by now:
  between the decision and this pass its boot ended, or a pod arrived, and the scheduler bound
  the pod to it. Removing it would strand that pod on a Draining cell (or, for a boot, on a VM
  being deleted; in Evict mode, evict it) while the pool drops below its demand; it is kept,
  its slot is not filled by another cell, and the next plan decides again with the cell busy
  (as Karpenter drops a disruption command whose candidate is no longer empty, and Cluster
  Autoscaler re-checks an empty node before deleting it).
* Create: the cells the plan adds beyond the live ones must fit the free physical GPUs (less the
  GPUs of this pool's cells that have not taken theirs yet); the excess is ``PhysicalGPUExceeded``.

The rejections are published (``status.planRejections``) so the next decision sees them; what
was accepted is executed by one rule (``fsm.plan_execute``), live by membership and in the
simulator by its actuator. Pools without autoscaling have
no plan: membership serves them as before.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpucellpool.api.status import PlanStep


class Rejection(enum.StrEnum):
    """Why a step of the plan is not carried out as planned."""

    VICTIM_GONE = "VictimGone"
    VICTIM_IN_DRAIN_BACKOFF = "VictimInDrainBackoff"
    VICTIM_IN_USE = "VictimInUse"
    PHYSICAL_GPU_EXCEEDED = "PhysicalGPUExceeded"
    TARGET_OUT_OF_BOUNDS = "TargetOutOfBounds"
    STALE_GENERATION = "StaleGeneration"


@dataclass(frozen=True, slots=True)
class Plan:
    """The published plan: ``target`` cells, ``victims`` in drain order (cheapest first), made
    for spec ``generation`` (None: unknown). ``empty_victims``: those of the victims chosen as
    cells running no pod (spare boots cancelled, empty cells), so one a pod runs on now is kept."""

    target: int
    victims: tuple[str, ...] = ()
    generation: int | None = None
    empty_victims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CellFact:
    """One cell as the check needs it: ``live`` counts toward the size (an object not being
    torn down, Failed included); ``held_until_s``: the end of its drain back-off (None: none);
    ``waiting_for_gpu``: it has not taken its physical GPU yet; ``runs_pods``: a pod is bound
    to its Node (read only for a plan's ``empty_victims``)."""

    name: str
    live: bool = True
    held_until_s: float | None = None
    waiting_for_gpu: bool = False
    runs_pods: bool = False


@dataclass(frozen=True, slots=True)
class Bounds:
    """What the fresh state allows: the spec's ``floor``..``ceiling`` at ``generation``, the
    ledger's ``free_gpus`` (None: unknown, no bound) and ``gpus_per_cell``."""

    floor: int
    ceiling: int
    generation: int | None = None
    free_gpus: int | None = None
    gpus_per_cell: int = 1


@dataclass(frozen=True, slots=True)
class Verdict:
    """One rejected step: which, about which cell, why, and until when (if it can end)."""

    step: PlanStep
    rejection: Rejection
    message: str
    cell: str | None = None
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class CheckedPlan:
    """What membership executes: the ``target``, the accepted ``victims`` (the plan's order),
    the ``held`` victims whose removal waits, at most ``create_limit`` new cells (None: no
    physical bound), and the ``rejections``. ``requeue_after_s``: when the first hold ends.
    ``victims_named``: the plan named victims and its target stands (``plan_execute`` then
    lets no other cell stand in for one it could not accept; a clamped target's extra cells
    go highest index first)."""

    target: int
    victims: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    create_limit: int | None = None
    rejections: tuple[Verdict, ...] = ()
    requeue_after_s: float | None = None
    victims_named: bool = False

    def summary(self) -> str:
        """The rejections in one line ("" when the whole plan was accepted)."""
        return "; ".join(v.message for v in self.rejections)


def _target(plan: Plan, bounds: Bounds) -> tuple[int, Verdict | None]:
    ceiling = max(bounds.ceiling, bounds.floor)
    target = min(max(plan.target, bounds.floor), ceiling)
    if target == plan.target:
        return target, None
    stale = plan.generation is not None and bounds.generation is not None
    stale = stale and plan.generation != bounds.generation
    kind = Rejection.STALE_GENERATION if stale else Rejection.TARGET_OUT_OF_BOUNDS
    why = f"made for generation {plan.generation}, " if stale else ""
    message = (
        f"target {plan.target} {why}outside replicas {bounds.floor}..{ceiling}: "
        f"{target} cells instead"
    )
    return target, Verdict(PlanStep.TARGET, kind, message)


def _victims(
    plan: Plan, target: int, cells: Sequence[CellFact], now_s: float
) -> tuple[list[str], list[str], list[Verdict]]:
    by_name = {c.name: c for c in cells}
    victims = list(dict.fromkeys(plan.victims))
    remaining = [by_name[n] for n in victims if n in by_name and by_name[n].live]
    # A gone victim is only a missing step while the remaining victims do not cover the
    # excess: one drained by this very plan (gone while the next victim still drains) is done.
    uncovered = sum(1 for c in cells if c.live) - target - len(remaining)
    accepted: list[str] = []
    held: list[str] = []
    verdicts: list[Verdict] = []
    for name in victims:
        fact = by_name.get(name)
        if fact is None and uncovered > 0:
            uncovered -= 1
            message = f"victim {name} no longer exists; no other cell stands in for it"
            verdicts.append(Verdict(PlanStep.REMOVE, Rejection.VICTIM_GONE, message, name))
        elif fact is None or not fact.live:
            continue  # leaving already, or gone with the step done
        elif _held(fact, now_s):
            verdicts.append(_backoff_verdict(fact, now_s))
            held.append(name)
        elif fact.runs_pods and name in plan.empty_victims:
            verdicts.append(_in_use_verdict(name))
            held.append(name)
        else:
            accepted.append(name)
    named = set(plan.victims)
    for fact in cells:  # a standing refusal: the next plan must not choose it either
        if fact.live and fact.name not in named and _held(fact, now_s):
            verdicts.append(_backoff_verdict(fact, now_s))
    return accepted, held, verdicts


def _held(fact: CellFact, now_s: float) -> bool:
    return fact.held_until_s is not None and now_s < fact.held_until_s


def _in_use_verdict(name: str) -> Verdict:
    message = (
        f"victim {name} was chosen while it ran no pod and runs one now (a pod was bound to "
        "it before the plan was carried out); kept"
    )
    return Verdict(PlanStep.REMOVE, Rejection.VICTIM_IN_USE, message, name)


def _backoff_verdict(fact: CellFact, now_s: float) -> Verdict:
    # The end, not a countdown: the same rejection reads the same on every pass (a message
    # that changed each second made a status write and woke the autoscaler every pass).
    until = datetime.fromtimestamp(int(fact.held_until_s or now_s), tz=UTC)
    message = (
        f"victim {fact.name}: its last drain was abandoned at drain.timeout (a "
        f"PodDisruptionBudget or busy GPU pods); not drained again before "
        f"{until:%Y-%m-%dT%H:%M:%SZ}"
    )
    kind = Rejection.VICTIM_IN_DRAIN_BACKOFF
    return Verdict(PlanStep.REMOVE, kind, message, fact.name, fact.held_until_s)


def _create_limit(
    target: int, cells: Sequence[CellFact], bounds: Bounds
) -> tuple[int | None, Verdict | None]:
    if bounds.free_gpus is None:
        return None, None
    per_cell = max(bounds.gpus_per_cell, 1)
    waiting = sum(1 for c in cells if c.live and c.waiting_for_gpu)
    limit = max(bounds.free_gpus - waiting * per_cell, 0) // per_cell
    wanted = target - sum(1 for c in cells if c.live)
    if wanted <= limit:
        return limit, None
    message = (
        f"plan adds {wanted} cell(s), {bounds.free_gpus} free physical GPU(s) hold {limit} "
        f"({per_cell} per cell, {waiting} cell(s) of this pool still to take theirs)"
    )
    return limit, Verdict(PlanStep.CREATE, Rejection.PHYSICAL_GPU_EXCEEDED, message)


def accepted_as_is(
    plan: Plan, cells: Sequence[CellFact], bounds: Bounds, now_s: float
) -> CheckedPlan | None:
    """The checked plan when ``plan`` is accepted as it stands with no step to judge, else None.

    That is a plan naming no victim, with its target within the spec's bounds, no physical GPU
    limit known and no live cell of ``cells`` in drain back-off: no step can be rejected, so
    the answer is the plan's target alone. ``check_plan`` takes this path first (most plans,
    live and in a replay); the simulator's actuator calls it without building its cells' facts
    (a simulated cell is never in drain back-off), so both follow this one rule.
    """
    if plan.victims or bounds.free_gpus is not None:
        return None
    if not bounds.floor <= plan.target <= max(bounds.ceiling, bounds.floor):
        return None
    for fact in cells:
        if fact.live and _held(fact, now_s):
            return None
    return CheckedPlan(plan.target)


def check_plan(plan: Plan, cells: Sequence[CellFact], bounds: Bounds, now_s: float) -> CheckedPlan:
    """Each step of ``plan`` accepted or rejected against ``cells`` and ``bounds`` at ``now_s``."""
    as_is = accepted_as_is(plan, cells, bounds, now_s)
    if as_is is not None:
        return as_is
    target, target_verdict = _target(plan, bounds)
    accepted, held, verdicts = _victims(plan, target, cells, now_s)
    limit, create_verdict = _create_limit(target, cells, bounds)
    rejections = [v for v in (target_verdict, *verdicts, create_verdict) if v is not None]
    waits = [v.retry_after_s - now_s for v in rejections if v.retry_after_s is not None]
    return CheckedPlan(
        target=target,
        victims=tuple(accepted),
        held=tuple(held),
        create_limit=limit,
        rejections=tuple(rejections),
        requeue_after_s=min(waits) if waits else None,
        victims_named=bool(plan.victims) and target_verdict is None,
    )
