"""Template hash over the whole cell shape, and rolling updates with maxSurge/maxUnavailable."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from provisioner.fsm.rollout import (
    RolloutCell,
    RolloutInput,
    canonical_json,
    plan_rollout,
    resolve_count,
    template_hash,
)
from provisioner.fsm.vocabulary import CellPhase as P

BASE: dict[str, Any] = {
    "apiVersion": "cells.kubeswift.io/v1alpha1",
    "kind": "GPUCellPool",
    "metadata": {"name": "gpu", "namespace": "ns"},
    "spec": {
        "replicas": 2,
        "cell": {
            "guestTemplate": {
                "guestClassRef": {"name": "medium"},
                "imageRef": {"name": "noble-580"},
                "interfaces": [{"name": "mgmt", "primary": True}],
            },
            "gpu": {"backend": "DRA", "dra": {"resourceClaimTemplateName": "single-vfio-gpu"}},
        },
        "bootstrap": {"joinSecretRef": {"name": "join"}},
        "workloadCluster": {
            "kubeconfigSecretRef": {"name": "kc"},
            "node": {"labels": {"gpu": "on"}},
        },
    },
}
H0 = template_hash(BASE)


def edited(path: str, value: Any) -> dict[str, Any]:
    pool = copy.deepcopy(BASE)
    node: Any = pool
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return pool


def test_hash_is_ten_hex_chars_and_stable() -> None:
    assert len(H0) == 10 and int(H0, 16) >= 0
    assert template_hash(copy.deepcopy(BASE)) == H0


def test_key_order_does_not_matter() -> None:
    reordered = copy.deepcopy(BASE)
    cell = reordered["spec"]["cell"]
    cell["guestTemplate"] = dict(reversed(list(cell["guestTemplate"].items())))
    reordered["spec"] = dict(reversed(list(reordered["spec"].items())))
    assert list(reordered["spec"]) != list(BASE["spec"])
    assert template_hash(reordered) == H0


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.cell.guestTemplate.imageRef", {"name": "noble-590"}),
        ("spec.cell.guestTemplate.guestClassRef", {"name": "large"}),
        ("spec.cell.gpu", {"backend": "Native", "native": {"gpuProfileRef": {"name": "p"}}}),
        ("spec.cell.gpu.dra.hugepages", "1Gi"),
        ("spec.cell.gpu.dra.requestName", "other"),
        ("spec.cell.spreadPolicy", "Pack"),
        ("spec.cell.nodeIPFrom", "mgmt"),
        ("spec.bootstrap.joinSecretRef", {"name": "join-v2"}),
        ("spec.bootstrap.hostname", "None"),
        ("spec.workloadCluster.node.labels", {"gpu": "on", "tier": "a"}),
        ("spec.workloadCluster.node.taints", [{"key": "gpu", "effect": "NoSchedule"}]),
        ("spec.workloadCluster.node.annotations", {"a": "b"}),
        ("spec.capacity", {"hami": {"expectedDevicesPerCell": 2}}),
    ],
)
def test_any_shape_change_changes_the_hash(path: str, value: Any) -> None:
    assert template_hash(edited(path, value)) != H0


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.replicas", 7),
        ("spec.bootstrap.readyTimeout", "20m"),
        ("spec.capacity", {"readyTimeout": "9m"}),
        ("spec.deletion", {"policy": "Force"}),
        ("spec.updatePolicy", {"type": "RollingUpdate"}),
        ("spec.cell.spreadPolicy", "Spread"),  # the default, spelled out
        ("spec.cell.gpu.dra.requestName", "gpu"),  # the default, spelled out
        ("metadata.labels", {"x": "y"}),
    ],
)
def test_non_shape_fields_and_spelled_out_defaults_keep_the_hash(path: str, value: Any) -> None:
    assert template_hash(edited(path, value)) == H0


def test_canonical_json_drops_none_and_sorts() -> None:
    assert (
        canonical_json({"b": 1, "a": None, "c": [{"y": None, "x": "é"}]})
        == '{"b":1,"c":[{"x":"é"}]}'
    )


def test_join_template_content_digest_is_part_of_the_shape() -> None:
    assert template_hash(BASE, bootstrap_digest="abc") != template_hash(
        BASE, bootstrap_digest="abd"
    )
    assert template_hash(BASE, bootstrap_digest="") == H0


@pytest.mark.parametrize(
    ("value", "total", "up", "expected"),
    [
        (1, 10, True, 1),
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        ("0%", 5, True, 0),
        ("3", 5, False, 3),
        (-1, 5, True, 0),
    ],
)
def test_resolve_count(value: int | str, total: int, up: bool, expected: int) -> None:
    assert resolve_count(value, total, up) == expected


NEW, OLD = "new", "old"


def c(
    index: int, phase: P = P.READY, h: str = OLD, busy: bool | None = False, rollout: bool = False
) -> RolloutCell:
    return RolloutCell(f"gpu-{index}", index, phase, h, busy, rollout)


def roll(cells: tuple[RolloutCell, ...], desired: int = 3, **kw: Any) -> Any:
    kw.setdefault("rolling_update", True)
    return plan_rollout(RolloutInput(cells=cells, current_hash=NEW, desired_replicas=desired, **kw))


def test_all_current() -> None:
    p = roll((c(0, h=NEW), c(1, h=NEW), c(2, h="")))  # empty hash counts as current
    assert (p.reason, p.drain, p.creation_adjustment) == ("AllCellsCurrent", (), 0)


def test_manual_only_reports() -> None:
    p = roll((c(0), c(1, h=NEW)), desired=2, rolling_update=False)
    assert (p.reason, p.drain, p.stale) == ("TemplateChanged", (), ("gpu-0",))


def test_unreachable_blocks() -> None:
    p = roll((c(0), c(1), c(2)), workload_reachable=False)
    assert (p.reason, p.drain) == ("UpdateBlocked", ())


def test_default_is_one_at_a_time_without_surge() -> None:
    p = roll((c(0), c(1), c(2)))
    assert p.drain == ("gpu-0",) and p.reason == "RollingUpdate"
    assert p.creation_adjustment == -1  # hold the replacement until the drained GPU is free


def test_idle_cells_go_before_busy_ones_and_unknown_counts_as_busy() -> None:
    p = roll((c(0, busy=True), c(1, busy=None), c(2, busy=False)))
    assert p.drain == ("gpu-2",)


def test_busy_cells_are_drained_never_deleted_in_place() -> None:
    p = roll((c(0, busy=True), c(1, busy=True), c(2, busy=True)))
    assert p.drain == ("gpu-0",)  # marked Draining: the drain module empties it first


def test_not_ready_stale_cells_are_drained_for_free() -> None:
    p = roll((c(0, P.BOOTING), c(1, P.FAILED), c(2)), max_unavailable=0, max_surge=1)
    assert set(p.drain) == {"gpu-0", "gpu-1"}


def test_surge_creates_first_then_drains() -> None:
    cells = (c(0), c(1), c(2))
    first = roll(cells, max_surge=1, max_unavailable=0)
    assert (first.drain, first.creation_adjustment, first.reason) == ((), 1, "RollingUpdate")
    # The surge cell is Ready: one stale cell may go, and no further surge while it drains.
    second = roll((*cells, c(3, h=NEW)), max_surge=1, max_unavailable=0)
    assert second.drain == ("gpu-0",) and second.creation_adjustment == 0


def test_surge_is_bounded_by_stale_cells() -> None:
    p = roll((c(0), c(1, h=NEW), c(2, h=NEW)), max_surge=5, max_unavailable=0)
    assert p.creation_adjustment == 1


def test_max_unavailable_percent() -> None:
    cells = tuple(c(i) for i in range(8))
    p = roll(cells, desired=8, max_unavailable="25%")
    assert p.drain == ("gpu-0", "gpu-1")


def test_unavailable_budget_counts_cells_already_unavailable() -> None:
    cells = (c(0), c(1), c(2, P.JOINING, h=NEW))
    p = roll(cells, max_unavailable=1)
    assert p.drain == ()  # one cell is already not Ready
    assert p.reason == "UpdateBlocked"


def test_draining_for_rollout_holds_back_surge() -> None:
    cells = (c(0, P.DRAINING, rollout=True), c(1), c(2), c(3, h=NEW))
    p = roll(cells, max_surge=1, max_unavailable=0)
    assert p.drain == () and p.creation_adjustment == 0


def test_last_drain_finishing_reports_rollout_until_done() -> None:
    p = roll((c(0, P.DRAINING, rollout=True), c(1, h=NEW), c(2, h=NEW)))
    assert p.reason == "RollingUpdate" and p.creation_adjustment == -1
