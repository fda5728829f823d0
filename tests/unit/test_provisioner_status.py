"""The provisioner's status apply: only its own fields, all of them, under its own manager.

Status is server-side-applied (field manager ``gpucellpool-provisioner``): the body carries the
provisioner's fields and conditions and nothing of the autoscaler's, so no precondition or
rebase is needed; a field left out would be removed, so values this pass did not compute are
sent back as stored. These tests pin the body and the writes; the two writers interleaved on a
real apiserver are in tests/integration/test_provisioner_status_race.py, the managed-fields
upgrade in tests/integration/test_provisioner_status_ownership.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml

from gpucellpool.api import GPUCellPool
from gpucellpool.api.status import CellPhase, CellStatus, PlanRejection
from provisioner.fsm.capacity import CellCapacity, Device
from provisioner.fsm.pool_capacity import workload_capacity
from provisioner.kube import (
    JSON,
    REPLICAS_FIELD_MANAGER,
    STATUS_FIELD_MANAGER,
    Kind,
    KubeApi,
)
from provisioner.status import (
    PassSummary,
    capacity_status,
    own_conditions,
    status_patch,
    write_status,
)
from provisioner.workload import Reachability

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"
T0 = "2026-11-30T10:00:00Z"
T1 = "2026-11-30T10:05:00Z"


def _cond(type_: str, status: str, reason: str, at: str = T0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "lastTransitionTime": at}


def _pool(autoscaling: bool = False, rv: str = "100", desired: int | None = None) -> GPUCellPool:
    body = yaml.safe_load((SAMPLES / "autoscaling-off.yaml").read_text())
    body["metadata"].update(
        {"namespace": "ns", "uid": "u-1", "resourceVersion": rv, "generation": 4}
    )
    body["spec"]["autoscaling"]["enabled"] = autoscaling
    body["status"] = {
        "conditions": [
            _cond("ScalingActive", "False", "Idle"),
            _cond("Ready", "False", "CellsNotReady"),
        ]
    }
    if desired is not None:
        body["status"]["desiredReplicas"] = desired
    return GPUCellPool.model_validate(body)


ROWS = [CellStatus(name="gpu-fixed-0", index=0, phase=CellPhase.PENDING, reason="GuestNotCreated")]
OURS = [_cond("Ready", "True", "AllCellsReady", T1), _cond("Progressing", "False", "Idle", T1)]


def test_the_body_is_an_apply_of_our_fields_only_without_precondition() -> None:
    conds = [_cond("ScalingActive", "True", "ScaledUp", T1), *OURS]
    body = status_patch(_pool(rv="100"), ROWS, conds, 3)
    assert body["apiVersion"] == "cells.kubeswift.io/v1alpha1" and body["kind"] == "GPUCellPool"
    assert body["metadata"] == {"name": "gpu-fixed", "namespace": "ns"}
    status = body["status"]
    assert status["conditions"] == OURS  # the autoscaler's ScalingActive is never sent
    assert status["desiredReplicas"] == 3  # autoscaling off: ours
    assert status["cells"] == [r.to_api() for r in ROWS] and status["replicas"] == 1
    assert "desiredReplicas" not in status_patch(_pool(autoscaling=True), ROWS, OURS, 3)["status"]


def test_capacity_objects_are_written_and_hami_only_when_read() -> None:
    reach = Reachability(True, "Connected", "")
    rows = [ROWS[0].model_copy(update={"devices": ["0000:01:00.0"]})]
    hami = workload_capacity([CellCapacity((Device(8192, 100, "T4", "GPU-a"),))], "DP", 0.0)
    read = capacity_status(_pool(), rows, PassSummary(reach, 1, free_gpus=4, workload=hami))
    patch = status_patch(_pool(), rows, OURS, 1, read)["status"]
    assert patch["physicalCapacity"] == {"gpus": 1, "freeGPUsInCluster": 4, "model": "T4"}
    assert patch["workloadCapacity"]["gpuMemory"]["total"] == "8Gi"
    assert patch["workloadCapacity"]["gpuCompute"]["total"] == "100"
    # HAMi unreadable this pass: workloadCapacity is not recomputed (status_patch sends the
    # stored one back), the physical model follows the stored inner reading, an unknown free
    # count is left out (removed by the apply).
    stored = _pool()
    stored.status.workload_capacity = hami
    kept = capacity_status(stored, rows, PassSummary(reach, 1))
    assert "workloadCapacity" not in kept
    assert kept["physicalCapacity"] == {"gpus": 1, "model": "T4"}
    assert "physicalCapacity" not in status_patch(_pool(), rows, OURS, 1)["status"]


def test_plan_rejections_are_cleared_once_autoscaling_is_turned_off() -> None:
    reach = Reachability(True, "Connected", "")
    rejected = {"step": "Remove", "cell": "gpu-fixed-0", "reason": "VictimInDrainBackoff"}
    stored = _pool(autoscaling=False)
    stored.status.plan_rejections = [PlanRejection.model_validate(rejected)]
    assert capacity_status(stored, ROWS, PassSummary(reach, 1))["planRejections"] == []
    autoscaled = _pool(autoscaling=True)  # a pass without a checked plan leaves them as are
    autoscaled.status.plan_rejections = stored.status.plan_rejections
    assert "planRejections" not in capacity_status(autoscaled, ROWS, PassSummary(reach, 1))
    assert "planRejections" not in capacity_status(_pool(), ROWS, PassSummary(reach, 1))


def test_own_conditions_are_only_the_provisioners_types() -> None:
    mixed = [_cond("ScalingActive", "True", "A"), _cond("MetricsAvailable", "True", "B"), *OURS]
    assert own_conditions(mixed) == OURS


def test_stored_fields_this_pass_did_not_compute_are_sent_back() -> None:
    """An apply removes what its manager owned and left out: the stored shape, HAMi capacity
    and plan rejections go back as they are when a pass has nothing newer."""
    reach = Reachability(True, "Connected", "")
    hami = workload_capacity([CellCapacity((Device(8192, 100, "T4", "GPU-a"),))], "DP", 0.0)
    assert hami is not None
    rejected = {"step": "Remove", "cell": "gpu-fixed-0", "reason": "VictimInDrainBackoff"}
    stored = _pool(autoscaling=True)
    stored.status.workload_capacity = hami
    stored.status.plan_rejections = [PlanRejection.model_validate(rejected)]
    capacity = capacity_status(stored, ROWS, PassSummary(reach, 1))
    status = status_patch(stored, ROWS, OURS, 1, capacity)["status"]
    assert status["workloadCapacity"] == hami.to_api()
    assert status["planRejections"] == [{**rejected, "message": ""}]
    assert status["physicalCapacity"]["model"] == "T4"


class ApplyingApi:
    """Records every apply and patch; ``get`` answers ``live``."""

    def __init__(self, live: JSON | None = None) -> None:
        self.live = live
        self.applies: list[tuple[JSON, bool, str | None]] = []
        self.patches: list[JSON] = []

    async def apply(
        self, obj: JSON, status: bool = False, field_manager: str | None = None
    ) -> JSON:
        self.applies.append((obj, status, field_manager))
        return obj

    async def patch(
        self, kind: Kind, namespace: str | None, name: str, patch: JSON, status: bool = False
    ) -> JSON:
        self.patches.append(patch)
        return patch

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        return self.live


async def test_one_apply_under_the_provisioners_manager_when_replicas_are_stored() -> None:
    api = ApplyingApi()
    pool = _pool(desired=3)
    written = await write_status(cast(KubeApi, api), pool, status_patch(pool, ROWS, OURS, 3))
    assert [(status, manager) for _, status, manager in api.applies] == [
        (True, STATUS_FIELD_MANAGER)
    ]
    body = api.applies[0][0]
    assert "desiredReplicas" not in body["status"] and body["status"]["conditions"] == written
    assert api.patches == [], "no managed-fields upgrade for a pool written the new way"


async def test_desired_replicas_has_its_own_manager_and_is_written_only_when_it_differs() -> None:
    api = ApplyingApi()
    pool = _pool(desired=2)
    await write_status(cast(KubeApi, api), pool, status_patch(pool, ROWS, OURS, 3))
    replicas = [(obj["status"], m) for obj, _, m in api.applies if m == REPLICAS_FIELD_MANAGER]
    assert replicas == [({"desiredReplicas": 3}, REPLICAS_FIELD_MANAGER)]
    api = ApplyingApi()
    autoscaled = _pool(autoscaling=True, desired=2)
    await write_status(cast(KubeApi, api), autoscaled, status_patch(autoscaled, ROWS, OURS, 3))
    assert [m for _, _, m in api.applies] == [STATUS_FIELD_MANAGER], "the autoscaler's then"
