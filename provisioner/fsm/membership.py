"""Membership planning: which cells to create, replace and remove this pass.

Why this module exists: the pool must converge to the desired number of cells without
hammering the infrastructure when something is broken. Churn control (reference §2.5) is a
pure function of the current rows, the per-index failure history, the limits and ``now_s``:

* create at the lowest free index (names ``<pool>-<index>``), at most ``max_in_flight`` cells
  in flight (an autoscaled pool's ``lift_in_flight_when_proven``: only until a cell has been
  Ready, and while one is Failed: the policy's rule in ``autoscaler.policy.limits``), and no
  more than the free physical GPUs (minus this pool's own cells that have not taken their
  GPU yet - the earlier implementation double-counted those);
* replace a Failed cell (tombstone + new incarnation) only after a per-index backoff
  (30 s doubling, capped at 30 min) and never after ``max_failures_per_index`` failures;
* stall with a reason instead of looping: InsufficientPhysicalGPU, CellReplacementExhausted,
  FaultNotInTheCell (hopeless pool, or HAMi unusable pool-wide), BootstrapCredentialSuspect;
  the pool annotation ``cells.kubeswift.io/release-guard: "true"`` lifts the hopeless-pool and
  credential guards for one wave (the shell removes it once cells were created under it);
* remove Failed cells first, then the autoscaler's victims, then the highest index; an
  autoscaled pool's plan is checked first (``fsm.plan_check``) and executed by the rule the
  simulator uses (``fsm.plan_execute``): its accepted victims go in the plan's order, a
  rejected one is not replaced by another cell (the scale-down waits and says why), and its
  physical bound is the check's, in GPUs per cell;
* keep the failure history for EVERY index, autoscaled ones included (the earlier
  implementation dropped tombstones at ``index >= spec.replicas`` and with them the backoff);
* a replaced cell comes back at its own index: while the failed object is being deleted the
  index is reserved and counts toward the desired size, so no other index is filled instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provisioner.fsm.identity import MAX_INDEX, RELEASE_GUARD_ANNOTATION, cell_name
from provisioner.fsm.plan_check import CheckedPlan
from provisioner.fsm.plan_execute import LiveCell, creatable, removals
from provisioner.fsm.vocabulary import (
    CREATING_PHASES,
    PRE_GPU_PHASES,
    TEARDOWN_PHASES,
    CellPhase,
    CellReason,
    StallReason,
)

RELEASE_GUARD_VALUE = "true"


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One ``status.cells[]`` row as membership sees it.

    ``has_object``: the outer object exists (False = tombstone). ``fault_outside_cell``: the
    cell's Node was Ready with 0 devices advertised (evidence for FaultNotInTheCell).
    ``current_template``: the row's template hash is the current one; the hash covers the join
    template's content, so fixing the join Secret makes older NodeNeverRegistered failures
    stop counting as evidence against the credential. ``replacing``: the row's outer object is
    being torn down to replace a Failed cell; its index is reserved for the new incarnation, so
    the failure history and backoff stay with the index (a replacement never jumps to another
    index while the old object is still going).
    """

    name: str
    index: int
    phase: CellPhase
    has_object: bool = True
    ready_once: bool = False
    reason: str = ""
    fault_outside_cell: bool = False
    current_template: bool = True
    replacing: bool = False


@dataclass(frozen=True, slots=True)
class IndexHistory:
    failure_count: int = 0
    last_failure_s: float | None = None


@dataclass(frozen=True, slots=True)
class MembershipLimits:
    """Churn limits; the defaults are the earlier implementation's constants."""

    max_in_flight: int = 2
    # An autoscaled pool lifts max_in_flight once a cell has been Ready (boots work) while no
    # cell is Failed: the autoscaler sized the burst with the same rule (policy.limits).
    lift_in_flight_when_proven: bool = False
    max_failures_per_index: int = 5
    hopeless_pool_failures: int = 3
    suspect_credential_failures: int = 2
    backoff_base_s: float = 30.0
    backoff_cap_s: float = 30 * 60.0


