"""Pool fit: each reason, node-affinity operators, taints and tolerations, HAMi per-GPU rules."""

from __future__ import annotations

import pytest

from autoscaler.policy import fit
from autoscaler.policy.fit import fits_fresh_cell, gpu_fit, place_asks
from autoscaler.policy.types import (
    CellShape,
    GPUAsk,
    GPUUsage,
    NodeSelectorRequirement,
    NodeTemplate,
    PendingPod,
    PlacementConstraints,
    Taint,
    Toleration,
)

SHAPE = CellShape(gpus=2, memory_mib=24000, cores_percent=100, slots=4)
TEMPLATE = NodeTemplate(
    labels={"gpu": "on", "zone": "a", "gen": "5"},
    taints=(Taint("dedicated", "gpu", "NoSchedule"), Taint("soft", "", "PreferNoSchedule")),
)
TOL = (Toleration("dedicated", "Equal", "gpu", "NoSchedule"),)


SMALL = GPUAsk(1, 1000)


def pending(
    ask: GPUAsk = SMALL,
    constraints: PlacementConstraints | None = None,
    container_asks: tuple[GPUAsk, ...] = (),
) -> PendingPod:
    c = constraints if constraints is not None else PlacementConstraints(tolerations=TOL)
    return PendingPod("ns/p", ask, 0.0, c, container_asks)


def req(key: str, op: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key, op, values)


@pytest.mark.parametrize(
    ("requirement", "ok"),
    [
        (req("zone", "In", "a", "b"), True),
        (req("zone", "In", "b"), False),
        (req("zone", "NotIn", "b"), True),
        (req("zone", "NotIn", "a"), False),
        (req("absent", "NotIn", "a"), True),
        (req("gpu", "Exists"), True),
        (req("absent", "Exists"), False),
        (req("absent", "DoesNotExist"), True),
        (req("gpu", "DoesNotExist"), False),
        (req("gen", "Gt", "4"), True),
        (req("gen", "Gt", "5"), False),
        (req("gen", "Lt", "6"), True),
        (req("gen", "Lt", "5"), False),
        (req("zone", "Gt", "1"), False),  # not an integer
        (req("zone", "Bogus", "a"), False),
    ],
)
def test_affinity_operators(requirement: NodeSelectorRequirement, ok: bool) -> None:
    c = PlacementConstraints(required_terms=((requirement,),), tolerations=TOL)
    result = fits_fresh_cell(pending(constraints=c), SHAPE, TEMPLATE)
    assert result.ok is ok
    assert result.reason == (fit.FITS if ok else fit.NODE_AFFINITY_MISMATCH)


def test_affinity_terms_are_ored_requirements_anded() -> None:
    bad_and = (req("zone", "In", "a"), req("gpu", "In", "off"))
    c = PlacementConstraints(required_terms=(bad_and,), tolerations=TOL)
    assert not fits_fresh_cell(pending(constraints=c), SHAPE, TEMPLATE).ok
    c = PlacementConstraints(required_terms=(bad_and, (req("zone", "In", "a"),)), tolerations=TOL)
    assert fits_fresh_cell(pending(constraints=c), SHAPE, TEMPLATE).ok


@pytest.mark.parametrize(
    ("constraints", "reason"),
    [
        (PlacementConstraints({"gpu": "on"}, (), TOL), fit.FITS),
        (PlacementConstraints({"gpu": "off"}, (), TOL), fit.NODE_SELECTOR_MISMATCH),
        (PlacementConstraints({"other": "x"}, (), TOL), fit.NODE_SELECTOR_MISMATCH),
        (PlacementConstraints(), fit.TAINT_NOT_TOLERATED),
        (PlacementConstraints(tolerations=(Toleration("", "Exists"),)), fit.FITS),
        (PlacementConstraints(tolerations=(Toleration("dedicated", "Exists"),)), fit.FITS),
        (
            PlacementConstraints(tolerations=(Toleration("dedicated", "Equal", "cpu"),)),
            fit.TAINT_NOT_TOLERATED,
        ),
        (
            PlacementConstraints(tolerations=(Toleration("dedicated", "Exists", "", "NoExecute"),)),
            fit.TAINT_NOT_TOLERATED,
        ),
    ],
)
def test_selector_and_taints(constraints: PlacementConstraints, reason: str) -> None:
    result = fits_fresh_cell(pending(constraints=constraints), SHAPE, TEMPLATE)
    assert result.reason == reason
    assert result.ok is (reason == fit.FITS)
    assert result.message


