"""HAMi DRA readers: slices -> devices, claims -> asks and allocations, pods -> demand, and the
``CapacityProviderReady`` judgement; malformed input is skipped or refused with its field named."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.policy.dra_demand import dra_scheduler_name, pending_claim_pod, waits_on_claims
from autoscaler.policy.errors import AskError
from autoscaler.policy.fit import fits_fresh_cell
from autoscaler.policy.hami_dra import (
    DEVICE_CLASS,
    DRIVER,
    claim_allocations,
    claim_asks,
    claim_usage,
    slice_devices,
)
from autoscaler.policy.pool_demand import counts_as_demand
from autoscaler.policy.types import CellShape, GPUAsk, GPUUsage, NodeTemplate
from gpucellpool.api.autoscaling import DemandSelection
from provisioner.fsm.dra_capacity import dra_cell_capacity, dra_devices, dra_registration, read_dra
from provisioner.fsm.pool_capacity import workload_capacity
from provisioner.fsm.provider_health import (
    DraCluster,
    NodeRegistration,
    Registration,
    annotation_registration,
    provider_condition,
)
from provisioner.workload import gpu_pods_on_node
from simulations.simulator.traces.dra import claim_ask, in_mode
from simulations.simulator.traces.model import TracePod
from simulations.twin.hami_dra import fit_on_node, hami_slice, webhook_pod

JSON = dict[str, Any]


def _slice(node: str = "c-0", gpus: int = 2, memory_mib: int = 24576) -> JSON:
    return hami_slice(node, "uid", gpus, memory_mib, "abcd1234")


def _claim(memory: str | None = "4Gi", cores: str | None = "30", count: Any = 1) -> JSON:
    claim, _ = webhook_pod("ns", "p", 1)
    asked = claim["spec"]["devices"]["requests"][0]["exactly"]
    asked["count"] = count
    requests = {}
    if memory is not None:
        requests["memory"] = memory
    if cores is not None:
        requests["cores"] = cores
    asked["capacity"] = {"requests": requests}
    return claim


def _allocated(claim: JSON, node: str, device: str, consumed: JSON | None = None) -> JSON:
    result: JSON = {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}
    if consumed is not None:
        result["consumedCapacity"] = consumed
    return {**claim, "status": {"allocation": {"devices": {"results": [result]}}}}


def test_slice_devices_read_memory_cores_model_and_uuid() -> None:
    devices, skipped = slice_devices([_slice()])
    assert skipped == ()
    assert [(d.name, d.memory_mib, d.cores) for d in devices["c-0"]] == [
        ("hami-gpu-0", 24576, 100),
        ("hami-gpu-1", 24576, 100),
    ]
    assert devices["c-0"][0].uuid == "GPU-abcd1234-0"
    assert devices["c-0"][0].model == "NVIDIA GeForce GTX 1080"


def _broken(mutate: str) -> JSON:
    s = _slice(gpus=1)
    device = s["spec"]["devices"][0]
    if mutate == "no-memory":
        del device["capacity"]["memory"]
    elif mutate == "bad-memory":
        device["capacity"]["memory"]["value"] = "lots"
    elif mutate == "negative-cores":
        device["capacity"]["cores"]["value"] = "-5"
    elif mutate == "other-type":
        device["attributes"]["type"] = {"string": "mig"}
    elif mutate == "not-object":
        s["spec"]["devices"] = ["x"]
    elif mutate == "no-node":
        del s["spec"]["nodeName"]
    return s


@pytest.mark.parametrize(
    "mutate", ["no-memory", "bad-memory", "negative-cores", "other-type", "not-object", "no-node"]
)
def test_malformed_slice_devices_are_skipped_with_a_reason(mutate: str) -> None:
    devices, skipped = slice_devices([_broken(mutate)])
    assert not devices.get("c-0")
    assert len(skipped) == 1 and "c-0-hami-gpu" in skipped[0]


def test_other_drivers_and_older_generations_do_not_count() -> None:
    foreign = _slice()
    foreign["spec"]["driver"] = "gpu.kubeswift.io"
    old, new = _slice(gpus=2), _slice(gpus=1)
    new["spec"]["pool"]["generation"] = 2
    devices, _ = slice_devices([foreign, old, new])
    assert len(devices["c-0"]) == 1


def test_claim_asks_per_gpu_memory_and_cores() -> None:
    ask = claim_asks(_claim("4Gi", "30", 2), DEVICE_CLASS)
    assert isinstance(ask, tuple) and len(ask) == 1
    assert (ask[0].count, ask[0].memory_mib, ask[0].cores) == (2, 4096, 30)


def test_claim_without_capacity_requests_takes_the_device_defaults() -> None:
    ask = claim_asks(_claim(None, None), DEVICE_CLASS)
    assert isinstance(ask, tuple)
    assert (ask[0].memory_mib, ask[0].cores) == (None, 100)


def test_claim_of_another_class_asks_nothing() -> None:
    assert claim_asks(_claim(), "other.example.com") == ()


@pytest.mark.parametrize(
    ("memory", "cores", "count", "field"),
    [
        ("4 gigs", "30", 1, "capacity.requests.memory"),
        ("4Gi", "130", 1, "capacity.requests.cores"),
        ("4Gi", "30", 0, "count"),
        ("4Gi", "30", "2", "count"),
    ],
)
def test_malformed_claims_are_refused_naming_the_field(
    memory: str, cores: str, count: Any, field: str
) -> None:
    result = claim_asks(_claim(memory, cores, count), DEVICE_CLASS)
    assert isinstance(result, AskError)
    assert result.field.endswith(field)


def test_all_mode_and_prioritised_lists_cannot_be_sized() -> None:
    claim = _claim()
    claim["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    assert isinstance(claim_asks(claim, DEVICE_CLASS), AskError)
    hami = {"name": "a", "deviceClassName": DEVICE_CLASS}
    claim["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [hami]}]
    assert isinstance(claim_asks(claim, DEVICE_CLASS), AskError)


def test_another_drivers_prioritised_list_does_not_hide_the_gpu_ask() -> None:
    """A claim asking a HAMi GPU and, through ``firstAvailable``, another driver's device:
    the GPU is still demand; the other list is not HAMi's to size."""
    claim = _claim("4Gi", "30")
    nic = {"name": "nic", "firstAvailable": [{"name": "a", "deviceClassName": "nic.example"}]}
    claim["spec"]["devices"]["requests"].append(nic)
    asks = claim_asks(claim, DEVICE_CLASS)
    assert isinstance(asks, tuple) and [(a.memory_mib, a.cores) for a in asks] == [(4096, 30)]


