"""The provisioner's status ownership on a real apiserver: server-side apply, upgraded once.

What this proves, on a pool whose status an older provisioner wrote the old way (a JSON merge
patch on the status subresource as field manager ``gpucellpool``, which the apiserver records
as an ``Update`` entry): without the managed-fields upgrade, a condition of the provisioner's
that the new apply no longer sends stays for ever (the old manager still owns it); the cell
rows do not (``status.cells`` is an atomic list: the forced apply takes the whole list over),
nor does a part of ``workloadCapacity`` the new reading lacks (an atomic object, likewise);
``write_status`` upgrades the pool once (the old entry's fields move to
``gpucellpool-provisioner``'s Apply entry), so the condition is removed, the autoscaler's
``ScalingActive`` (even the copy the old patch clobbered) is kept, a second write does not
rewrite managedFields again, and an unchanged apply changes nothing (no new resourceVersion, so
no watch event wakes the autoscaler).
"""

from __future__ import annotations

from typing import Any

import yaml

from gpucellpool.api import GPUCellPool
from gpucellpool.api.status import CellPhase, CellStatus
from gpucellpool.kube.rest import client_from_kubeconfig
from gpucellpool.operator.adapters import pool_path
from provisioner.kube import FIELD_MANAGER, JSON, KINDS, STATUS_FIELD_MANAGER, KubeApi
from provisioner.status import status_patch, write_status
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    RecordingKubeApi,
    apis,  # noqa: F401  (fixture)
    cond,
    status,
)

AT = "2026-11-30T10:00:00Z"
ROWS = [
    CellStatus(name=f"old-{i}", index=i, phase=CellPhase.READY, reason="Ready") for i in range(2)
]


def _cond(type_: str, reason: str, state: str = "True") -> JSON:
    return {"type": type_, "status": state, "reason": reason, "lastTransitionTime": AT}


async def _written_the_old_way(api: KubeApi, infra: ClusterEndpoint, namespace: str) -> JSON:
    """A pool whose ScalingActive the autoscaler applied, then whose status an older
    provisioner merge-patched (two rows, its conditions, among them a Degraded the new one
    no longer sends, the whole list with a stale ScalingActive)."""
    pool = swiftguest_pool("old", namespace, replicas=2)
    await api.apply(pool)
    autoscaler = await client_from_kubeconfig(yaml.safe_load(infra.kubeconfig_path.read_text()))
    try:
        body = {**{k: pool[k] for k in ("apiVersion", "kind")}, "metadata": pool["metadata"]}
        applied = {**body, "status": {"conditions": [_cond("ScalingActive", "ScaledUp")]}}
        await autoscaler.apply_status(pool_path(namespace, "old"), applied)
    finally:
        await autoscaler.close()
    old_status: dict[str, Any] = {
        "replicas": 2,
        "readyCells": 2,
        "cells": [r.to_api() for r in ROWS],
        "workloadCapacity": {"provider": "HAMi", "gpuDevices": 2, "gpuCompute": {"total": "200"}},
        "conditions": [
            _cond("Ready", "AllCellsReady"),
            _cond("Degraded", "AdmissionRulesFailed"),
            _cond("ScalingActive", "Stale"),
        ],
    }
    kind = KINDS["GPUCellPool"]
    await api.patch(kind, namespace, "old", {"status": old_status}, status=True)
    stored = await api.get(kind, namespace, "old")
    assert stored is not None
    return stored


def _managers(pool: JSON | None) -> set[tuple[str, str, str]]:
    entries = ((pool or {}).get("metadata") or {}).get("managedFields") or []
    return {(e["manager"], e["operation"], e.get("subresource", "")) for e in entries}


def _one_row_left(stored: JSON) -> JSON:
    """What the new provisioner applies: one row (old-1 is gone), its own Ready."""
    pool = GPUCellPool.model_validate(stored)
    return status_patch(pool, ROWS[:1], [_cond("Ready", "CellsNotReady", "False")], 2)


async def test_without_the_upgrade_a_condition_the_old_writer_owned_would_never_go(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    infra: ClusterEndpoint,
    namespace: str,
) -> None:
    api = apis[0]
    stored = await _written_the_old_way(api, infra, namespace)
    assert (FIELD_MANAGER, "Update", "status") in _managers(stored)
    body = _one_row_left(stored)
    body["status"].pop("desiredReplicas")
    mixed = {"provider": "HAMi", "gpuDevices": 2, "homogeneous": False}  # no gpuCompute
    body["status"]["workloadCapacity"] = mixed
    await api.apply(body, status=True, field_manager=STATUS_FIELD_MANAGER)  # no upgrade
    after = await api.get(KINDS["GPUCellPool"], namespace, "old")
    assert cond(after, "Degraded")["reason"] == "AdmissionRulesFailed", "still the old one's"
    assert [r["name"] for r in status(after)["cells"]] == ["old-0"], "an atomic list: taken over"
    assert status(after)["workloadCapacity"] == mixed, "an atomic object: taken over whole"


async def test_the_upgrade_moves_our_fields_once_and_keeps_the_autoscalers(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    infra: ClusterEndpoint,
    namespace: str,
) -> None:
    recording = RecordingKubeApi(apis[0])
    stored = await _written_the_old_way(apis[0], infra, namespace)
    kind = KINDS["GPUCellPool"]

    await write_status(recording, GPUCellPool.model_validate(stored), _one_row_left(stored))

    after = await apis[0].get(kind, namespace, "old")
    assert [r["name"] for r in status(after)["cells"]] == ["old-0"], "old-1's row is removed"
    assert cond(after, "Ready")["reason"] == "CellsNotReady"
    assert all(c["type"] != "Degraded" for c in status(after)["conditions"]), "upgraded: gone"
    assert cond(after, "ScalingActive")["reason"] == "Stale", "not claimed, so not deleted"
    managers = _managers(after)
    assert (FIELD_MANAGER, "Update", "status") not in managers
    assert (STATUS_FIELD_MANAGER, "Apply", "status") in managers
    writes = [(c.verb, c.kind, c.outcome) for c in recording.calls]
    assert ("patch", "GPUCellPool", "ok") in writes, "managedFields rewritten once"

    recording.calls.clear()
    assert after is not None
    again = _one_row_left(after)
    await write_status(recording, GPUCellPool.model_validate(after), again)
    assert [c.verb for c in recording.calls] == ["apply"], "no second upgrade, one write"
    final = await apis[0].get(kind, namespace, "old")
    assert final is not None
    same = final["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
    assert same, "an unchanged apply changes nothing"
