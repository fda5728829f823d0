"""Small, tolerant reads of a stored pool: replicas, reachability, whether it has cells.

Why this module exists: update and scale rules judge a change against the *stored* object,
which was admitted under possibly older rules and carries operator-written status. These reads
never fail: a missing or odd field falls back to the CRD default or to "unknown", so a broken
old object cannot make the webhook raise (and so block every further change to the pool).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucellpool.api.conditions import ConditionType
from webhook.rules.paths import get

DEFAULT_REPLICAS = 1
INT64_MAX = 2**63 - 1
REACHABLE = ConditionType.WORKLOAD_CLUSTER_REACHABLE.value


def int_at(obj: Any, *keys: str) -> int | None:
    """An integer (never a bool) at the path, else None."""
    value = get(obj, *keys)
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > INT64_MAX:
        return None  # beyond int64 nothing Kubernetes stores (and str() may refuse it)
    return value


def spec_replicas(pool: Any) -> int:
    """spec.replicas with the CRD default (1) when absent or odd."""
    value = int_at(pool, "spec", "replicas")
    return DEFAULT_REPLICAS if value is None else value


def reachability(pool: Any) -> tuple[bool, str]:
    """(may scale down, why not) from the stored WorkloadClusterReachable condition.

    An absent condition allows (the original's rule 11): a brand-new pool has not probed yet.
    """
    conditions = get(pool, "status", "conditions")
    if not isinstance(conditions, list):
        return True, ""
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == REACHABLE:
            if cond.get("status") == "True":
                return True, ""
            reason = cond.get("reason")
            detail = f"{cond.get('status')}/{reason}" if isinstance(reason, str) else "not True"
            return False, f"{REACHABLE} is {detail}"
    return True, ""


def has_cells(pool: Any) -> bool:
    """Whether the stored pool has, or is about to have, cells (a "live" pool)."""
    status_replicas = int_at(pool, "status", "replicas") or 0
    cells = get(pool, "status", "cells")
    floor = int_at(pool, "spec", "autoscaling", "minReplicas") or 0
    enabled = get(pool, "spec", "autoscaling", "enabled") is True
    return (
        status_replicas > 0
        or (isinstance(cells, list) and len(cells) > 0)
        or spec_replicas(pool) > 0
        or (enabled and floor > 0)
    )


def value_or(pool: Any, default: Any, *keys: str) -> Any:
    """The value at the path, or ``default`` when it is absent (None)."""
    value = get(pool, *keys)
    return default if value is None else value
