"""Read a pod's placement constraints (nodeSelector, required node affinity, tolerations).

Why this module exists: pool fit (``fit.constraints_fit``) needs them as typed values, and pod
manifests are untrusted dicts. Malformed parts come back as an ``AskError`` naming the field.
``preferred`` affinity and ``PreferNoSchedule`` never rule a pool out, so they are not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.policy.errors import AskError
from autoscaler.policy.types import NodeSelectorRequirement, PlacementConstraints, Toleration

# A matchFields term (metadata.name) can never name a cell that does not exist yet; we encode it
# as a requirement on a label key no Node carries, so pool fit rejects it.
MATCH_FIELDS_KEY_PREFIX = "matchFields/"


def _requirements(
    items: object, where: str, prefix: str = ""
) -> list[NodeSelectorRequirement] | AskError:
    if not isinstance(items, list):
        return AskError(where, f"{where}: expected a list")
    out: list[NodeSelectorRequirement] = []
    for i, req in enumerate(items):
        values = req.get("values") or [] if isinstance(req, Mapping) else None
        if not isinstance(req, Mapping) or not isinstance(values, list):
            return AskError(f"{where}[{i}]", f"{where}[{i}]: malformed requirement")
        key, op = req.get("key"), req.get("operator")
        if not isinstance(key, str) or not isinstance(op, str):
            return AskError(f"{where}[{i}]", f"{where}[{i}]: key and operator must be strings")
        out.append(NodeSelectorRequirement(prefix + key, op, tuple(str(v) for v in values)))
    return out


def _affinity_terms(
    spec: Mapping[str, Any],
) -> tuple[tuple[NodeSelectorRequirement, ...], ...] | AskError:
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = spec.get("affinity") or {}
    node_aff = affinity.get("nodeAffinity") or {} if isinstance(affinity, Mapping) else None
    required = node_aff.get(where.rsplit(".", 1)[1]) if isinstance(node_aff, Mapping) else None
    if required is None:
        return () if node_aff is not None else AskError(where, f"{where}: malformed affinity")
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list):
        return AskError(where, f"{where}.nodeSelectorTerms: expected a list")
    out: list[tuple[NodeSelectorRequirement, ...]] = []
    for i, term in enumerate(terms):
        if not isinstance(term, Mapping):
            return AskError(f"{where}[{i}]", f"{where}.nodeSelectorTerms[{i}]: not an object")
        reqs = _requirements(term.get("matchExpressions") or [], f"{where}[{i}].matchExpressions")
        fields = _requirements(
            term.get("matchFields") or [], f"{where}[{i}].matchFields", MATCH_FIELDS_KEY_PREFIX
        )
        if isinstance(reqs, AskError):
            return reqs
        if isinstance(fields, AskError):
            return fields
        out.append(tuple(reqs + fields))
    return tuple(out)


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...] | AskError:
    items = spec.get("tolerations") or []
    if not isinstance(items, list):
        return AskError("spec.tolerations", "spec.tolerations: expected a list")
    out: list[Toleration] = []
    for i, tol in enumerate(items):
        if not isinstance(tol, Mapping):
            return AskError(f"spec.tolerations[{i}]", f"spec.tolerations[{i}]: not an object")
        out.append(
            Toleration(
                key=str(tol.get("key") or ""),
                operator=str(tol.get("operator") or "Equal"),
                value=str(tol.get("value") or ""),
                effect=str(tol.get("effect") or ""),
            )
        )
    return tuple(out)


def constraints_from_pod(pod: Mapping[str, Any]) -> PlacementConstraints | AskError:
    """nodeSelector, required node affinity and tolerations: what pool fit tests."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        return AskError("spec", "spec: missing or not an object")
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        return AskError("spec.nodeSelector", "spec.nodeSelector: expected an object")
    terms = _affinity_terms(spec)
    if isinstance(terms, AskError):
        return terms
    tolerations = _tolerations(spec)
    if isinstance(tolerations, AskError):
        return tolerations
    node_selector = {str(k): str(v) for k, v in selector.items()}
    return PlacementConstraints(node_selector, terms, tolerations)
