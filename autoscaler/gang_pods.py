"""Booked gang capacity as the control loop sees it: placeholder pods in, consumers out.

Why this module exists: a ProvisioningRequest whose capacity is booked (Provisioned, not yet
BookingExpired) must hold that capacity for the gang's pods, and an atomic gang's cells must be
added in one decision. Cluster Autoscaler does both by injecting pods built from the request's
pod templates into its simulation and leaving out the real pods that consume the request. We
do the same in the pools' workload snapshots: they see one pending placeholder pod per member
not yet placed (the expander gives them to the booked pool), and no pool counts a pod annotated
``autoscaling.x-k8s.io/consume-provisioning-request`` with a booked request's name (the
placeholder stands for it). ``decide`` then packs all placeholders at once: one decision adds
every cell of the gang, and scale-down keeps the cells they pack onto. Pure functions over
manifests; ``autoscaler.gangs`` holds the registry and the controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.loop_ports import WorkloadSnapshot
from autoscaler.pod_index import PodIndex, index_pods
from autoscaler.policy.provreq import CLASS_ANNOTATION, CONSUME_ANNOTATION

JSON = dict[str, Any]
PLACEHOLDER_UID_PREFIX = "provisioning-request:"
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Booking:
    """Capacity held for one request on one pool until ``until`` (seconds, the loop's clock)."""

    namespace: str
    name: str
    class_name: str
    pool: tuple[str, str]  # (namespace, name) of the pool whose cells hold it
    templates: tuple[tuple[Mapping[str, Any], int], ...]  # (PodTemplate.template, count)
    until: float

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def members(self) -> int:
        return sum(count for _, count in self.templates)


def consumed_request(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, request name) a pod consumes, from Kueue's annotation; None if none."""
    meta = pod.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(CONSUME_ANNOTATION)
    return (str(meta.get("namespace") or "default"), str(name)) if name else None


def placed_consumers(by_node: Mapping[str, Sequence[JSON]]) -> dict[tuple[str, str], int]:
    """How many live pods bound to a Node consume each request."""
    counts: dict[tuple[str, str], int] = {}
    for pods in by_node.values():
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in _TERMINAL:
                continue
            request = consumed_request(pod)
            if request is not None:
                counts[request] = counts.get(request, 0) + 1
    return counts


def placeholders(
    booking: Booking, placed: int, scheduler: str, labels: Mapping[str, str]
) -> list[JSON]:
    """Pending pods for the members not placed yet, built from the request's pod templates.

    Each asks what its template asks, is pending and Unschedulable for ``scheduler`` and (with
    the pool's Node labels as extra nodeSelector) fits only pools whose Nodes look like the
    booked pool's. UIDs are stable, so the loop's first-seen times survive between decisions.
    """
    out: list[JSON] = []
    skip = placed
    for index, (template, count) in enumerate(booking.templates):
        meta, spec = dict(template.get("metadata") or {}), dict(template.get("spec") or {})
        for member in range(count):
            if skip > 0:
                skip -= 1
                continue
            name = f"{booking.name}-{index}-{member}"
            annotations = {
                **(meta.get("annotations") or {}),
                CONSUME_ANNOTATION: booking.name,
                CLASS_ANNOTATION: booking.class_name,
            }
            selector = {**(spec.get("nodeSelector") or {}), **labels}
            out.append(
                {
                    "metadata": {
                        **meta,
                        "name": name,
                        "namespace": booking.namespace,
                        "uid": f"{PLACEHOLDER_UID_PREFIX}{booking.namespace}/{name}",
                        "annotations": annotations,
                    },
                    "spec": {**spec, "schedulerName": scheduler, "nodeSelector": selector},
                    "status": {
                        "phase": "Pending",
                        "conditions": [
                            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                        ],
                    },
                }
            )
    return out


def with_bookings(
    snap: WorkloadSnapshot,
    bookings: Iterable[Booking],
    scheduler: str,
    labels: Mapping[tuple[str, str], Mapping[str, str]],
) -> WorkloadSnapshot:
    """``snap`` with the consumers of booked requests out and their placeholders in.

    Every pool of the cluster sees the same placeholders, as it sees the same real pods, so the
    expander (``policy.expander``) gives them to one pool: the booked one, which the controller
    chose by the same rule. ``labels`` maps a pool to its Node labels, which pin its
    placeholders to pools whose Nodes look alike.
    """
    held = list(bookings)
    if not held or not snap.synced:
        return snap
    index = snap.pod_index or index_pods(snap.pods)
    booked = {b.key for b in held}
    unbound = [p for p in index.unbound if consumed_request(p) not in booked]
    placed = placed_consumers(index.by_node)
    for booking in held:
        pins = labels.get(booking.pool, {})
        unbound += placeholders(booking, placed.get(booking.key, 0), scheduler, pins)
    return replace(snap, pod_index=PodIndex(tuple(unbound), index.by_node))
