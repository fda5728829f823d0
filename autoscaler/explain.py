"""Turn a ``Decision`` into what the autoscaler publishes: status fields and conditions.

Why this module exists: "why did it scale?" must be answerable from ``kubectl describe``. The
exact shape of what we write - ``status.desiredReplicas`` (omitted in Shadow mode, so the
provisioner keeps acting on the previous target), ``status.lastDecision`` (``act: false`` in
Shadow), ``status.demand`` and ``demandFreeSince`` (only from a successful read), and the
``ScalingActive`` and ``CellShapeKnown`` conditions (transition time kept while the status
does not change) - is decided here, purely, so it is unit-tested without a server.
``lastScaleUpTime`` / ``lastScaleDownTime`` (the original's window anchors) are read from the
policy memory. The memory itself rides in ``status.policyMemory`` on the same write; its
encoding is ``autoscaler.policy_memory``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from autoscaler.policy.decision import Decision, Reason
from autoscaler.policy.expander import PoolShare
from autoscaler.policy.types import PolicyMemory
from gpucellpool.api.conditions import CellShapeReason, ConditionType
from gpucellpool.api.pool import GPUCellPool

JSON = dict[str, Any]
SCALE_TIME_FIELDS = ("lastScaleUpTime", "lastScaleDownTime")


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Outcome:
    """The published part of a decision; two equal outcomes need no second write."""

    desired: int
    reason: str
    message: str
    act: bool
    cells_needed: int
    pending_asks: int
    condition_status: str
    condition_reason: str
    victims: tuple[str, ...] = ()
    empty_victims: tuple[str, ...] = ()  # of ``victims``: chosen while they ran no pod
    demand_read: bool = True  # the pending pods were read (cluster reachable, caches synced)
    unschedulable: int = 0  # counted pending pods no fresh cell could host
    demand_free_since: float | None = None  # ``with_demand``
    shape_reason: str = ""  # ``CellShapeKnown``'s reason ("": not published)
    shape_message: str = ""
    given_away: int = 0  # matched pending pods another pool counts (``with_share``)
    taken: int = 0  # counted pending pods other pools matched too


def outcome(decision: Decision, reachable: bool) -> Outcome:
    if not reachable:
        cond = ("False", Reason.WORKLOAD_CLUSTER_UNREACHABLE.value)
    elif not decision.act:
        cond = ("False", "ShadowMode")
    else:
        cond = ("True", decision.reason.value)
    return Outcome(
        decision.desired_replicas,
        decision.reason.value,
        decision.message[:4000],
        decision.act,
        decision.cells_needed,
        decision.pending_asks,
        *cond,
        decision.victims,
        decision.empty_victims,  # a subset of ``victims`` as every path builds it
    )


def _grouped(head: str, pairs: Sequence[tuple[str, str]], one: str, many: str) -> str:
    """``head`` + "<one> ns/a (priority)" when every pod went one way, else
    "<many>: 2 ns/a (priority); 1 ns/b (least waste)"."""
    counts = sorted(Counter(pairs).items())
    if len(counts) == 1:
        (pool, why), _ = counts[0]
        return " ".join(part for part in (head, one, f"{pool} ({why})") if part)
    return f"{head} {many}: " + "; ".join(f"{n} {pool} ({why})" for (pool, why), n in counts)


def _pods(n: int) -> str:
    return f"{n} pending pod{'s' if n != 1 else ''}"


def share_note(share: PoolShare) -> str:
    """What the expander did to this pool's pending pods, in one sentence (or "")."""
    parts = []
    if share.given_away:
        head = f"{_pods(len(share.given_away))} matched this pool but went to"
        pairs = [(g.taker, g.reason.value) for g in share.given_away]
        parts.append(_grouped(head, pairs, "", "other pools"))
    if share.taken:
        head = f"took {_pods(len(share.taken))} that"
        pairs = [(", ".join(t.others), t.reason.value) for t in share.taken]
        also = f"{'was' if len(share.taken) == 1 else 'were'} also matched by"
        parts.append(_grouped(head, pairs, also, "other pools matched too"))
    return ". ".join(parts)


def with_share(out: Outcome, share: PoolShare) -> Outcome:
    """``out`` explaining the expander's choice: counts, and a sentence after the message."""
    text = share_note(share)
    if not text:
        return out
    message = f"{out.message}. {text[0].upper()}{text[1:]}"[:4000]
    return replace(out, message=message, given_away=len(share.given_away), taken=len(share.taken))


