"""Moving the provisioner's status ownership from a merge patch to server-side apply, once.

Why this module exists: an older provisioner wrote the pool's status with a JSON merge patch
as field manager ``gpucellpool``; the apiserver recorded that as an ``Update`` entry on the
``status`` subresource in ``metadata.managedFields``. The provisioner now server-side-applies
its status fields under its own manager. A field the old entry owns and the new applies stop
sending (a cell row that is gone, a condition no longer set) would stay owned by the old
manager and never be removed. The Kubernetes documentation's answer for upgrading a writer
from client-side to server-side apply is a one-time rewrite of ``managedFields``: the old
manager's fields move into the new manager's ``Apply`` entry and the old entry goes.

This rewrite moves only what the provisioner owns now (``owned_keys`` at the top of
``status``, and the ``conditions`` entries of ``owned_conditions``): a field the old merge
patch happened to carry for someone else (the autoscaler's ``ScalingActive``, sent back with
the whole list) is not claimed, so the next apply cannot delete it. Pure: the shell
(``provisioner.status``) reads the live object, writes the result with a ``resourceVersion``
precondition, and does nothing when this returns None (idempotent).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

JSON = dict[str, Any]
STATUS_SUBRESOURCE = "status"
CONDITIONS = "f:conditions"


def is_legacy_status_entry(entry: Mapping[str, Any], old_manager: str) -> bool:
    """Whether ``entry`` is ``old_manager``'s merge-patch (``Update``) ownership of status."""
    return (
        entry.get("manager") == old_manager
        and entry.get("operation") == "Update"
        and entry.get("subresource") == STATUS_SUBRESOURCE
    )


def _owned_condition(key: str, owned_conditions: frozenset[str]) -> bool:
    """``k:{"type":"Ready"}`` -> whether ``Ready`` is ours (other keys: list-level, keep)."""
    if not key.startswith("k:"):
        return True
    try:
        fields = json.loads(key[2:])
    except ValueError:
        return False
    return isinstance(fields, dict) and fields.get("type") in owned_conditions


def owned_status_fields(
    fields_v1: Mapping[str, Any], owned_keys: frozenset[str], owned_conditions: frozenset[str]
) -> JSON:
    """The part of a ``fieldsV1`` set that lies in the provisioner's status fields."""
    status = fields_v1.get("f:status")
    if not isinstance(status, Mapping):
        return {}
    kept: JSON = {}
    for key, value in status.items():
        if key == CONDITIONS and isinstance(value, Mapping):
            ours = {k: v for k, v in value.items() if _owned_condition(k, owned_conditions)}
            if any(k.startswith("k:") for k in ours):
                kept[key] = ours
        elif key.startswith("f:") and key[2:] in owned_keys:
            kept[key] = value
    return {"f:status": kept} if kept else {}


def merged(a: Mapping[str, Any], b: Mapping[str, Any]) -> JSON:
    """The union of two ``fieldsV1`` trees."""
    out: JSON = dict(a)
    for key, value in b.items():
        mine = out.get(key)
        both = isinstance(mine, Mapping) and isinstance(value, Mapping)
        out[key] = merged(mine, value) if both else value  # type: ignore[arg-type]
    return out


def upgraded_managed_fields(
    entries: Sequence[Mapping[str, Any]],
    *,
    old_manager: str,
    new_manager: str,
    owned_keys: frozenset[str],
    owned_conditions: frozenset[str],
) -> list[JSON] | None:
    """``entries`` with ``old_manager``'s status ``Update`` entries folded into
    ``new_manager``'s status ``Apply`` entry (created when missing), keeping only the fields
    the new manager owns; None when there is no such old entry (nothing to do). Every other
    entry (the autoscaler's, the old manager's finalizer patches) is left as it is."""
    old = [e for e in entries if is_legacy_status_entry(e, old_manager)]
    if not old:
        return None
    moved: JSON = {}
    for entry in old:
        fields = entry.get("fieldsV1")
        if isinstance(fields, Mapping):
            moved = merged(moved, owned_status_fields(fields, owned_keys, owned_conditions))
    out: list[JSON] = []
    target: JSON | None = None
    for entry in entries:
        if is_legacy_status_entry(entry, old_manager):
            continue
        copy = dict(entry)
        if _is_apply_entry(copy, new_manager):
            target = copy
        out.append(copy)
    if not moved:
        return out
    if target is None:
        target = _apply_entry(old[0], new_manager)
        out.append(target)
    current = target.get("fieldsV1")
    target["fieldsV1"] = merged(current if isinstance(current, Mapping) else {}, moved)
    return out


def _is_apply_entry(entry: Mapping[str, Any], manager: str) -> bool:
    return (
        entry.get("manager") == manager
        and entry.get("operation") == "Apply"
        and entry.get("subresource") == STATUS_SUBRESOURCE
    )


def _apply_entry(template: Mapping[str, Any], manager: str) -> JSON:
    """A new ``Apply`` entry for ``manager`` on status, dated and versioned as ``template``."""
    entry: JSON = {
        "manager": manager,
        "operation": "Apply",
        "subresource": STATUS_SUBRESOURCE,
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    }
    for key in ("apiVersion", "time"):
        if key in template:
            entry[key] = template[key]
    return entry