def test_no_execute_taint_must_be_tolerated() -> None:
    template = NodeTemplate(taints=(Taint("x", "y", "NoExecute"),))
    assert not fits_fresh_cell(pending(constraints=PlacementConstraints()), SHAPE, template).ok
    only_soft = NodeTemplate(taints=(Taint("x", "y", "PreferNoSchedule"),))
    assert fits_fresh_cell(pending(constraints=PlacementConstraints()), SHAPE, only_soft).ok


@pytest.mark.parametrize(
    ("ask", "reason"),
    [
        (GPUAsk(2, 24000, None, 100), fit.FITS),
        (GPUAsk(3, 1000), fit.NODE_INSUFFICIENT_DEVICE),
        (GPUAsk(1, 24001), fit.CARD_INSUFFICIENT_MEMORY),
        (GPUAsk(1, None, 100, 0), fit.FITS),
        (GPUAsk(1, 1000, None, 100), fit.FITS),
    ],
)
def test_resource_reasons(ask: GPUAsk, reason: str) -> None:
    result = fits_fresh_cell(pending(ask), SHAPE, TEMPLATE)
    assert result.reason == reason, result.message


def test_card_insufficient_core_with_scaled_devcore() -> None:
    shape = CellShape(gpus=1, memory_mib=1000, cores_percent=50, slots=4)
    result = fits_fresh_cell(pending(GPUAsk(1, 10, None, 60)), shape, TEMPLATE)
    assert result.reason == fit.CARD_INSUFFICIENT_CORE
    assert "50% cores" in result.message


def test_multi_container_pods_share_a_gpu_but_not_beyond_it() -> None:
    one_gpu = CellShape(gpus=1, memory_mib=8000, cores_percent=100, slots=4)
    asks = (GPUAsk(1, 3000), GPUAsk(1, 5000))
    assert fits_fresh_cell(pending(container_asks=asks), one_gpu, TEMPLATE).ok
    asks = (GPUAsk(1, 3000), GPUAsk(1, 5001))
    result = fits_fresh_cell(pending(container_asks=asks), one_gpu, TEMPLATE)
    assert result.reason == fit.CARD_INSUFFICIENT_MEMORY
    # two exclusive containers need two GPUs
    excl = (GPUAsk(1, None, None, 100), GPUAsk(1, None, None, 100))
    assert not fits_fresh_cell(pending(container_asks=excl), one_gpu, TEMPLATE).ok
    assert fits_fresh_cell(pending(container_asks=excl), SHAPE, TEMPLATE).ok


@pytest.mark.parametrize(
    ("ask", "used", "reason"),
    [
        (GPUAsk(1, 10), GPUUsage(0, 0, 4), fit.CARD_SLOTS_EXHAUSTED),
        (GPUAsk(1, 20000), GPUUsage(5000, 0, 1), fit.CARD_INSUFFICIENT_MEMORY),
        (GPUAsk(1, 10, None, 60), GPUUsage(10, 50, 1), fit.CARD_INSUFFICIENT_CORE),
        (GPUAsk(1, 10, None, 100), GPUUsage(10, 0, 1), fit.EXCLUSIVE_CONFLICT),
        (GPUAsk(1, 10, None, 0), GPUUsage(10, 100, 1), fit.CARD_COMPUTE_EXHAUSTED),
        (GPUAsk(1, 10, None, 100), GPUUsage(0, 0, 0), None),
        (GPUAsk(1, None, 50, 0), GPUUsage(12000, 0, 1), None),
        (GPUAsk(1, None, 50, 0), GPUUsage(12001, 0, 1), fit.CARD_INSUFFICIENT_MEMORY),
    ],
)
def test_gpu_fit_hami_order(ask: GPUAsk, used: GPUUsage, reason: str | None) -> None:
    assert gpu_fit(ask, used, SHAPE) == reason


def test_place_asks_reports_allocated_cards_insufficient() -> None:
    gpus = (GPUUsage(0, 0, 0), GPUUsage(24000, 0, 1))
    usage, reason = place_asks((GPUAsk(2, 1000),), gpus, SHAPE)
    assert reason == fit.ALLOCATED_CARDS_INSUFFICIENT
    assert usage == gpus
    usage, reason = place_asks((GPUAsk(1, 1000),), gpus, SHAPE)
    assert reason is None
    assert usage == (GPUUsage(1000, 0, 1), GPUUsage(24000, 0, 1))
