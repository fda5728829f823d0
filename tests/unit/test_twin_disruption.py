"""The simulated disruption controller computes PDB status as kube-controller-manager does."""

from __future__ import annotations

from typing import Any

import pytest

from simulations.twin.common import rfc3339
from simulations.twin.disruption import pdb_status

NOW = 1_800_000_000.0
RS = ("apps/v1", "ReplicaSet", "web")


def _pod(name: str, ready: bool = True, deleting: bool = False, owned: bool = True) -> Any:
    meta: dict[str, Any] = {"name": name, "labels": {"app": "web"}}
    if owned:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = rfc3339(NOW)
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [cond]}}


def _pdb(spec: dict[str, Any], disrupted: dict[str, str] | None = None) -> Any:
    return {
        "metadata": {"name": "web", "generation": 3},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
        "status": {"disruptedPods": disrupted or {}},
    }


@pytest.mark.parametrize(
    ("spec", "replicas", "expected", "desired", "allowed"),
    [
        ({"minAvailable": 2}, 4, 3, 2, 1),  # int: counts matching pods, ignores the scale
        ({"minAvailable": "50%"}, 4, 4, 2, 1),  # percent of the controller scale, rounded up
        ({"minAvailable": "30%"}, 4, 4, 2, 1),
        ({"maxUnavailable": 1}, 4, 4, 3, 0),
        ({"maxUnavailable": "50%"}, 4, 4, 2, 1),
        ({"maxUnavailable": "10%"}, 3, 3, 2, 1),  # 0.3 rounds up to 1 unavailable
    ],
)
def test_expected_desired_and_allowed(
    spec: dict[str, Any], replicas: int, expected: int, desired: int, allowed: int
) -> None:
    pods = [_pod("a"), _pod("b"), _pod("c"), _pod("d", ready=False)]
    pods = pods[:3] if spec.get("minAvailable") == 2 else pods
    st = pdb_status(_pdb(spec), pods, {RS: replicas}, NOW)
    assert (st["expectedPods"], st["desiredHealthy"], st["disruptionsAllowed"]) == (
        expected,
        desired,
        allowed,
    )
    assert st["observedGeneration"] == 3
    assert st["conditions"][0]["type"] == "DisruptionAllowed"
    assert st["conditions"][0]["status"] == ("True" if allowed else "False")


def test_terminating_and_recently_disrupted_pods_are_not_healthy() -> None:
    pods = [_pod("a"), _pod("b", deleting=True), _pod("c"), _pod("gone-soon")]
    disrupted = {"c": rfc3339(NOW - 10), "gone-soon": rfc3339(NOW - 300), "absent": rfc3339(NOW)}
    st = pdb_status(_pdb({"minAvailable": 1}, disrupted), pods, {}, NOW)
    assert st["disruptedPods"] == {"c": rfc3339(NOW - 10)}  # expired and absent entries drop
    assert st["currentHealthy"] == 2  # a and gone-soon
    assert st["disruptionsAllowed"] == 1


def test_no_expected_pods_allows_nothing_and_null_selector_matches_nothing() -> None:
    st = pdb_status(_pdb({"maxUnavailable": 1}), [_pod("a", owned=False)], {}, NOW)
    assert st["expectedPods"] == 0 and st["disruptionsAllowed"] == 0
    pdb = _pdb({"minAvailable": 0})
    pdb["spec"]["selector"] = None
    assert pdb_status(pdb, [_pod("a")], {}, NOW)["expectedPods"] == 0