def demand_free_since(previous: float | None, read: bool, pending: int, now: float) -> float | None:
    """``status.demandFreeSince`` after this pass, with the original's meaning: set the first
    pass demand reads no pending pod (so none satisfiable either), kept while that lasts,
    cleared as soon as any demand reappears; a failed read changes nothing.

    It is published for people and dashboards; the policy does not read it. Scale-down has its
    own windows there (the highest recommendation over ``scaleDown.stabilizationWindowSeconds``,
    each cell's idle time, the legacy cooldowns), kept in the policy memory, so an unschedulable
    pod, which the original let hold ``demandFreeSince`` unset forever, cannot block it.
    """
    if not read:
        return previous
    if pending == 0:
        return now if previous is None else previous
    return None


def with_demand(
    out: Outcome, decision: Decision, read: bool, previous: float | None, now: float
) -> Outcome:
    """``out`` with the demand fields: whether the read succeeded, the pods no fresh cell
    could host, and ``demandFreeSince`` (``previous``: the one published before)."""
    unfit = len(decision.unschedulable) if read else 0
    since = demand_free_since(previous, read, decision.pending_asks + unfit, now)
    return replace(out, demand_read=read, unschedulable=unfit, demand_free_since=since)


def with_cell_shape(out: Outcome, reason: str, message: str) -> Outcome:
    """``out`` with the ``CellShapeKnown`` condition's reason and message."""
    return replace(out, shape_reason=reason, shape_message=message[:4000])


