"""The one-time managed-fields upgrade from the old merge-patch writer to server-side apply.

An older provisioner owned status fields as ``gpucellpool`` (operation Update, subresource
status); the upgrade moves the fields the provisioner owns now into the new manager's Apply
entry and drops the old entry, leaving every other entry and every foreign field alone.
"""

from __future__ import annotations

from typing import Any

from provisioner.fsm.field_ownership import owned_status_fields, upgraded_managed_fields

OLD, NEW = "gpucellpool", "gpucellpool-provisioner"
KEYS = frozenset({"cells", "readyCells"})
CONDS = frozenset({"Ready"})


def _fields(*conditions: str, **keys: Any) -> dict[str, Any]:
    status: dict[str, Any] = {f"f:{k}": v for k, v in keys.items()}
    if conditions:
        status["f:conditions"] = {
            f'k:{{"type":"{c}"}}': {".": {}, "f:status": {}, "f:type": {}} for c in conditions
        }
    return {"f:status": status}


def _entry(manager: str, operation: str, fields: dict[str, Any], sub: str = "status") -> Any:
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "cells.kubeswift.io/v1alpha1",
        "time": "2026-11-30T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if sub:
        entry["subresource"] = sub
    return entry


FINALIZER = _entry(OLD, "Update", {"f:metadata": {"f:finalizers": {}}}, sub="")
AUTOSCALER = _entry("gpucellpool-autoscaler", "Apply", _fields("ScalingActive", lastDecision={}))


def upgrade(entries: list[Any]) -> list[Any] | None:
    return upgraded_managed_fields(
        entries, old_manager=OLD, new_manager=NEW, owned_keys=KEYS, owned_conditions=CONDS
    )


def test_only_our_fields_move_and_the_old_status_entry_goes() -> None:
    legacy = _entry(OLD, "Update", _fields("Ready", "ScalingActive", cells={}, lastDecision={}))
    out = upgrade([FINALIZER, AUTOSCALER, legacy])
    assert out is not None
    assert out[:2] == [FINALIZER, AUTOSCALER], "other entries (the finalizer's too) untouched"
    (moved,) = out[2:]
    assert (moved["manager"], moved["operation"], moved["subresource"]) == (NEW, "Apply", "status")
    status = moved["fieldsV1"]["f:status"]
    assert set(status) == {"f:cells", "f:conditions"}, "lastDecision is not claimed"
    assert set(status["f:conditions"]) == {'k:{"type":"Ready"}'}, "nor ScalingActive"


def test_fields_merge_into_an_existing_apply_entry() -> None:
    legacy = _entry(OLD, "Update", _fields("Ready", readyCells={}))
    current = _entry(NEW, "Apply", _fields(cells={}))
    out = upgrade([legacy, current])
    assert out is not None and len(out) == 1
    assert set(out[0]["fieldsV1"]["f:status"]) == {"f:cells", "f:readyCells", "f:conditions"}
    assert current["fieldsV1"] == _fields(cells={}), "the input is not mutated"


def test_nothing_to_do_without_the_old_entry_so_the_upgrade_is_idempotent() -> None:
    legacy = _entry(OLD, "Update", _fields("Ready", cells={}))
    once = upgrade([FINALIZER, legacy])
    assert once is not None
    assert upgrade(once) is None
    assert upgrade([FINALIZER, AUTOSCALER]) is None


def test_an_old_entry_with_nothing_of_ours_is_just_dropped() -> None:
    legacy = _entry(OLD, "Update", _fields("ScalingActive", lastDecision={}))
    assert upgrade([AUTOSCALER, legacy]) == [AUTOSCALER]


def test_unreadable_condition_keys_are_not_claimed() -> None:
    fields: dict[str, Any] = {
        "f:status": {"f:conditions": {"k:{not json": {}, 'k:{"type":"Ready"}': {}}}
    }
    kept = owned_status_fields(fields, KEYS, CONDS)
    assert kept == {"f:status": {"f:conditions": {'k:{"type":"Ready"}': {}}}}