def _pending(pod: JSON, scheduler: str | None = None) -> JSON:
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {**pod, "status": {"phase": "Pending", "conditions": [cond]}}


def test_a_pod_waiting_on_a_claim_is_the_same_ask_as_a_device_plugin_pod() -> None:
    claim, pod = webhook_pod("ns", "p", 6000, cores=40)
    pod = _pending(pod)
    assert waits_on_claims(pod, dra_scheduler_name("hami-scheduler"))
    got = pending_claim_pod(pod, {"ns/ns-p-main": claim}, DEVICE_CLASS, 5.0)
    assert not isinstance(got, AskError) and got is not None
    assert got.ask == GPUAsk(1, 6000, None, 40)
    assert got.key == "ns/p" and got.first_seen == 5.0
    shape = CellShape(gpus=1, memory_mib=8192, cores_percent=100, slots=10)
    assert fits_fresh_cell(got, shape, NodeTemplate()).ok
    assert not fits_fresh_cell(got, CellShape(memory_mib=4096), NodeTemplate()).ok


def test_claim_pods_that_are_not_demand() -> None:
    claim, pod = webhook_pod("ns", "p", 6000)
    pod = _pending(pod)
    assert pending_claim_pod(pod, {}, DEVICE_CLASS, 0.0) is None  # claim not created yet
    placed = _allocated(claim, "c-0", "hami-gpu-0")
    assert pending_claim_pod(pod, {"ns/ns-p-main": placed}, DEVICE_CLASS, 0.0) is None
    assert not waits_on_claims(_pending(webhook_pod("ns", "q", 1)[1], "other"), "default-scheduler")
    bound = _pending(pod)
    bound["spec"] = {**bound["spec"], "nodeName": "c-0"}
    assert not waits_on_claims(bound, "")


def test_a_malformed_claim_makes_the_pod_an_ask_error() -> None:
    claim, pod = webhook_pod("ns", "p", 6000)
    claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["cores"] = "x"
    got = pending_claim_pod(_pending(pod), {"ns/ns-p-main": claim}, DEVICE_CLASS, 0.0)
    assert isinstance(got, AskError) and "ResourceClaim ns/ns-p-main" in got.field


