"""Simulated disruption controller: PodDisruptionBudget status as kube-controller-manager writes it

Why this module exists: the Eviction API enforces a PodDisruptionBudget only through the PDB's
``status`` (``observedGeneration`` must have caught up, ``disruptionsAllowed`` must be > 0),
and that status is written by kube-controller-manager's disruption controller. The harness runs
no controller-manager, so this plays that controller for one namespace of the workload cluster,
following ``pkg/controller/disruption`` of Kubernetes:

* ``expectedPods`` / ``desiredHealthy``: ``minAvailable`` as an integer counts the matching
  pods; ``maxUnavailable`` (int or percent) and ``minAvailable`` as a percent use the summed
  scale (``spec.replicas``) of the pods' controllers (percent rounded up);
* ``currentHealthy``: matching pods that are Ready, not being deleted, and not listed in
  ``disruptedPods`` (entries the Eviction API added; they expire after two minutes or once the
  pod is deleted / terminating);
* ``disruptionsAllowed = max(0, currentHealthy - desiredHealthy)`` (0 when no pod is
  expected); ``observedGeneration = generation``; condition ``DisruptionAllowed``.

The status is written through the status subresource with a resourceVersion precondition, so it
never overwrites an Eviction API decrement it has not seen (a 409 is retried next tick).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from provisioner.clock import Clock
from provisioner.kube import JSON, KINDS, Kind, KubeApi, kind_of
from simulations.twin.common import PollingController, rfc3339

PDB = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
DELETION_TIMEOUT_S = 120.0  # the controller's DeletionTimeout for disruptedPods entries


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: null matches nothing, empty matches everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


def _ready(pod: JSON) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _scaled(value: int | str, total: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    pct = int(str(value).rstrip("%"))
    exact = pct * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def _parse_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _controller(pod: JSON) -> tuple[str, str, str] | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref["apiVersion"]), str(ref["kind"]), str(ref["name"])
    return None


def expected_and_desired(
    spec: Mapping[str, Any], pods: list[JSON], scales: Mapping[tuple[str, str, str], int]
) -> tuple[int, int]:
    """(expectedPods, desiredHealthy). ``scales``: spec.replicas of each pod controller;
    a pod without a (known) controller is skipped, as the real controller does."""
    min_available = spec.get("minAvailable")
    if spec.get("maxUnavailable") is None and isinstance(min_available, int):
        return len(pods), min_available
    owners = {c for p in pods if (c := _controller(p)) is not None and c in scales}
    expected = sum(scales[o] for o in owners)
    if spec.get("maxUnavailable") is not None:
        unavailable = _scaled(spec["maxUnavailable"], expected, round_up=True)
        return expected, max(0, expected - unavailable)
    if min_available is None:
        return expected, expected
    return expected, _scaled(min_available, expected, round_up=True)


def pdb_status(
    pdb: JSON, pods: list[JSON], scales: Mapping[tuple[str, str, str], int], now: float
) -> JSON:
    """The status the disruption controller would write for ``pdb`` (pods: the namespace's)."""
    spec = pdb.get("spec") or {}
    selector = spec.get("selector")
    matching = [p for p in pods if _selector_matches(selector, (p["metadata"].get("labels") or {}))]
    expected, desired = expected_and_desired(spec, matching, scales)
    by_name = {p["metadata"]["name"]: p for p in matching}
    disrupted: dict[str, str] = {}
    for name, stamp in ((pdb.get("status") or {}).get("disruptedPods") or {}).items():
        pod = by_name.get(name)
        if pod is None or pod["metadata"].get("deletionTimestamp") is not None:
            continue
        if _parse_time(stamp) + DELETION_TIMEOUT_S > now:
            disrupted[name] = stamp
    healthy = sum(
        1
        for p in matching
        if p["metadata"].get("deletionTimestamp") is None
        and p["metadata"]["name"] not in disrupted
        and _ready(p)
    )
    allowed = healthy - desired if expected > 0 and healthy > desired else 0
    reason = "SufficientPods" if allowed > 0 else "InsufficientPods"
    cond = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed > 0 else "False",
        "reason": reason,
        "message": "",
        "observedGeneration": pdb["metadata"].get("generation", 0),
        "lastTransitionTime": rfc3339(now),
    }
    return {
        "observedGeneration": pdb["metadata"].get("generation", 0),
        "disruptedPods": disrupted,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [cond],
    }


def _unchanged(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    keys = ("observedGeneration", "disruptionsAllowed", "currentHealthy", "desiredHealthy")
    same = all(old.get(k) == new.get(k) for k in (*keys, "expectedPods"))
    return same and (old.get("disruptedPods") or {}) == new["disruptedPods"]


@dataclass
class SimulatedDisruptionController(PollingController):
    """kube-controller-manager's disruption controller for one workload namespace."""

    workload: KubeApi
    clock: Clock
    namespace: str
    poll_s: float = 0.1

    async def _scales(self, pods: list[JSON]) -> dict[tuple[str, str, str], int]:
        scales: dict[tuple[str, str, str], int] = {}
        for owner in {c for p in pods if (c := _controller(p)) is not None}:
            obj = await self.workload.get(kind_of(owner[1], owner[0]), self.namespace, owner[2])
            if obj is not None:
                scales[owner] = int((obj.get("spec") or {}).get("replicas", 1))
        return scales

    async def step(self) -> None:
        pdbs = await self.workload.list(PDB, self.namespace)
        if not pdbs:
            return
        pods = await self.workload.list(KINDS["Pod"], self.namespace)
        scales = await self._scales(pods)
        now = self.clock.now()
        for pdb in pdbs:
            old = pdb.get("status") or {}
            new = pdb_status(pdb, pods, scales, now)
            if _unchanged(old, new):
                continue
            gone = set(old.get("disruptedPods") or {}) - set(new["disruptedPods"])
            dropped = dict.fromkeys(gone)
            body = {**new, "disruptedPods": {**dropped, **new["disruptedPods"]}}
            meta = pdb["metadata"]
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": body}
            await self.workload.patch(PDB, self.namespace, meta["name"], patch, status=True)