def parse_rfc3339(value: object) -> float | None:
    """``rfc3339``'s inverse; None when absent or malformed."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def carry_victims(
    out: Outcome,
    in_force: Sequence[str],
    live: Collection[str],
    empty_in_force: Collection[str] = (),
) -> Outcome:
    """The victims to publish: every cell our scale-downs in force chose (``in_force``, the
    victims last published) that ``live`` still has, then this decision's own. A victim chosen
    while it ran no pod (``empty_in_force``, this decision's ``empty_victims``) stays marked so
    while it is carried: the provisioner keeps it if a pod runs on it by then.

    The provisioner drains exactly the published victims, and only while the published decision
    is the one in force. Scale-downs come in steps (16 -> 15, then 15 -> 14 before the first
    victim is marked Draining), and a hold may follow at the same target: each published
    decision must therefore name the earlier steps' victims still live (Ready or Booting), then
    its own, up to the excess over its target; otherwise the provisioner would pick a cell by
    index for the earlier step, and the loop would see that cell live and undo the step.
    """
    if not out.act:
        return out
    names = [name for name in dict.fromkeys((*in_force, *out.victims)) if name in live]
    excess = max(0, len(live) - out.desired)
    victims = tuple(names[:excess])
    marked = {*empty_in_force, *out.empty_victims}
    return replace(out, victims=victims, empty_victims=tuple(v for v in victims if v in marked))


# (published reason, next reason) pairs where the next decision is the published action's own
# consequence: the cells a scale-up asked for now cover the pods that asked for them.
FOLLOW_UPS = frozenset({(Reason.SCALED_UP.value, Reason.DEMAND_SATISFIED.value)})


def follows_from(published: Outcome, out: Outcome) -> bool:
    """Whether ``out`` is only the consequence of the action ``published`` announced, not a new
    outcome: a scale-up followed by "the pending pods fit the booting cells" at the same target,
    for the same asks, with the same victims, nothing else blocking (``cells_needed`` 0).

    Such a decision needs no status write and no Event: the status in force already says why the
    target is what it is (the decision that set it); the next write for a real change (or a
    memory save) carries the newer wording. Anything else that changed - target, asks, victims,
    ``act``, demand, a guard taking over the reason (max replicas, physical GPUs, an unreachable
    cluster) - is a new outcome and is written at once.
    """
    if (published.reason, out.reason) not in FOLLOW_UPS or out.cells_needed != 0:
        return False
    settled = replace(
        out,
        reason=published.reason,
        message=published.message,
        condition_reason=published.condition_reason,
        cells_needed=published.cells_needed,
    )
    return settled == published


def drifted(published: Outcome, status: JSON) -> bool:
    """Whether the stored status no longer shows what we last published."""
    last = status.get("lastDecision") or {}
    cond: JSON = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "ScalingActive"), {}
    )
    return (
        last.get("reason") != published.reason
        or last.get("desiredReplicas") != published.desired
        or cond.get("reason") != published.condition_reason
        or (published.act and status.get("desiredReplicas") != published.desired)
        or _shape_drifted(published, status)
    )


def _shape_drifted(published: Outcome, status: JSON) -> bool:
    if not published.shape_reason:
        return False
    kind = ConditionType.CELL_SHAPE_KNOWN.value
    cond: JSON = next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})
    return bool(cond.get("reason") != published.shape_reason)


def note(out: Outcome) -> str:
    acted = "" if out.act else " (Shadow mode: published, not acted on)"
    return f"desired {out.desired}: {out.message}{acted}"[:1000]


def _entry(
    pool: GPUCellPool, type_: ConditionType, status: str, reason: str, message: str, now: float
) -> JSON:
    """One condition; its transition time kept while its status does not change."""
    old = pool.status.condition(type_)
    moved = old is None or old.status.value != status
    since = rfc3339(now) if moved or old is None else rfc3339(old.last_transition_time.timestamp())
    return {
        "type": type_.value,
        "status": status,
        "reason": reason,
        "message": message[:4000],
        "lastTransitionTime": since,
        "observedGeneration": pool.metadata.generation,
    }


def _condition(pool: GPUCellPool, out: Outcome, now: float) -> JSON:
    message = out.message if out.act else f"Shadow mode, not acted on: {out.reason}: {out.message}"
    kind = ConditionType.SCALING_ACTIVE
    return _entry(pool, kind, out.condition_status, out.condition_reason, message, now)


def _conditions(pool: GPUCellPool, out: Outcome, now: float) -> list[JSON]:
    conds = [_condition(pool, out, now)]
    if out.shape_reason:
        known = "False" if out.shape_reason == CellShapeReason.UNKNOWN.value else "True"
        kind = ConditionType.CELL_SHAPE_KNOWN
        conds.append(_entry(pool, kind, known, out.shape_reason, out.shape_message, now))
    return conds


def _demand(out: Outcome, raw_status: JSON, now: float) -> JSON:
    """``demand`` and ``demandFreeSince`` as this apply must carry them. Only a successful read
    writes ``demand``; otherwise the stored one is re-applied, so that our ownership of the
    field does not lapse and remove it. ``demandFreeSince`` left out is removed (cleared)."""
    fields: JSON = {}
    if out.demand_read:
        fields["demand"] = {
            "pendingRequests": out.pending_asks + out.unschedulable,
            "satisfiableByOneCell": out.pending_asks,
            "lastObserved": rfc3339(now),
        }
    elif isinstance(raw_status.get("demand"), dict):
        fields["demand"] = raw_status["demand"]
    if out.demand_free_since is not None:
        fields["demandFreeSince"] = rfc3339(out.demand_free_since)
    return fields


def status_apply_body(pool: GPUCellPool, out: Outcome, raw_status: JSON, now: float) -> JSON:
    """The server-side-apply body for our status fields (field manager gpucellpool-autoscaler).

    In Shadow mode ``desiredReplicas`` is re-applied at its current value (so our ownership of
    the field does not lapse and remove it) or left out when it was never set.
    """
    status: JSON = {
        "lastDecision": {
            "reason": out.reason,
            "message": out.message,
            "time": rfc3339(now),
            "desiredReplicas": out.desired,
            "act": out.act,
            "cellsNeeded": out.cells_needed,
            "pendingAsks": out.pending_asks,
            **({"victims": list(out.victims)} if out.victims else {}),
            **({"emptyVictims": list(out.empty_victims)} if out.empty_victims else {}),
        },
        **_demand(out, raw_status, now),
        "conditions": _conditions(pool, out, now),
    }
    if out.act:
        status["desiredReplicas"] = out.desired
    elif "desiredReplicas" in raw_status:
        status["desiredReplicas"] = raw_status["desiredReplicas"]
    meta = pool.metadata
    return {
        "apiVersion": pool.api_version,
        "kind": pool.kind,
        "metadata": {"name": meta.name, "namespace": meta.namespace},
        "status": status,
    }


def scale_times(memory: PolicyMemory, act: bool, raw_status: JSON) -> JSON:
    """``lastScaleUpTime`` / ``lastScaleDownTime``: when the pool last added cells / removed
    cells that served (hedged spares given up are not a scale-down), read from the policy
    memory, so a restart keeps them. In Shadow mode nothing scaled: the stored values are
    re-applied (our ownership of the fields must not lapse and remove them)."""
    if not act:
        return {k: raw_status[k] for k in SCALE_TIME_FIELDS if isinstance(raw_status.get(k), str)}
    times = (memory.last_scale_up_at, memory.last_scale_down_at)
    return {k: rfc3339(t) for k, t in zip(SCALE_TIME_FIELDS, times, strict=True) if t is not None}
