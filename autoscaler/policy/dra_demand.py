"""Pending pods that wait on HAMi ResourceClaims, read as the same asks as device-plugin pods.

Why this module exists: in HAMi's DRA mode a GPU pod carries no ``nvidia.com/*`` resources; the
webhook has moved its ask into a ResourceClaim (``<ns>-<pod>-<container>``, request ``gpu``)
and the pod is a plain default-scheduler pod, Unschedulable while kube-scheduler's DRA plugin
finds no device with room (hami-facts §5; there are no HAMi reason codes). For the pool fit to
be the same in both modes, each HAMi request of the pod's claims becomes one ``GPUAsk`` (count,
MiB, core percent) - exactly what ``autoscaler.policy.fit`` packs for a device-plugin pod, one
claim request per "container" on one node.

Rules: a pod waits on claims when it is Pending, unbound, ``PodScheduled=False/Unschedulable``
and lists ``spec.resourceClaims``; its claims are found by ``resourceClaimName`` or, for a
template, in ``status.resourceClaimStatuses``. A claim not created yet, or already allocated
(the pod waits for something else, which a new cell does not fix), does not make the pod
demand; a claim that cannot be read is an ``AskError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.policy.demand import pod_key, summarise, unschedulable
from autoscaler.policy.errors import AskError
from autoscaler.policy.hami_dra import claim_asks, is_allocated
from autoscaler.policy.pod_constraints import constraints_from_pod
from autoscaler.policy.types import GPUAsk, PendingPod

HAMI_SCHEDULER = "hami-scheduler"
DEFAULT_SCHEDULER = "default-scheduler"


def dra_scheduler_name(selected: str) -> str:
    """The scheduler whose pods count in DRA mode: HAMi's scheduler is not installed with DRA,
    so the selection's default (``hami-scheduler``) means kube-scheduler."""
    return DEFAULT_SCHEDULER if selected == HAMI_SCHEDULER else selected


def waits_on_claims(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """Pending, unbound, Unschedulable, of ``scheduler_name`` ("" any) and with claims."""
    spec, status = pod.get("spec"), pod.get("status")
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        return False
    if status.get("phase") != "Pending" or spec.get("nodeName"):
        return False
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if scheduler_name and scheduler != scheduler_name:
        return False
    claims = spec.get("resourceClaims")
    return isinstance(claims, list) and bool(claims) and unschedulable(status)


def claim_names(pod: Mapping[str, Any]) -> list[str] | AskError:
    """``namespace/name`` of each claim the pod references that exists by name."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not isinstance(spec, Mapping):
        return AskError("spec", "must be an object")
    if not isinstance(status, Mapping):
        status = {}
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in status.get("resourceClaimStatuses") or []
        if isinstance(s, Mapping)
    }
    names: list[str] = []
    for i, ref in enumerate(spec.get("resourceClaims") or []):
        if not isinstance(ref, Mapping) or not ref.get("name"):
            return AskError(f"spec.resourceClaims[{i}]", "resourceClaims entry: needs a name")
        name = ref.get("resourceClaimName") or generated.get(str(ref["name"]))
        if name:
            names.append(f"{namespace}/{name}")
    return names


def _asks(
    names: list[str], claims: Mapping[str, Mapping[str, Any]], device_class: str
) -> tuple[GPUAsk, ...] | AskError | None:
    asks: list[GPUAsk] = []
    for name in names:
        claim = claims.get(name)
        if claim is None or is_allocated(claim):
            return None  # not created yet, or placed: no new cell helps this pod now
        found = claim_asks(claim, device_class)
        if isinstance(found, AskError):
            return AskError(f"ResourceClaim {name}: {found.field}", found.message)
        asks += [GPUAsk(a.count, a.memory_mib, None, a.cores) for a in found]
    return tuple(asks)


def pending_claim_pod(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    device_class: str,
    first_seen: float,
) -> PendingPod | AskError | None:
    """The pod's HAMi asks as a ``PendingPod``; None when it is no HAMi demand (yet)."""
    names = claim_names(pod)
    if isinstance(names, AskError):
        return names
    asks = _asks(names, claims, device_class)
    if asks is None or isinstance(asks, AskError):
        return asks
    if not asks:
        return None  # its claims ask for no HAMi device
    constraints = constraints_from_pod(pod)
    if isinstance(constraints, AskError):
        return constraints
    container_asks = asks if len(asks) > 1 else ()
    return PendingPod(pod_key(pod), summarise(asks), first_seen, constraints, container_asks)
