"""Demand parsing: every HAMi resource form and default, webhook on/off, init containers, errors."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.policy.demand import (
    MATCH_FIELDS_KEY_PREFIX,
    AskError,
    constraints_from_pod,
    container_ask,
    is_pending_hami_pod,
    parse_int_quantity,
    pending_pod_from_manifest,
    pod_ask,
    pod_asks,
)
from autoscaler.policy.types import GPUAsk, NodeSelectorRequirement, Toleration


def limits(**kw: Any) -> dict[str, Any]:
    names = {
        "gpu": "nvidia.com/gpu",
        "mem": "nvidia.com/gpumem",
        "pct": "nvidia.com/gpumem-percentage",
        "cores": "nvidia.com/gpucores",
    }
    return {"limits": {names[k]: v for k, v in kw.items()}}


def pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)],
            **spec,
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    if init is not None:
        body["spec"]["initContainers"] = [{"name": "i", "resources": r} for r in init]
    return body


@pytest.mark.parametrize(
    ("resources", "webhook", "expected"),
    [
        # only gpu: stored (already mutated, v2.7+ would carry cores 100) vs raw
        (limits(gpu=1), False, GPUAsk(1, None, None, 0)),
        (limits(gpu=1), True, GPUAsk(1, None, None, 100)),
        (limits(gpu="2"), True, GPUAsk(2, None, None, 100)),
        # gpumem is MiB per GPU; not exclusive so no cores added
        (limits(gpu=1, mem=4000), True, GPUAsk(1, 4000, None, 0)),
        (limits(gpu=1, mem="4000", cores=30), False, GPUAsk(1, 4000, None, 30)),
        # only memory: webhook defaults gpu to 1; without the webhook there is no request
        (limits(mem=4000), True, GPUAsk(1, 4000, None, 0)),
        (limits(mem=4000), False, None),
        (limits(cores=50), True, GPUAsk(1, None, None, 50)),
        (limits(pct=25), True, GPUAsk(1, None, 25, 0)),
        # percentage 100 is exclusive memory: cores 100 added
        (limits(gpu=1, pct=100), True, GPUAsk(1, None, 100, 100)),
        # gpumem wins over percentage
        (limits(gpu=1, mem=2000, pct=50), False, GPUAsk(1, 2000, None, 0)),
        # >100 clamped, <=0 ignored
        (limits(gpu=1, pct=150), False, GPUAsk(1, None, 100, 0)),
        (limits(gpu=1, pct=0), False, GPUAsk(1, None, None, 0)),
        (limits(gpu=1, cores=250), False, GPUAsk(1, None, None, 100)),
        # gpumem 0 reads as unset
        (limits(gpu=1, mem=0, cores=10), False, GPUAsk(1, None, None, 10)),
        # "3Gi" is bytes, overflows int32: HAMi reads no device request
        (limits(gpu=1, mem="3Gi"), False, None),
        (limits(gpu=1, mem="1.5"), False, None),
        (limits(gpu=0), True, None),
        ({}, True, None),
    ],
)
def test_container_ask(resources: dict[str, Any], webhook: bool, expected: GPUAsk | None) -> None:
    assert container_ask(resources, apply_webhook=webhook) == expected


def test_limits_first_then_requests_per_resource() -> None:
    res = {
        "limits": {"nvidia.com/gpu": 2},
        "requests": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000},
    }
    assert container_ask(res) == GPUAsk(2, 3000, None, 0)


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        (limits(gpu="abc"), "nvidia.com/gpu"),
        (limits(gpu="1.5"), "nvidia.com/gpu"),
        (limits(gpu=-1), "nvidia.com/gpu"),
        (limits(gpu=1, cores="x"), "nvidia.com/gpucores"),
        (limits(gpu=1, mem=[1]), "nvidia.com/gpumem"),
        (limits(gpu=1, pct=True), "nvidia.com/gpumem-percentage"),
    ],
)
def test_malformed_values_return_errors_naming_the_field(
    resources: dict[str, Any], field: str
) -> None:
    result = container_ask(resources)
    assert isinstance(result, AskError)
    assert result.field == field
    assert field in result.message


def test_parse_int_quantity() -> None:
    assert parse_int_quantity("1k") == 1000
    assert parse_int_quantity("2Ki") == 2048
    assert parse_int_quantity("1000m") == 1
    assert parse_int_quantity("100m") is None
    assert parse_int_quantity(" 7 ") == 7
    assert parse_int_quantity(None) is None


def test_pending_predicate() -> None:
    p = pod([limits(gpu=1)])
    assert is_pending_hami_pod(p)
    assert not is_pending_hami_pod(p, scheduler_name="other")
    bound = pod([limits(gpu=1)], nodeName="n1")
    assert not is_pending_hami_pod(bound)
    running = pod([limits(gpu=1)])
    running["status"]["phase"] = "Running"
    assert not is_pending_hami_pod(running)
    sched_err = pod([limits(gpu=1)])
    sched_err["status"]["conditions"][0]["reason"] = "SchedulerError"
    assert not is_pending_hami_pod(sched_err)
    no_cond = pod([limits(gpu=1)])
    no_cond["status"]["conditions"] = []
    assert not is_pending_hami_pod(no_cond)
    cpu_only = pod([{"limits": {"cpu": "1"}}])
    assert not is_pending_hami_pod(cpu_only)
    init_only = pod([{}], init=[limits(mem=100)])
    assert is_pending_hami_pod(init_only)
    assert not is_pending_hami_pod({"spec": "x"})  # malformed never raises


def test_multiple_app_containers_keep_per_container_asks() -> None:
    p = pod([limits(gpu=1, mem=3000), limits(gpu=1, mem=5000, cores=20), {}])
    assert pod_asks(p) == (GPUAsk(1, 3000, None, 0), GPUAsk(1, 5000, None, 20))
    # the summary is conservative: 2 GPUs, each with the biggest per-GPU ask
    assert pod_ask(p) == GPUAsk(2, 5000, None, 20)


def test_summary_with_mixed_memory_kinds_is_whole_gpu() -> None:
    p = pod([limits(gpu=1, mem=3000), limits(gpu=1, pct=10)])
    assert pod_ask(p) == GPUAsk(2, None, None, 0)


@pytest.mark.parametrize(
    ("app", "init", "expected"),
    [
        ([limits(gpu=1, mem=1000)], [limits(gpu=1, mem=500)], (GPUAsk(1, 1000, None, 0),)),
        ([limits(gpu=1, mem=1000)], [limits(gpu=1, mem=8000)], (GPUAsk(1, 8000, None, 0),)),
        ([limits(gpu=1, mem=1000)], [limits(gpu=2, mem=100)], (GPUAsk(2, 100, None, 0),)),
        ([{}], [limits(gpu=1, mem=100)], (GPUAsk(1, 100, None, 0),)),
        (
            [limits(gpu=1, mem=1000), limits(gpu=1, mem=1000)],
            [limits(gpu=1, mem=9000)],
            (GPUAsk(1, 1000, None, 0), GPUAsk(1, 1000, None, 0)),
        ),
    ],
)
def test_init_containers_take_the_larger(
    app: list[dict[str, Any]], init: list[dict[str, Any]], expected: tuple[GPUAsk, ...]
) -> None:
    assert pod_asks(pod(app, init=init)) == expected


def test_pod_without_device_and_malformed_pods() -> None:
    assert isinstance(pod_ask(pod([{"limits": {"cpu": 1}}])), AskError)
    assert isinstance(pod_ask({}), AskError)
    bad = pod([limits(gpu="x")])
    err = pod_ask(bad)
    assert isinstance(err, AskError)
    assert err.field == "spec.containers[0].nvidia.com/gpu"
    assert isinstance(pod_ask({"spec": {"containers": "nope"}}), AskError)


def test_constraints_from_pod() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]},
                ]
            }
        }
    }
    p = pod(
        [limits(gpu=1)],
        nodeSelector={"gpu": "on"},
        affinity=affinity,
        tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
    )
    c = constraints_from_pod(p)
    assert not isinstance(c, AskError)
    assert dict(c.node_selector) == {"gpu": "on"}
    assert c.required_terms == (
        (NodeSelectorRequirement("zone", "In", ("a",)),),
        (NodeSelectorRequirement(MATCH_FIELDS_KEY_PREFIX + "metadata.name", "In", ("n",)),),
    )
    assert c.tolerations == (Toleration("k", "Exists", "", "NoSchedule"),)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodeSelector": ["x"]}, "spec.nodeSelector"),
        ({"tolerations": {"a": 1}}, "spec.tolerations"),
        ({"tolerations": ["x"]}, "spec.tolerations[0]"),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 3}}}, ""),
    ],
)
def test_malformed_constraints(spec: dict[str, Any], field: str) -> None:
    result = constraints_from_pod(pod([limits(gpu=1)], **spec))
    assert isinstance(result, AskError)
    assert result.field.startswith(field)


def test_pending_pod_from_manifest() -> None:
    p = pod([limits(gpu=1, mem=3000)], nodeSelector={"gpu": "on"})
    pending = pending_pod_from_manifest(p, 12.5)
    assert not isinstance(pending, AskError)
    assert pending.key == "ns/p"
    assert pending.first_seen == 12.5
    assert pending.asks() == (GPUAsk(1, 3000, None, 0),)
    assert pending.container_asks == ()
    two = pending_pod_from_manifest(pod([limits(gpu=1), limits(gpu=1)]), 0.0, apply_webhook=True)
    assert not isinstance(two, AskError)
    assert two.asks() == (GPUAsk(1, None, None, 100), GPUAsk(1, None, None, 100))
    assert isinstance(pending_pod_from_manifest(pod([limits(gpu="?")]), 0.0), AskError)
    assert isinstance(
        pending_pod_from_manifest(pod([limits(gpu=1)], nodeSelector=1), 0.0), AskError
    )
