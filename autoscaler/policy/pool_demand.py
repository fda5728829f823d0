"""Which pending pods a pool counts as its demand (pure).

Why this module exists: several parts ask the same question of a raw Pod manifest - the loop
building a pool's observation, the router waking the pools a pod event concerns, the expander
sharing a pod among pools, the gang controller choosing a pool - and they must agree to the
letter. The answer is hami-facts §3.3 (``is_pending_hami_pod``) in DevicePlugin mode or a pod
waiting on HAMi ResourceClaims in DRA mode (``dra_demand``), inside the pool's demand selection
(schedulerName, podSelector, namespaceSelector with ``metav1.LabelSelector`` semantics). The
first time each pod was seen pending is remembered by the caller and passed in, so a pod's wait
survives across decisions. ``autoscaler.observe`` builds the rest of the observation.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from autoscaler.policy.bind_in_flight import bind_in_flight
from autoscaler.policy.demand import is_pending_hami_pod, pending_pod_from_manifest
from autoscaler.policy.dra_demand import dra_scheduler_name, pending_claim_pod, waits_on_claims
from autoscaler.policy.errors import AskError
from autoscaler.policy.hami_dra import claim_usage
from autoscaler.policy.types import GPUUsage, PendingPod
from gpucellpool.api.autoscaling import DemandSelection
from gpucellpool.api.base import LabelSelector
from gpucellpool.api.pool import GPUCellPool

JSON = dict[str, Any]


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A manifest's ``metadata`` (empty when absent or not an object)."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def label_pairs(obj: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """A manifest's labels as (key, value) pairs (entries that are not strings left out)."""
    labels = metadata(obj).get("labels")
    if not isinstance(labels, Mapping):
        return frozenset()
    return frozenset((k, v) for k, v in labels.items() if isinstance(k, str) and isinstance(v, str))


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics; None matches everything."""
    if selector is None:
        return True
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    return all(
        _requirement(str(r.operator), r.key, set(r.values or ()), labels)
        for r in selector.match_expressions or []
    )


def _requirement(op: str, key: str, values: set[str], labels: Mapping[str, str]) -> bool:
    present = key in labels
    inside = present and labels[key] in values
    return {"In": inside, "NotIn": not inside, "Exists": present, "DoesNotExist": not present}.get(
        op, False
    )


def hami_mode(pool: GPUCellPool) -> str:
    """``DRA`` or ``DevicePlugin``: where the pool's HAMi keeps capacity and asks."""
    hami = pool.spec.capacity.hami
    return "DRA" if hami is not None and hami.mode == "DRA" else "DevicePlugin"


def counts_as_demand(
    pod: Mapping[str, Any],
    selection: DemandSelection,
    namespace_labels: Mapping[str, str] | None,
    mode: str | None = None,
) -> bool:
    """Pending for HAMi and inside the pool's demand selection.

    ``mode`` (``hami_mode``): only device-plugin pods, or only pods waiting on claims (DRA);
    None: either (routing, which may wake a pool too many).

    The selectors are checked first: they are cheap, and with many pools sharing a cluster
    most pods belong to another pool (the HAMi predicate costs ~10x a label match).
    """
    if not selector_matches(selection.pod_selector, metadata(pod).get("labels") or {}):
        return False
    if selection.namespace_selector is not None and not (
        namespace_labels is not None
        and selector_matches(selection.namespace_selector, namespace_labels)
    ):
        return False
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    scheduler = selection.scheduler_name or str((spec or {}).get("schedulerName", ""))
    if mode != "DRA" and is_pending_hami_pod(pod, scheduler):
        return True
    dra_scheduler = dra_scheduler_name(selection.scheduler_name)
    return mode != "DevicePlugin" and waits_on_claims(pod, dra_scheduler)