def test_allocations_use_consumed_capacity_else_the_request() -> None:
    devices, _ = slice_devices([_slice()])
    a = _allocated(_claim("4Gi", "30"), "c-0", "hami-gpu-0", {"memory": "2Gi", "cores": "10"})
    b = _allocated(_claim("4Gi", "30"), "c-0", "hami-gpu-1")
    held = claim_allocations([a, b], devices, DEVICE_CLASS)
    assert [(x.device, x.memory_mib, x.cores) for x in held["c-0"]] == [
        ("hami-gpu-0", 2048, 10),
        ("hami-gpu-1", 4096, 30),
    ]


def test_claim_usage_is_per_gpu_busiest_first() -> None:
    a = _allocated(_claim("4Gi", "30"), "c-0", "hami-gpu-1")
    usage = claim_usage([_slice()], [a, a], DEVICE_CLASS, 2)
    assert usage["c-0"] == (GPUUsage(8192, 60, 2), GPUUsage())


def test_cell_capacity_from_slices_matches_the_annotation_model() -> None:
    a = _allocated(_claim("4Gi", "30"), "c-0", "hami-gpu-0")
    reading = read_dra([_slice()], [a], DEVICE_CLASS)
    cell = dra_cell_capacity(reading, "c-0")
    assert cell.devices is not None and len(cell.devices) == 2
    assert (cell.used_memory_mib, cell.used_cores) == (4096, 30)
    assert cell.allocations == (("GPU-abcd1234-0", 4096, 30),)
    status = workload_capacity([cell], "DRA", 0.0)
    assert status is not None and status.mode == "DRA" and status.gpu_devices == 2
    assert status.gpu_memory is not None and status.gpu_memory.allocated == "4Gi"
    assert dra_cell_capacity(reading, "elsewhere").devices is None
    assert dra_devices([_slice()], "c-0") == 2 and dra_devices([], "c-0") is None


def test_registration_per_node() -> None:
    reading = read_dra([_slice("c-0"), _broken("no-memory")], [], DEVICE_CLASS)
    assert dra_registration(reading, "c-0")[0] is Registration.DETECTED
    assert dra_registration(read_dra([_broken("bad-memory")], [], DEVICE_CLASS), "c-0")[0] is (
        Registration.UNPARSEABLE
    )
    assert dra_registration(reading, "c-9")[0] is Registration.MISSING
    assert annotation_registration(None) is Registration.MISSING
    assert annotation_registration("not,a:record") is Registration.UNPARSEABLE
    assert annotation_registration("[]") is Registration.DETECTED


def _node(name: str, reg: Registration, since: float = 0.0) -> NodeRegistration:
    return NodeRegistration(name, reg, since)


@pytest.mark.parametrize(
    ("nodes", "dra", "expected"),
    [
        ([], None, ("Unknown", "AwaitingRegistration")),
        ([_node("a", Registration.MISSING, 90.0)], None, ("Unknown", "AwaitingRegistration")),
        ([_node("a", Registration.MISSING)], None, ("False", "HAMiNotDetected")),
        (
            [_node("a", Registration.MISSING), _node("b", Registration.DETECTED)],
            None,
            ("True", "HAMiDetected"),
        ),
        (
            [_node("a", Registration.UNPARSEABLE), _node("b", Registration.DETECTED)],
            None,
            ("False", "RegistrationUnparseable"),
        ),
        (
            [_node("b", Registration.DETECTED)],
            DraCluster(False, DEVICE_CLASS, None),
            ("False", "DRAFeatureGateMissing"),
        ),
        (
            [_node("b", Registration.DETECTED)],
            DraCluster(True, DEVICE_CLASS, False),
            ("False", "DRADeviceClassMissing"),
        ),
        (
            [_node("b", Registration.DETECTED)],
            DraCluster(True, DEVICE_CLASS, True),
            ("True", "HAMiDetected"),
        ),
        ([], DraCluster(None, DEVICE_CLASS, None), ("Unknown", "AwaitingRegistration")),
    ],
)
def test_provider_condition(
    nodes: list[NodeRegistration], dra: DraCluster | None, expected: tuple[str, str]
) -> None:
    status, reason, message = provider_condition(nodes, 100.0, 60.0, dra)
    assert (status, reason) == expected
    assert message


def test_twin_allocator_fits_every_request_on_one_node() -> None:
    claim = _claim("16000Mi", "30", 2)
    ask = claim_asks(claim, DEVICE_CLASS)
    assert isinstance(ask, tuple)
    free = {"hami-gpu-0": [24576, 100], "hami-gpu-1": [10000, 100]}
    whole = {"hami-gpu-0": 24576, "hami-gpu-1": 24576}
    assert fit_on_node([("c", "gpu", ask[0])], free, whole) is None  # two distinct GPUs needed
    free["hami-gpu-1"] = [20000, 100]
    shares = fit_on_node([("c", "gpu", ask[0])], free, whole)
    assert shares is not None and sorted(s.device for s in shares) == ["hami-gpu-0", "hami-gpu-1"]