@dataclass(frozen=True, slots=True)
class MembershipInput:
    """``free_physical_gpus`` None = unknown (proceed). ``victims``: autoscaler's idle cells,
    best first. ``creation_adjustment``: extra (or, negative, fewer) cells the rollout wants
    created beyond ``desired_replicas``; it never causes removals. ``pool_ever_ready``: any
    cell of this pool was ever Ready (status memory). ``release_guard``: the user set the
    release-guard annotation, lifting the hopeless-pool and credential guards.
    ``bootstrap_error``: the join template cannot be rendered (``bootstrap.RenderError``
    message, which never quotes the template): no cell is created or replaced.
    ``plan``: an autoscaled pool's checked plan (``plan_check.check_plan``; its target is
    ``desired_replicas``, its accepted victims replace ``victims``, its ``create_limit`` the
    bound from ``free_physical_gpus``); None: membership's own rules. ``gpus_per_cell``: the
    physical GPUs each cell takes (``free_physical_gpus`` counts GPUs, not cells)."""

    pool_name: str
    desired_replicas: int
    rows: tuple[MemberRow, ...]
    history: Mapping[int, IndexHistory]
    now_s: float
    limits: MembershipLimits = MembershipLimits()
    free_physical_gpus: int | None = None
    workload_reachable: bool = True
    victims: tuple[str, ...] = ()
    creation_adjustment: int = 0
    provider_usable: bool = True
    pool_ever_ready: bool = False
    release_guard: bool = False
    bootstrap_error: str = ""
    plan: CheckedPlan | None = None
    gpus_per_cell: int = 1


@dataclass(frozen=True, slots=True)
class CellToCreate:
    name: str
    index: int


@dataclass(frozen=True, slots=True)
class MembershipPlan:
    """``replace``: Failed cells whose outer objects should be deleted now (the row becomes a
    tombstone and the index is refilled). ``remove``: cells to mark Draining.
    ``requeue_after_s``: earliest backoff expiry, if any is pending."""

    create: tuple[CellToCreate, ...] = ()
    replace: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    stall: StallReason | None = None
    stall_message: str = ""
    requeue_after_s: float | None = None


def backoff_s(failure_count: int, limits: MembershipLimits) -> float:
    """30 s after the first failure, doubling per failure, capped (defaults: 30 s .. 30 min)."""
    if failure_count <= 0:
        return 0.0
    exponent = min(failure_count - 1, 32)
    return float(min(limits.backoff_base_s * 2**exponent, limits.backoff_cap_s))


def backoff_remaining_s(history: IndexHistory, limits: MembershipLimits, now_s: float) -> float:
    if history.last_failure_s is None:
        return 0.0
    return max(0.0, history.last_failure_s + backoff_s(history.failure_count, limits) - now_s)


def record_failure(
    history: Mapping[int, IndexHistory], index: int, now_s: float
) -> dict[int, IndexHistory]:
    """History after a cell at ``index`` entered Failed (call once per entering)."""
    previous = history.get(index, IndexHistory())
    updated = dict(history)
    updated[index] = IndexHistory(previous.failure_count + 1, now_s)
    return updated


def _live(rows: tuple[MemberRow, ...]) -> list[MemberRow]:
    """Rows that count toward the desired size: objects not in teardown (Failed included)."""
    return [r for r in rows if r.has_object and r.phase not in TEARDOWN_PHASES]


def _removals(inp: MembershipInput, live: list[MemberRow]) -> tuple[str, ...]:
    """Scale-down victims: Failed cells, then the autoscaler's choice, then highest index.
    A rollout's surge (positive ``creation_adjustment``) is not excess: its cells stay."""
    cells = [LiveCell(r.name, r.index, r.phase is CellPhase.FAILED) for r in live]
    if inp.plan is not None:  # the simulator executes plans by this very rule
        return removals(inp.plan, cells, inp.creation_adjustment)
    unplanned = CheckedPlan(inp.desired_replicas, inp.victims)  # victims best first, no check
    return removals(unplanned, cells, inp.creation_adjustment)


