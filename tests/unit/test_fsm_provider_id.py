"""Node ownership by providerID: the Cluster API mode where the bootstrap provider renders the join.

With ``bootstrapConfigTemplateRef`` the Node registers without the pool's labels; it is the
cell's when its ``spec.providerID`` equals the one CAPKS gave the KubeSwiftMachine (and CAPI
copied to the Machine). Anything else - another pool's labels, no providerID yet, another
providerID - is foreign and never touched.
"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.fsm.cell_state import (
    Budgets,
    CellObservation,
    CellRow,
    NodeStatus,
    OuterStatus,
    decide_cell,
)
from provisioner.fsm.identity import (
    INSTANCE_LABEL,
    POOL_ID_LABEL,
    POOL_LABEL,
    OwnershipProof,
    PoolIdentity,
    kubeswift_provider_id,
    node_ownership,
)
from provisioner.fsm.observations import observe_machine, observe_node
from provisioner.fsm.vocabulary import CellPhase, CellReason

POOL = PoolIdentity("team-a", "gpu")
OTHER_NS = PoolIdentity("team-b", "gpu")
PID = kubeswift_provider_id("team-a", "gpu-0")
NOW = 1_000_000.0


def test_provider_id_format_is_capks() -> None:
    assert PID == "kubeswift://team-a/gpu-0"


# (id, node labels, node providerID, expected providerID, proof)
CASES: list[tuple[str, dict[str, str], str, str, OwnershipProof]] = [
    ("our-labels", POOL.cell_labels(0), "", "", OwnershipProof.LABELS),
    ("our-labels-any-pid", POOL.cell_labels(0), "kubeswift://x/y", PID, OwnershipProof.LABELS),
    ("no-labels-matching-pid", {"gpu": "on"}, PID, PID, OwnershipProof.PROVIDER_ID),
    ("no-labels-no-pid-yet", {}, "", PID, OwnershipProof.NONE),
    ("no-labels-other-pid", {}, "kubeswift://team-b/gpu-0", PID, OwnershipProof.NONE),
    ("no-labels-nothing-expected", {}, PID, "", OwnershipProof.NONE),
    ("no-labels-both-empty", {}, "", "", OwnershipProof.NONE),
    ("other-namespace-labels", OTHER_NS.cell_labels(0), PID, PID, OwnershipProof.NONE),
    ("other-pool-name-label", {POOL_LABEL: "other"}, PID, PID, OwnershipProof.NONE),
    ("stray-pool-id-label", {POOL_ID_LABEL: "feedface"}, PID, PID, OwnershipProof.NONE),
]


@pytest.mark.parametrize(
    ("labels", "node_pid", "expected", "proof"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_node_ownership(
    labels: dict[str, str], node_pid: str, expected: str, proof: OwnershipProof
) -> None:
    got = node_ownership(labels, node_pid, POOL, frozenset(), expected)
    assert got.proof is proof
    assert got.owned is (proof is not OwnershipProof.NONE)
    assert (got.detail == "") is got.owned  # a foreign verdict always says why


def test_legacy_instance_label_still_proves_ownership() -> None:
    labels = {POOL_LABEL: "gpu", INSTANCE_LABEL: "uid-1"}
    assert node_ownership(labels, "", POOL, frozenset({"uid-1"})).proof is OwnershipProof.LABELS


def _machine(spec_pid: str | None) -> dict[str, Any]:
    spec = {"providerID": spec_pid} if spec_pid else {}
    return {"metadata": {"uid": "m-uid"}, "spec": spec, "status": {"phase": "Provisioned"}}


@pytest.mark.parametrize(
    ("machine_pid", "ksm_pid", "expected"),
    [
        (PID, None, PID),  # core CAPI copied it
        (None, PID, PID),  # CAPKS set it, CAPI has not copied it yet
        (None, None, ""),
    ],
)
def test_machine_observation_carries_the_provider_id(
    machine_pid: str | None, ksm_pid: str | None, expected: str
) -> None:
    ksm = {"spec": {"providerID": ksm_pid}} if ksm_pid else {"spec": {}}
    assert observe_machine(_machine(machine_pid), ksm, None).provider_id == expected


def _node(labels: dict[str, str], pid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-0", "labels": labels},
        "spec": {"providerID": pid} if pid else {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_observe_node_uses_the_expected_provider_id() -> None:
    owned = observe_node(
        _node({}, PID), None, False, POOL, frozenset(), NOW, expected_provider_id=PID
    )
    assert owned.owned and owned.foreign_detail == ""
    waiting = observe_node(
        _node({}, ""), None, False, POOL, frozenset(), NOW, expected_provider_id=PID
    )
    assert not waiting.owned and "no providerID yet" in waiting.foreign_detail


def test_foreign_node_message_says_why() -> None:
    outer = OuterStatus(
        exists=True, uid="m-uid", gpu_devices=("0000:01:00.0",), running=True, address="10.0.0.2"
    )
    node = NodeStatus(exists=True, ready=True, owned=False, foreign_detail="no pool labels")
    obs = CellObservation(outer, node, True)
    decision = decide_cell(
        CellRow(phase=CellPhase.JOINING, last_transition_s=NOW), obs, Budgets(), NOW
    )
    assert decision.row.reason == CellReason.FOREIGN_NODE
    assert decision.row.message.endswith("(no pool labels)")


def test_a_same_named_pool_of_another_namespace_is_named_in_the_verdict() -> None:
    """Two pools called "gpu" in two namespaces on one workload cluster both want Node gpu-0:
    the verdict says so and what to change, not just "another pool"."""
    same_name = node_ownership(OTHER_NS.cell_labels(0), "", POOL)
    assert not same_name.owned
    assert f"another pool named 'gpu' (pool-id {OTHER_NS.pool_id}, not {POOL.pool_id})" in (
        same_name.detail
    )
    assert "need distinct names" in same_name.detail
    other_name = node_ownership({POOL_LABEL: "other"}, "", POOL)
    assert other_name.detail == "labelled for pool 'other'"
    stray = node_ownership({POOL_ID_LABEL: "feedface"}, "", POOL)
    assert stray.detail == "labelled for another pool"
