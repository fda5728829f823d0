"""The pool's ``CapacityProviderReady`` condition: is HAMi there, and can its records be read?

Why this module exists: a cell is Ready only when HAMi advertises its GPU, so when every cell
sits in AwaitingGPUCapacity the user needs one place that says why: HAMi is not installed on the
cell Nodes, it writes something this operator cannot parse, or (DRA mode) the workload cluster
lacks the DRA API or HAMi's DeviceClass. Reasons are the earlier implementation's
(original-gpucellpool.md, conditions table); each has a runbook entry (docs/runbook.md).

Judged over the cell Nodes that joined and are Ready (those HAMi should have registered on):

* DevicePlugin mode, from each Node's ``hami.io/node-nvidia-register`` annotation;
* DRA mode, from the HAMi devices in the Node's ResourceSlices, after two cluster-wide checks:
  the ``resource.k8s.io`` API is served (``DRAFeatureGateMissing``) and the pool's DeviceClass
  exists (``DRADeviceClassMissing``).

Order: a Node whose registration cannot be parsed (``RegistrationUnparseable``, False) before
any that can (``HAMiDetected``, True), before a Node that has waited longer than the grace
without any (``HAMiNotDetected``, False). With no such Node yet the condition is Unknown
(``AwaitingRegistration``, ours): nothing is known to be wrong.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from gpucellpool.api.conditions import CapacityProviderReason as Reason
from provisioner.fsm.capacity import register_devices

MAX_NAMED = 5


class Registration(enum.StrEnum):
    """What HAMi left on one Ready cell Node."""

    DETECTED = "detected"
    UNPARSEABLE = "unparseable"
    MISSING = "missing"


@dataclass(frozen=True, slots=True)
class NodeRegistration:
    """One Ready cell Node: its registration and since when it has been waiting for one."""

    node: str
    registration: Registration
    waiting_since_s: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DraCluster:
    """DRA mode's cluster-wide facts; None: could not be read this pass."""

    api_served: bool | None
    device_class: str
    device_class_present: bool | None


def annotation_registration(annotation: str | None) -> Registration:
    """DevicePlugin mode: what ``hami.io/node-nvidia-register`` says (absent: nothing yet)."""
    if not (annotation or "").strip():
        return Registration.MISSING
    if register_devices(annotation) is None:
        return Registration.UNPARSEABLE
    return Registration.DETECTED


def _names(nodes: Sequence[NodeRegistration]) -> str:
    shown = ", ".join(n.node for n in nodes[:MAX_NAMED])
    more = len(nodes) - MAX_NAMED
    return f"{shown} and {more} more" if more > 0 else shown


def _dra_blocker(dra: DraCluster) -> tuple[str, str, str] | None:
    if dra.api_served is False:
        msg = "the workload cluster does not serve resource.k8s.io/v1 (DRA disabled)"
        return "False", Reason.DRA_FEATURE_GATE_MISSING, msg
    if dra.device_class_present is False:
        msg = f"DeviceClass {dra.device_class} not found in the workload cluster"
        return "False", Reason.DRA_DEVICE_CLASS_MISSING, msg
    return None


def provider_condition(
    nodes: Sequence[NodeRegistration],
    now_s: float,
    grace_s: float,
    dra: DraCluster | None = None,
) -> tuple[str, str, str]:
    """(status, reason, message) of ``CapacityProviderReady``; ``dra`` None: DevicePlugin."""
    if dra is not None and (blocker := _dra_blocker(dra)) is not None:
        return blocker
    where = "ResourceSlices" if dra is not None else "hami.io/node-nvidia-register"
    bad = [n for n in nodes if n.registration is Registration.UNPARSEABLE]
    if bad:
        detail = f": {bad[0].detail}" if bad[0].detail else ""
        msg = f"HAMi {where} of {_names(bad)} cannot be read{detail}"
        return "False", Reason.REGISTRATION_UNPARSEABLE, msg
    found = [n for n in nodes if n.registration is Registration.DETECTED]
    if found:
        return "True", Reason.HAMI_DETECTED, f"HAMi registered on {len(found)} cell Node(s)"
    late = [n for n in nodes if now_s - n.waiting_since_s > grace_s]
    if late:
        msg = f"no HAMi {where} on {_names(late)} after {grace_s:.0f}s"
        return "False", Reason.HAMI_NOT_DETECTED, msg
    msg = "no Ready cell Node yet" if not nodes else f"waiting for HAMi {where}"
    return "Unknown", Reason.AWAITING_REGISTRATION, msg