@pytest.mark.parametrize(
    ("ask", "read"),
    [
        (GPUAsk(1, 6000, None, 30), GPUAsk(1, 6000, None, 30)),
        (GPUAsk(2, None, 50, 50), GPUAsk(2, 12288, None, 50)),  # percent -> MiB of the card
        (GPUAsk(1, None, 100, 100), GPUAsk(1, None, None, 100)),  # whole card stays whole
        (GPUAsk(4, None, None, 100), GPUAsk(4, None, None, 100)),
    ],
)
def test_simulator_reads_trace_asks_through_the_webhook_claim(ask: GPUAsk, read: GPUAsk) -> None:
    assert claim_ask(ask, 24576) == read
    pods = (TracePod("a", 0.0, 60.0, ask), TracePod("b", 5.0, 60.0, ask))
    assert [p.ask for p in in_mode(pods, "DRA", 24576)] == [read, read]
    assert in_mode(pods, "DevicePlugin", 24576) == pods
    with pytest.raises(ValueError, match="unknown HAMi mode"):
        in_mode(pods, "Other", 24576)


def test_demand_of_each_mode_is_only_its_own_kind_of_pod() -> None:
    selection = DemandSelection()  # schedulerName hami-scheduler: kube-scheduler in DRA mode
    claim_pod = _pending(webhook_pod("ns", "p", 6000)[1])
    plugin_pod = _pending(
        {
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {
                "schedulerName": "hami-scheduler",
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        }
    )
    assert counts_as_demand(claim_pod, selection, None, "DRA")
    assert not counts_as_demand(claim_pod, selection, None, "DevicePlugin")
    assert counts_as_demand(plugin_pod, selection, None, "DevicePlugin")
    assert not counts_as_demand(plugin_pod, selection, None, "DRA")
    assert counts_as_demand(claim_pod, selection, None)  # routing: either
    assert counts_as_demand(plugin_pod, selection, None)


class _PodsOnNode:
    """A KubeApi stand-in that lists fixed pods (only ``list`` is called)."""

    def __init__(self, pods: list[JSON]) -> None:
        self.pods = pods

    async def list(self, kind: Any, namespace: Any = None, **selectors: str) -> list[JSON]:
        return self.pods


async def test_pods_holding_hami_claims_count_as_gpu_pods_for_drains() -> None:
    _, claim_pod = webhook_pod("ns", "p", 6000)
    unlabelled = {"metadata": {"name": "u"}, "spec": {"resourceClaims": [{"name": "x"}]}}
    plain = {"metadata": {"name": "cpu"}, "spec": {"containers": [{"name": "c"}]}}
    done = {**claim_pod, "status": {"phase": "Succeeded"}}
    api = _PodsOnNode([claim_pod, unlabelled, plain, done])
    got = await gpu_pods_on_node(api, "c-0")  # type: ignore[arg-type]
    assert [p["metadata"]["name"] for p in got] == ["p", "u"]


def test_allocation_defaults_come_from_the_result_s_own_request() -> None:
    claim = _claim("2Gi", "10")
    first = claim["spec"]["devices"]["requests"][0]
    second: JSON = {"name": "big", "exactly": {**first["exactly"], "capacity": {"requests": {}}}}
    second["exactly"]["capacity"]["requests"] = {"memory": "6Gi", "cores": "20"}
    claim["spec"]["devices"]["requests"].append(second)
    result = {"request": "big", "driver": DRIVER, "pool": "c-0", "device": "hami-gpu-1"}
    claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    devices, _ = slice_devices([_slice()])
    held = claim_allocations([claim], devices, DEVICE_CLASS)
    assert [(a.device, a.memory_mib, a.cores) for a in held["c-0"]] == [("hami-gpu-1", 6144, 20)]


def test_a_claim_pod_with_a_malformed_spec_or_status_is_an_error_not_a_crash() -> None:
    bad_spec = {"metadata": {"name": "p", "namespace": "ns"}, "spec": ["not", "an", "object"]}
    got = pending_claim_pod(bad_spec, {}, "hami.io/gpu", 0.0)
    assert isinstance(got, AskError) and got.field == "spec"
    bad_status = {"metadata": {"name": "p"}, "spec": {"resourceClaims": []}, "status": "x"}
    assert not isinstance(pending_claim_pod(bad_status, {}, "hami.io/gpu", 0.0), AskError)