def _pending_pod(
    pool: GPUCellPool, pod: JSON, seen: float, claims: Mapping[str, JSON] | None
) -> PendingPod | AskError | None:
    """Device-plugin pods by their resources; in DRA mode, pods waiting on HAMi claims by the
    claims' requests (``claims`` by ``namespace/name``); None: not this pool's kind of pod."""
    hami = pool.spec.capacity.hami
    if hami is not None and hami.mode == "DRA":
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        if claims is None or not (spec or {}).get("resourceClaims"):
            return None
        return pending_claim_pod(pod, claims, hami.device_class_name or "", seen)
    parsed = pending_pod_from_manifest(pod, seen)
    if isinstance(parsed, AskError) and waits_on_claims(pod, ""):
        return None  # a pod of HAMi DRA (no device-plugin resources): not this pool's demand
    return parsed


Parsed = PendingPod | AskError | None
ParseMemo = MutableMapping[str, tuple[Mapping[str, Any], float, Parsed]]


def pending_for_pool(
    pool: GPUCellPool,
    pods: Iterable[JSON],
    namespace_labels: Mapping[str, Mapping[str, str]],
    first_seen: Mapping[str, float],
    claims: Mapping[str, JSON] | None = None,
    memo: ParseMemo | None = None,
    now: float | None = None,
    cell_nodes: Container[str] | None = None,
) -> tuple[tuple[PendingPod, ...], tuple[tuple[str, AskError], ...]]:
    """The pool's pending pods (with remembered first-seen times) and the malformed ones.

    ``claims``: the workload cluster's ResourceClaims by ``namespace/name`` (DRA mode).
    ``memo`` (the caller's, per pool; device-plugin mode only): each pod's parse by UID, reused
    while the pod is the same object with the same first-seen time (a cached manifest is
    replaced, never edited, when the pod changes), so a pool's decision does not re-read the
    asks of pods that waited through earlier decisions; entries are added, never pruned.
    ``now`` (Unix seconds; None: no such test): pods HAMi has placed on one of
    ``cell_nodes`` (the pool's cells' Nodes) whose bind is in flight are left out
    (``bind_in_flight``)."""
    selection = pool.spec.autoscaling.demand
    out: list[PendingPod] = []
    bad: list[tuple[str, AskError]] = []
    for pod in pods:
        meta = metadata(pod)
        ns_labels = namespace_labels.get(str(meta.get("namespace", "")))
        if not counts_as_demand(pod, selection, ns_labels):
            continue
        if now is not None and bind_in_flight(pod, now, cell_nodes):
            continue
        uid = str(meta.get("uid", ""))
        seen = first_seen.get(uid)
        if seen is None:
            continue  # the caller records first_seen before building; never guess "now"
        kept = memo.get(uid) if memo is not None and claims is None else None
        if kept is not None and kept[0] is pod and kept[1] == seen:
            parsed = kept[2]
        else:
            parsed = _pending_pod(pool, pod, seen, claims)
            if memo is not None and claims is None:
                memo[uid] = (pod, seen, parsed)
        if parsed is None:
            continue
        if isinstance(parsed, AskError):
            bad.append((f"{meta.get('namespace')}/{meta.get('name')}", parsed))
        else:
            out.append(parsed)
    out.sort(key=lambda p: (p.first_seen, p.key))
    return tuple(out), tuple(bad)


def claim_inputs(
    pool: GPUCellPool, claims: Sequence[JSON], slices: Sequence[JSON], gpus: int
) -> tuple[dict[str, JSON] | None, dict[str, tuple[GPUUsage, ...]] | None]:
    """HAMi DRA mode: the claims by ``namespace/name`` (for ``pending_for_pool``) and the usage
    they hold per Node (for ``CellInputs.claim_usage``); (None, None) in device-plugin mode."""
    hami = pool.spec.capacity.hami
    if hami is None or hami.mode != "DRA":
        return None, None
    by_key = {f"{metadata(c).get('namespace')}/{metadata(c).get('name')}": c for c in claims}
    return by_key, claim_usage(slices, claims, hami.device_class_name or "", gpus)


def remember_first_seen(
    previous: Mapping[str, float], pending_uids: Iterable[str], now: float
) -> dict[str, float]:
    """Keep the first time each still-pending UID was seen; forget pods no longer pending."""
    return {uid: previous.get(uid, now) for uid in pending_uids}
