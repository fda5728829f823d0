"""ProvisioningRequests (autoscaling.x-k8s.io/v1): parsing and the conditions we set, purely.

Why this module exists: Kueue's provisioning admission check asks an autoscaler for a gang's
capacity through a ProvisioningRequest and waits for its conditions. To stand in for Cluster
Autoscaler, gpucellpool must set them as Cluster Autoscaler does (facts and upstream paths in
docs/concepts.md "Gangs and ProvisioningRequests"). ``judge`` is that state machine: from the
request as it is, the gang plan of the chosen pool (``policy.gang``) and the time, the
conditions to write, whether the request's capacity is booked now, and on which pool.

* ``Accepted=True`` on first sight; ``Provisioned=True`` with ``CapacityIsFound`` when the
  members fit the pool's Ready and Booting cells (both classes), with ``CapacityIsProvisioned``
  when an atomic gang's cells were requested (best effort: CA admits once it asked, without
  waiting for the nodes); else ``Provisioned=False``/``CapacityIsNotFound`` and a retry.
* ``Failed=True`` when waiting cannot help (an atomic gang needs more cells than the pool's
  max replicas even when empty, or a member fits no cell of any pool: reason says which), when
  ``ValidUntilSeconds`` (atomic) or 7 days (both) pass unprovisioned (``Expired``), or at once
  for check-capacity with ``noRetry: "true"``.
* ``BookingExpired=True`` (``CapacityReservationTimeExpired``) 10 minutes after Provisioned:
  the capacity is no longer held for the gang's pods.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.explain import parse_rfc3339, rfc3339
from autoscaler.policy.demand import pending_pod_from_manifest
from autoscaler.policy.errors import AskError
from autoscaler.policy.gang import GangPlan, PodSet

GROUP_VERSION = "autoscaling.x-k8s.io/v1"
KIND = "ProvisioningRequest"
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
SERVED_CLASSES = (CHECK_CAPACITY, ATOMIC)
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
VALID_UNTIL_PARAMETER = "ValidUntilSeconds"
NO_RETRY_PARAMETER = "noRetry"
POOL_DETAIL = "gpucellpool.cells.kubeswift.io/pool"  # status.provisioningClassDetails key
CELLS_DETAIL = "gpucellpool.cells.kubeswift.io/cellsAdded"

BOOKING_SECONDS = 600.0  # CA's capacity reservation time
EXPIRY_SECONDS = 7 * 24 * 3600.0  # CA fails a request unprovisioned this long after creation

# Condition types and the reasons Cluster Autoscaler uses (ours: the gang plan's reasons)
ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_FOUND = "CapacityIsFound"
CAPACITY_NOT_FOUND = "CapacityIsNotFound"
CAPACITY_PROVISIONED = "CapacityIsProvisioned"
RESERVATION_EXPIRED = "CapacityReservationTimeExpired"
EXPIRED = "Expired"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    last_transition: float  # seconds since the epoch


@dataclass(frozen=True, slots=True)
class Request:
    """The parts of a ProvisioningRequest the judge reads."""

    namespace: str
    name: str
    generation: int
    class_name: str
    pod_sets: tuple[tuple[str, int], ...]  # (PodTemplate name, count)
    created_at: float
    parameters: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
    details: Mapping[str, str] = field(default_factory=dict)
    uid: str = ""  # tells a request from one recreated under the same name

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    def is_true(self, kind: str) -> bool:
        found = self.condition(kind)
        return found is not None and found.status == "True"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to write, whether the members' capacity is held now, on which pool, and why."""

    conditions: tuple[Condition, ...]
    book: bool
    pool: str | None
    details: Mapping[str, str] = field(default_factory=dict)
    booked_until: float | None = None  # when the hold ends (BookingExpired)


