"""The provisioner's status write never reverts another writer's condition.

A merge patch replaces the whole ``conditions`` list, so the patch is preconditioned on the
resourceVersion its conditions were read at; after a 409 it is rebased on the live list. These
tests pin the pure rebase and the bounded retry around it (the live race is in
tests/integration/test_provisioner_status_race.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from gpucellpool.api import GPUCellPool
from gpucellpool.api.status import CellPhase, CellStatus, PlanRejection
from provisioner.fsm.capacity import CellCapacity, Device
from provisioner.fsm.pool_capacity import workload_capacity
from provisioner.kube import JSON, Conflict, Kind, KubeApi
from provisioner.status import (
    STATUS_WRITE_ATTEMPTS,
    PassSummary,
    capacity_status,
    own_conditions,
    rebase,
    status_patch,
    write_status,
)
from provisioner.workload import Reachability

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"
T0 = "2026-11-30T10:00:00Z"
T1 = "2026-11-30T10:05:00Z"


def _cond(type_: str, status: str, reason: str, at: str = T0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "lastTransitionTime": at}


def _pool(autoscaling: bool = False, rv: str = "100") -> GPUCellPool:
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
    return GPUCellPool.model_validate(body)


ROWS = [CellStatus(name="gpu-fixed-0", index=0, phase=CellPhase.PENDING, reason="GuestNotCreated")]
OURS = [_cond("Ready", "True", "AllCellsReady", T1), _cond("Progressing", "False", "Idle", T1)]


def _live(rv: str, conditions: list[dict[str, Any]], autoscaling: bool = False) -> JSON:
    return {
        "metadata": {"name": "gpu-fixed", "namespace": "ns", "uid": "u-1", "resourceVersion": rv},
        "spec": {"autoscaling": {"enabled": autoscaling}},
        "status": {"desiredReplicas": 5, "conditions": conditions},
    }


def test_the_patch_is_preconditioned_on_the_read_it_was_built_from() -> None:
    patch = status_patch(_pool(rv="100"), ROWS, OURS, 3)
    assert patch["metadata"] == {"resourceVersion": "100"}
    assert patch["status"]["desiredReplicas"] == 3


def test_capacity_objects_are_written_whole_and_hami_only_when_read() -> None:
    reach = Reachability(True, "Connected", "")
    rows = [ROWS[0].model_copy(update={"devices": ["0000:01:00.0"]})]
    hami = workload_capacity([CellCapacity((Device(8192, 100, "T4", "GPU-a"),))], "DP", 0.0)
    read = capacity_status(_pool(), rows, PassSummary(reach, 1, free_gpus=4, workload=hami))
    patch = status_patch(_pool(), rows, OURS, 1, read)["status"]
    assert patch["physicalCapacity"] == {"gpus": 1, "freeGPUsInCluster": 4, "model": "T4"}
    assert patch["workloadCapacity"]["gpuMemory"]["total"] == "8Gi"
    assert patch["workloadCapacity"]["gpuCompute"]["total"] == "100"
    # HAMi unreadable this pass: workloadCapacity is left out (kept), the physical model
    # follows the stored inner reading, an unknown free count is deleted (null).
    stored = _pool()
    stored.status.workload_capacity = hami
    kept = capacity_status(stored, rows, PassSummary(reach, 1))
    assert "workloadCapacity" not in kept
    assert kept["physicalCapacity"] == {"gpus": 1, "freeGPUsInCluster": None, "model": "T4"}
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


def test_rebase_takes_every_foreign_condition_from_the_live_object() -> None:
    scaling = _cond("ScalingActive", "True", "ScaledUp", T1)
    stale = status_patch(_pool(), ROWS, [_cond("ScalingActive", "False", "Idle"), *OURS], 3)
    live = _live("101", [scaling, _cond("Ready", "False", "Whatever"), _cond("X", "True", "Y")])

    rebased = rebase(stale, live)

    assert rebased["metadata"] == {"resourceVersion": "101"}
    conds = {c["type"]: c for c in rebased["status"]["conditions"]}
    assert conds["ScalingActive"] == scaling  # the autoscaler's, not the stale copy
    assert conds["X"]["reason"] == "Y"  # an unknown writer's condition survives too
    assert conds["Ready"]["reason"] == "AllCellsReady"  # ours are this pass's
    assert conds["Progressing"]["lastTransitionTime"] == T1
    assert len(rebased["status"]["conditions"]) == 4
    # what the pass saw and did is not touched
    assert rebased["status"]["cells"] == stale["status"]["cells"]
    assert rebased["status"]["observedGeneration"] == 4
    assert stale["metadata"] == {"resourceVersion": "100"}  # the input is not mutated


def test_rebase_drops_a_foreign_condition_its_writer_removed() -> None:
    stale = status_patch(_pool(), ROWS, [_cond("ScalingActive", "False", "Idle"), *OURS], 3)
    rebased = rebase(stale, _live("101", []))
    assert {c["type"] for c in rebased["status"]["conditions"]} == {"Ready", "Progressing"}


@pytest.mark.parametrize(("live_autoscaled", "kept"), [(False, True), (True, False)])
def test_rebase_leaves_desired_replicas_to_the_autoscaler_once_it_owns_them(
    live_autoscaled: bool, kept: bool
) -> None:
    stale = status_patch(_pool(autoscaling=False), ROWS, OURS, 3)
    rebased = rebase(stale, _live("101", [], autoscaling=live_autoscaled))
    assert ("desiredReplicas" in rebased["status"]) is kept


def test_own_conditions_are_only_the_provisioners_types() -> None:
    mixed = [_cond("ScalingActive", "True", "A"), _cond("MetricsAvailable", "True", "B"), *OURS]
    assert own_conditions(mixed) == OURS


class RacingApi:
    """``patch`` answers 409 ``conflicts`` times (as if another writer got in first each time);
    ``get`` returns the live object, bumped by every conflicting write."""

    def __init__(self, conflicts: int, live: JSON) -> None:
        self.conflicts = conflicts
        self.live = live
        self.patches: list[JSON] = []
        self.gets = 0

    async def patch(
        self, kind: Kind, namespace: str | None, name: str, patch: JSON, status: bool = False
    ) -> JSON:
        assert status and kind.kind == "GPUCellPool" and (namespace, name) == ("ns", "gpu-fixed")
        self.patches.append(copy.deepcopy(patch))
        if len(self.patches) <= self.conflicts:
            rv = int(self.live["metadata"]["resourceVersion"]) + 1
            self.live["metadata"]["resourceVersion"] = str(rv)
            raise Conflict(409, "the object has been modified")
        return self.live

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        self.gets += 1
        return copy.deepcopy(self.live)


async def test_a_lost_race_is_retried_on_the_live_conditions() -> None:
    scaling = _cond("ScalingActive", "True", "ScaledUp", T1)
    api = RacingApi(1, _live("100", [scaling]))
    pool = _pool(rv="100")
    conds = [_cond("ScalingActive", "False", "Idle"), *OURS]

    written = await write_status(cast(KubeApi, api), pool, status_patch(pool, ROWS, conds, 3))

    assert [p["metadata"]["resourceVersion"] for p in api.patches] == ["100", "101"]
    assert api.patches[1]["status"]["conditions"] == written
    assert scaling in written and _cond("ScalingActive", "False", "Idle") not in written
    assert api.patches[1]["status"]["cells"] == api.patches[0]["status"]["cells"]


async def test_a_race_lost_every_time_gives_up_after_a_bounded_number_of_writes() -> None:
    api = RacingApi(10, _live("100", []))
    pool = _pool(rv="100")
    with pytest.raises(Conflict):
        await write_status(cast(KubeApi, api), pool, status_patch(pool, ROWS, OURS, 3))
    assert len(api.patches) == STATUS_WRITE_ATTEMPTS
    assert api.gets == STATUS_WRITE_ATTEMPTS - 1


async def test_a_recreated_pool_is_not_written_with_the_old_rows() -> None:
    live = _live("100", [])
    live["metadata"]["uid"] = "u-2"
    api = RacingApi(1, live)
    pool = _pool(rv="100")
    with pytest.raises(Conflict):
        await write_status(cast(KubeApi, api), pool, status_patch(pool, ROWS, OURS, 3))
    assert len(api.patches) == 1