def _failed_decisions(
    inp: MembershipInput, live: list[MemberRow], removed: set[str]
) -> tuple[list[str], StallReason | None, str, float | None]:
    """For each Failed live cell: replace now, wait for backoff, or stall."""
    replace: list[str] = []
    stall: StallReason | None = None
    message, requeue = "", None
    for row in sorted(live, key=lambda r: r.index):
        if row.phase is not CellPhase.FAILED or row.name in removed:
            continue
        hist = inp.history.get(row.index, IndexHistory())
        if hist.failure_count >= inp.limits.max_failures_per_index:
            stall = stall or StallReason.CELL_REPLACEMENT_EXHAUSTED
            message = message or (
                f"cell {row.name} failed {hist.failure_count} times; not replaced again"
            )
        elif not inp.provider_usable and row.fault_outside_cell:
            stall = stall or StallReason.FAULT_NOT_IN_THE_CELL
            message = message or (
                f"cell {row.name} joined but HAMi advertises no GPU anywhere in the pool; "
                "the VM is kept for inspection"
            )
        else:
            wait = backoff_remaining_s(hist, inp.limits, inp.now_s)
            if wait <= 0:
                replace.append(row.name)
            else:
                requeue = wait if requeue is None else min(requeue, wait)
    return replace, stall, message, requeue


def _creation_guard(inp: MembershipInput) -> tuple[StallReason, str] | None:
    """Pool-wide reasons to create nothing at all."""
    if inp.bootstrap_error:
        return StallReason.BOOTSTRAP_TEMPLATE_INVALID, inp.bootstrap_error
    rows, limits = inp.rows, inp.limits
    ever_ready = inp.pool_ever_ready or any(r.ready_once for r in rows)
    total_failures = sum(h.failure_count for h in inp.history.values())
    if not inp.release_guard and not ever_ready and total_failures >= limits.hopeless_pool_failures:
        return StallReason.FAULT_NOT_IN_THE_CELL, (
            f"{total_failures} cell failures and no cell was ever Ready: the fault is likely in "
            "the pool's configuration, not in a cell; after fixing it, annotate the pool "
            f'{RELEASE_GUARD_ANNOTATION}="{RELEASE_GUARD_VALUE}" to retry once'
        )
    suspects = [
        r
        for r in rows
        if r.phase is CellPhase.FAILED
        and r.reason == CellReason.NODE_NEVER_REGISTERED
        and not r.ready_once
        and r.current_template
    ]
    if not inp.release_guard and len(suspects) >= limits.suspect_credential_failures:
        return StallReason.BOOTSTRAP_CREDENTIAL_SUSPECT, (
            f"{len(suspects)} cells booted but their Node never registered: check "
            "spec.bootstrap.joinSecretRef (join token expired or wrong?); after fixing it, "
            f'annotate the pool {RELEASE_GUARD_ANNOTATION}="{RELEASE_GUARD_VALUE}" to retry once'
        )
    return None


def release_guard_requested(annotations: Mapping[str, str]) -> bool:
    """The pool carries the release-guard annotation with the value ``"true"`` (any case);
    another value does not lift the guards."""
    value = annotations.get(RELEASE_GUARD_ANNOTATION, "")
    return value.strip().lower() == RELEASE_GUARD_VALUE


def release_guard_used(requested: bool, plan: MembershipPlan, replacing: bool) -> bool:
    """The annotation is spent once a pass created cells under it and no Failed cell is still
    being replaced (its new incarnation must be created under the annotation too). Removing it
    re-arms the guards: if the new cells fail as well, the pool stalls again; once one is Ready
    the hopeless-pool guard no longer applies anyway."""
    return requested and bool(plan.create) and not plan.replace and not replacing


def _free_indexes(inp: MembershipInput, count: int) -> list[int]:
    """Lowest indexes not held by an object, skipping exhausted or backing-off indexes."""
    taken = {r.index for r in inp.rows if r.has_object}
    chosen: list[int] = []
    index = 0
    while len(chosen) < count and index <= MAX_INDEX:
        hist = inp.history.get(index, IndexHistory())
        usable = (
            index not in taken
            and hist.failure_count < inp.limits.max_failures_per_index
            and backoff_remaining_s(hist, inp.limits, inp.now_s) <= 0
        )
        if usable:
            chosen.append(index)
        index += 1
    return chosen