def _conditions(raw: object) -> tuple[Condition, ...]:
    out = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping) or not item.get("type"):
            continue
        since = parse_rfc3339(item.get("lastTransitionTime")) or 0.0
        out.append(
            Condition(
                str(item["type"]),
                str(item.get("status", "Unknown")),
                str(item.get("reason", "")),
                str(item.get("message", "")),
                since,
            )
        )
    return tuple(out)


def parse_request(raw: Mapping[str, Any]) -> Request | AskError:
    """A typed request, or an error naming the field (the shell logs it and skips the request)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    status = raw.get("status") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return AskError("spec", "metadata and spec must be objects")
    sets = []
    for i, item in enumerate(spec.get("podSets") or []):
        ref = (item or {}).get("podTemplateRef") or {}
        count = (item or {}).get("count")
        if not ref.get("name") or not isinstance(count, int):
            return AskError(f"spec.podSets[{i}]", "needs podTemplateRef.name and an integer count")
        sets.append((str(ref["name"]), count))
    if not sets:
        return AskError("spec.podSets", "at least one pod set is required")
    created = parse_rfc3339(meta.get("creationTimestamp"))
    params = spec.get("parameters") or {}
    details = status.get("provisioningClassDetails") or {} if isinstance(status, Mapping) else {}
    return Request(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        generation=int(meta.get("generation") or 0),
        class_name=str(spec.get("provisioningClassName") or ""),
        pod_sets=tuple(sets),
        created_at=created if created is not None else 0.0,
        parameters={str(k): str(v) for k, v in params.items()},
        conditions=_conditions(status.get("conditions") if isinstance(status, Mapping) else None),
        details={str(k): str(v) for k, v in details.items()},
        uid=str(meta.get("uid") or ""),
    )


def pod_set(request: Request, index: int, template: Mapping[str, Any]) -> PodSet | AskError:
    """Pod set ``index`` of ``request`` from its PodTemplate object (``template.spec`` asks)."""
    name, count = request.pod_sets[index]
    body = template.get("template") or {}
    pod = {
        "metadata": {**(body.get("metadata") or {}), "namespace": request.namespace, "name": name},
        "spec": body.get("spec") or {},
    }
    parsed = pending_pod_from_manifest(pod, request.created_at)
    if isinstance(parsed, AskError):
        return replace(parsed, field=f"PodTemplate {name}: {parsed.field}")
    key = f"{request.namespace}/{request.name}/{index}"
    return PodSet(replace(parsed, key=key), count)


def _set(
    conditions: Sequence[Condition], kind: str, status: str, reason: str, msg: str, now: float
) -> tuple[Condition, ...]:
    """``conditions`` with ``kind`` set; its transition time kept while its status holds."""
    old = next((c for c in conditions if c.type == kind), None)
    since = old.last_transition if old is not None and old.status == status else now
    new = Condition(kind, status, reason, msg, since)
    if old is None:
        return (*conditions, new)
    return tuple(new if c.type == kind else c for c in conditions)


def _deadline(request: Request) -> float:
    raw = request.parameters.get(VALID_UNTIL_PARAMETER) if request.class_name == ATOMIC else None
    try:
        valid = float(raw) if raw is not None else EXPIRY_SECONDS
    except ValueError:
        valid = EXPIRY_SECONDS
    return request.created_at + min(max(valid, 0.0), EXPIRY_SECONDS)


def _booked(request: Request, conds: tuple[Condition, ...], now: float) -> Verdict:
    """A Provisioned request: held until BOOKING_SECONDS after it turned True."""
    pool = request.details.get(POOL_DETAIL)
    provisioned = request.condition(PROVISIONED)
    assert provisioned is not None
    until = provisioned.last_transition + BOOKING_SECONDS
    if pool is None:  # provisioned by another autoscaler: not ours to hold or expire
        return Verdict(request.conditions, False, None, request.details)
    if now >= until:
        msg = f"capacity was held {BOOKING_SECONDS:g}s after Provisioned; no longer held"
        conds = _set(conds, BOOKING_EXPIRED, "True", RESERVATION_EXPIRED, msg, now)
        return Verdict(conds, False, pool, request.details)
    return Verdict(conds, True, pool, request.details, until)


def judge(
    request: Request, plan: GangPlan | None, pool: str | None, why_not: str, now: float
) -> Verdict:
    """The conditions after one look at ``request`` with ``plan`` on ``pool``.

    ``plan`` is None when no pool could take the gang (``why_not`` says why: no pool selects
    the pods, a template is missing); with ``pool`` None it is a plan no pool could carry out
    (a member fits no selecting pool: permanent, so an atomic request fails). Terminal
    requests (Failed or BookingExpired) stay as they are. Times are whole seconds, as a
    condition's ``lastTransitionTime`` is stored, so the verdict equals the request as it
    reads back once written.
    """
    now = float(math.floor(now))
    if request.is_true(FAILED) or request.is_true(BOOKING_EXPIRED):
        return Verdict(request.conditions, False, request.details.get(POOL_DETAIL), request.details)
    conds = _set(request.conditions, ACCEPTED, "True", "Accepted", "served by gpucellpool", now)
    if request.is_true(PROVISIONED):
        return _booked(request, conds, now)
    if now >= _deadline(request):
        msg = f"not provisioned within {_deadline(request) - request.created_at:g}s of creation"
        return Verdict(_set(conds, FAILED, "True", EXPIRED, msg, now), False, pool)
    if plan is None:
        return _not_found(request, conds, why_not, now, None, permanent_reason=None)
    details = {POOL_DETAIL: pool or "", CELLS_DETAIL: str(plan.cells_to_add)}
    if plan.fits_now or (request.class_name == ATOMIC and plan.cells_to_add > 0):
        reason = CAPACITY_FOUND if plan.fits_now else CAPACITY_PROVISIONED
        conds = _set(conds, PROVISIONED, "True", reason, f"pool {pool}: {plan.message}", now)
        return Verdict(conds, True, pool, details, now + BOOKING_SECONDS)
    permanent = plan.reason if plan.permanent and request.class_name == ATOMIC else None
    where = f"pool {pool}: " if pool else ""  # no pool: the plan says why none could
    return _not_found(request, conds, f"{where}{plan.message}", now, pool, permanent)


def _not_found(
    request: Request,
    conds: tuple[Condition, ...],
    msg: str,
    now: float,
    pool: str | None,
    permanent_reason: str | None,
) -> Verdict:
    retry = "; will retry" if permanent_reason is None else ""
    conds = _set(conds, PROVISIONED, "False", CAPACITY_NOT_FOUND, msg + retry, now)
    no_retry = request.parameters.get(NO_RETRY_PARAMETER, "").lower() == "true"
    if request.class_name == CHECK_CAPACITY and no_retry:
        permanent_reason = CAPACITY_NOT_FOUND
    if permanent_reason is not None:
        conds = _set(conds, FAILED, "True", permanent_reason, msg, now)
    return Verdict(conds, False, pool)


def status_body(request: Request, verdict: Verdict) -> dict[str, Any]:
    """The server-side apply body for the request's status subresource."""
    conditions = [
        {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message[:32768],
            "lastTransitionTime": rfc3339(c.last_transition),
            "observedGeneration": request.generation,
        }
        for c in verdict.conditions
    ]
    status: dict[str, Any] = {"conditions": conditions}
    if verdict.details:
        status["provisioningClassDetails"] = dict(verdict.details)
    return {
        "apiVersion": GROUP_VERSION,
        "kind": KIND,
        "metadata": {"name": request.name, "namespace": request.namespace},
        "status": status,
    }


def unchanged(request: Request, verdict: Verdict) -> bool:
    """Whether writing ``verdict`` would change nothing (then the shell writes nothing)."""
    return request.conditions == verdict.conditions and (
        not verdict.details or dict(request.details) == dict(verdict.details)
    )