def _reserved(rows: tuple[MemberRow, ...]) -> int:
    """Indexes held for a replacement: the failed object is still being deleted."""
    return sum(1 for r in rows if r.has_object and r.replacing and r.phase in TEARDOWN_PHASES)


def _boots_proven(inp: MembershipInput, live: list[MemberRow]) -> bool:
    """A cell of this pool has been Ready (now or before) and none is Failed now."""
    if any(r.phase is CellPhase.FAILED for r in live):
        return False
    return inp.pool_ever_ready or any(r.ready_once or r.phase is CellPhase.READY for r in live)


def _creations(
    inp: MembershipInput, live: list[MemberRow]
) -> tuple[list[CellToCreate], StallReason | None, str]:
    target = max(inp.desired_replicas + inp.creation_adjustment, 0)
    wanted = target - len(live) - _reserved(inp.rows)
    if wanted <= 0:
        return [], None, ""
    guard = _creation_guard(inp)
    if guard is not None:
        return [], guard[0], guard[1]
    in_flight = sum(1 for r in live if r.phase in CREATING_PHASES)
    allowed = min(wanted, max(inp.limits.max_in_flight - in_flight, 0))
    if inp.limits.lift_in_flight_when_proven and _boots_proven(inp, live):
        allowed = wanted
    stall: StallReason | None = None
    message = ""
    if inp.plan is not None and inp.plan.create_limit is not None:
        if inp.plan.create_limit == 0:
            stall = StallReason.INSUFFICIENT_PHYSICAL_GPU
            message = f"no free physical GPU for {wanted} more cell(s)"
        allowed = creatable(inp.plan, allowed)
    elif inp.plan is None and inp.free_physical_gpus is not None:
        per_cell = max(inp.gpus_per_cell, 1)
        waiting_for_gpu = sum(1 for r in live if r.phase in PRE_GPU_PHASES)
        free = max(inp.free_physical_gpus - waiting_for_gpu * per_cell, 0) // per_cell
        if free == 0:
            stall = StallReason.INSUFFICIENT_PHYSICAL_GPU
            message = f"no free physical GPU for {wanted} more cell(s)"
        allowed = min(allowed, free)
    names = [
        CellToCreate(cell_name(inp.pool_name, i), i) for i in _free_indexes(inp, max(allowed, 0))
    ]
    return names, stall, message


def plan_membership(inp: MembershipInput) -> MembershipPlan:
    """The whole plan for one pass. Nothing is created, replaced or removed while the workload
    cluster is unreachable (a removal or replacement would leak its Node)."""
    live = _live(inp.rows)
    if not inp.workload_reachable:
        return MembershipPlan(
            stall=StallReason.UNREACHABLE,
            stall_message="workload cluster unreachable: no create, replace or remove",
        )
    remove = _removals(inp, live)
    replace, stall, message, requeue = _failed_decisions(inp, live, set(remove))
    if inp.plan is not None and inp.plan.held and stall is None:
        stall, message = StallReason.SCALE_DOWN_HELD, f"scale-down held: {inp.plan.summary()}"
        waits = [w for w in (requeue, inp.plan.requeue_after_s) if w is not None]
        requeue = min(waits) if waits else None
    guard = _creation_guard(inp)
    if guard is not None and replace:
        # Nothing would be re-created: keep the failed VMs for inspection instead.
        replace, requeue = [], None
        stall, message = stall or guard[0], message or guard[1]
    create: list[CellToCreate] = []
    if not remove:
        create, create_stall, create_message = _creations(inp, live)
        if create_stall is not None and stall is None:
            stall, message = create_stall, create_message
    return MembershipPlan(
        create=tuple(create),
        replace=tuple(replace),
        remove=remove,
        stall=stall,
        stall_message=message,
        requeue_after_s=requeue,
    )
