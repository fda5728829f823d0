"""The gang controller with the loop on in-memory ports and a virtual clock.

What these prove: an atomic request is Provisioned and its gang's cells come in one decision;
a lagging cache (the write not seen yet) neither rewrites nor forgets the booking; ten minutes
after Provisioned the request gets BookingExpired and the placeholders leave the loop's demand;
a pending pod that consumes a booked request is not counted; requests of other classes are
never touched; a standby writes nothing; a missing PodTemplate is reported and retried; a write
the cache shows is forgotten (conditions carry whole seconds) and a request deleted and
recreated under the same name is judged afresh, not given the old one's conditions.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from autoscaler.explain import rfc3339
from autoscaler.gangs import Bookings, GangController
from autoscaler.loop import Autoscaler
from autoscaler.policy import provreq
from simulations.simulator.engine.clock import VirtualClock
from tests.unit.test_loop import SETTINGS, last_decision
from tests.unit.test_loop_fakes import FakeWorkload, FakeWriter, pending_pod, pool_manifest

JSON = dict[str, Any]
T0 = 1_000_000.0


class FakeRequests:
    """``RequestSource`` over dicts; ``apply_status`` records and (unless ``lag``) applies."""

    def __init__(self) -> None:
        self.items: dict[str, JSON] = {}
        self.templates: dict[str, JSON] = {}
        self.written: list[JSON] = []
        self.lag = False
        self.connections: list[object] = ["wl"]  # synced connections (Secrets) showing the items

    def clusters(self) -> Sequence[object]:
        return self.connections

    def requests(self, cluster: object) -> Sequence[JSON]:
        del cluster
        return list(self.items.values())

    def template(self, cluster: object, namespace: str, name: str) -> JSON | None:
        return self.templates.get(f"{namespace}/{name}")

    async def apply_status(self, cluster: object, body: JSON) -> None:
        self.written.append(copy.deepcopy(body))
        if not self.lag:
            self.items[body["metadata"]["name"]]["status"] = body["status"]


def template(name: str, mem_mib: int) -> JSON:
    pod = pending_pod(name, mem_mib)
    return {"metadata": {"name": name, "namespace": "default"}, "template": pod}


def request(name: str, cls: str, count: int) -> JSON:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "generation": 1,
            "creationTimestamp": rfc3339(T0),
        },
        "spec": {
            "provisioningClassName": cls,
            "podSets": [{"podTemplateRef": {"name": "t"}, "count": count}],
        },
    }


def conditions(source: FakeRequests, name: str) -> dict[str, tuple[str, str]]:
    items = (source.items[name].get("status") or {}).get("conditions") or []
    return {c["type"]: (c["status"], c["reason"]) for c in items}


World = tuple[Autoscaler, GangController, FakeRequests, FakeWorkload, FakeWriter, VirtualClock]


@pytest.fixture
async def gangs() -> AsyncIterator[World]:
    clock, workload, writer = VirtualClock(T0), FakeWorkload(), FakeWriter()
    bookings = Bookings()
    scaler = Autoscaler(bookings.view(workload, clock), writer, clock, settings=SETTINGS)
    source = FakeRequests()
    source.templates["default/t"] = template("t", 20000)  # one 24 GiB cell per member
    controller = GangController(scaler, source, bookings, clock)
    scaler.pool_event("ADDED", pool_manifest("a", maxReplicas=5))
    await clock.advance(0.2)  # the pool's first decision: nothing pending
    yield scaler, controller, source, workload, writer, clock
    await scaler.close()


async def test_atomic_gang_is_one_decision_then_the_booking_expires(gangs: World) -> None:
    scaler, controller, source, workload, writer, clock = gangs
    source.items["job"] = request("job", provreq.ATOMIC, 3)
    await controller.pass_once()
    assert conditions(source, "job") == {
        "Accepted": ("True", "Accepted"),
        "Provisioned": ("True", "CapacityIsProvisioned"),
    }
    details = source.items["job"]["status"]["provisioningClassDetails"]
    assert details == {provreq.POOL_DETAIL: "ns/a", provreq.CELLS_DETAIL: "3"}
    await clock.advance(0.3)  # the controller woke the pool
    published = [s["status"]["desiredReplicas"] for s in writer.for_pool("a")]
    assert published == [0, 3]  # one decision: 0 -> 3
    assert last_decision(writer, "a")["pendingAsks"] == 3

    # A member arrives and is still pending: the placeholder stands for it.
    member = pending_pod("job-member", 20000)
    member["metadata"]["annotations"] = {provreq.CONSUME_ANNOTATION: "job"}
    workload.pods["job-member"] = member
    scaler.cluster_event("wl")
    await clock.advance(0.3)
    state = scaler.pools[("ns", "a")]
    assert state.last_inputs is not None
    assert {p.key for p in state.last_inputs[0].pending} == {f"default/job-0-{i}" for i in range(3)}

    # The cache lags behind our write: nothing is written again, the booking holds.
    source.lag = True
    source.items["job"].pop("status")
    writes = len(source.written)
    await controller.pass_once()
    assert len(source.written) == writes and len(controller.bookings.by_cluster["wl"]) == 1
    source.lag = False
    source.items["job"]["status"] = source.written[-1]["status"]

    await clock.advance(provreq.BOOKING_SECONDS)
    await controller.pass_once()
    assert conditions(source, "job")["BookingExpired"] == (
        "True",
        "CapacityReservationTimeExpired",
    )
    assert not controller.bookings.by_cluster["wl"]
    await clock.advance(0.3)
    state = scaler.pools[("ns", "a")]
    assert state.last_inputs is not None
    assert [p.key for p in state.last_inputs[0].pending] == ["default/job-member"]


async def test_other_classes_are_left_alone(gangs: World) -> None:
    _, controller, source, *_ = gangs
    source.items["other"] = request("other", "queued-provisioning.gke.io", 1)
    await controller.pass_once()
    assert source.written == [] and "status" not in source.items["other"]


async def test_a_standby_writes_nothing(gangs: World) -> None:
    scaler, controller, source, *_ = gangs
    scaler.is_leader = lambda: False
    source.items["job"] = request("job", provreq.CHECK_CAPACITY, 1)
    await controller.pass_once()
    assert source.written == []


async def test_a_missing_template_is_reported_and_retried(gangs: World) -> None:
    _, controller, source, *_ = gangs
    source.templates.clear()
    source.items["job"] = request("job", provreq.CHECK_CAPACITY, 1)
    await controller.pass_once()
    provisioned = next(
        c for c in source.items["job"]["status"]["conditions"] if c["type"] == "Provisioned"
    )
    assert (
        provisioned["status"] == "False"
        and "PodTemplate default/t not found" in (provisioned["message"])
    )
    source.templates["default/t"] = template("t", 20000)
    await controller.pass_once()  # no cell yet: check-capacity finds none and never scales
    assert conditions(source, "job")["Provisioned"] == ("False", "CapacityIsNotFound")
    assert controller.bookings.by_cluster["wl"] == ()


async def test_a_write_seen_in_the_cache_is_forgotten_at_a_fractional_time(gangs: World) -> None:
    _, controller, source, _, _, clock = gangs
    assert clock.now() != int(clock.now())  # the pass runs between two whole seconds
    source.items["job"] = request("job", provreq.ATOMIC, 2)
    await controller.pass_once()
    assert conditions(source, "job")["Provisioned"] == ("True", "CapacityIsProvisioned")
    await controller.pass_once()  # the cache shows the write (whole seconds, as Kubernetes)
    assert controller._written == {}


async def test_a_recreated_request_is_judged_afresh(gangs: World) -> None:
    _, controller, source, *_ = gangs
    source.lag = True  # our write is never seen: only the remembered verdict says Provisioned
    source.items["job"] = request("job", provreq.ATOMIC, 2)
    source.items["job"]["metadata"]["uid"] = "first"
    await controller.pass_once()
    assert source.written[-1]["status"]["provisioningClassDetails"][provreq.CELLS_DETAIL] == "2"
    del source.items["job"]  # deleted; recreated under the same name for a bigger gang
    await controller.pass_once()
    assert controller._written == {}  # a deleted request's write is not remembered
    source.items["job"] = request("job", provreq.ATOMIC, 6)  # maxReplicas is 5
    source.items["job"]["metadata"]["uid"] = "second"
    await controller.pass_once()
    written = {c["type"]: c["reason"] for c in source.written[-1]["status"]["conditions"]}
    assert written["Failed"] == "AtMaxReplicas" and "Provisioned" in written
    assert controller.bookings.by_cluster["wl"] == ()


async def test_cells_booked_by_an_older_request_count_against_max_replicas(gangs: World) -> None:
    _, controller, source, _, writer, clock = gangs
    source.items["first"] = request("first", provreq.ATOMIC, 3)
    second = request("second", provreq.ATOMIC, 3)  # maxReplicas 5: 3 + 3 do not fit
    second["metadata"]["creationTimestamp"] = rfc3339(T0 + 1)
    source.items["second"] = second
    await controller.pass_once()
    assert conditions(source, "first")["Provisioned"] == ("True", "CapacityIsProvisioned")
    assert conditions(source, "second")["Provisioned"] == ("False", "CapacityIsNotFound")
    assert "Failed" not in conditions(source, "second")  # the first gang's cells may free up
    await clock.advance(0.3)
    assert writer.for_pool("a")[-1]["status"]["desiredReplicas"] == 3


async def test_no_cell_is_promised_without_a_known_shape(gangs: World) -> None:
    scaler, controller, source, *_, clock = gangs
    scaler.pool_event("MODIFIED", pool_manifest("b", maxReplicas=5, cellShape=None))
    await clock.advance(0.2)
    scaler.pool_event("DELETED", pool_manifest("a", maxReplicas=5))
    await clock.advance(0.2)
    source.items["job"] = request("job", provreq.ATOMIC, 1)
    await controller.pass_once()
    assert conditions(source, "job")["Provisioned"] == ("False", "CapacityIsNotFound")
    assert "no cell shape" in source.written[-1]["status"]["conditions"][-1]["message"]


async def test_after_a_restart_placeholders_are_pinned_to_the_booked_pool(gangs: World) -> None:
    scaler, _, source, _, _, clock = gangs
    manifest = pool_manifest("a", maxReplicas=5)
    manifest["spec"]["workloadCluster"]["node"] = {"labels": {"gpu-pool": "a"}}
    scaler.pool_event("MODIFIED", manifest)
    await clock.advance(0.2)
    provisioned = request("job", provreq.ATOMIC, 1)  # booked by the operator before it restarted
    provisioned["status"] = {
        "conditions": [
            {"type": "Provisioned", "status": "True", "reason": "CapacityIsProvisioned",
             "message": "", "lastTransitionTime": rfc3339(clock.now())},
        ],
        "provisioningClassDetails": {provreq.POOL_DETAIL: "ns/a", provreq.CELLS_DETAIL: "1"},
    }  # fmt: skip
    source.items["job"] = provisioned
    restarted = GangController(scaler, source, Bookings(), clock)
    await restarted.pass_once()
    snap = restarted.bookings.view(scaler.workload, clock).snapshot(scaler.pools[("ns", "a")].pool)
    assert snap.pod_index is not None
    [placeholder] = snap.pod_index.unbound
    assert placeholder["spec"]["nodeSelector"] == {"gpu-pool": "a"}


async def test_two_secrets_to_one_cluster_judge_and_book_a_request_once(gangs: World) -> None:
    scaler, controller, source, workload, writer, clock = gangs
    # A second Secret, in another namespace, reaches the same cluster: both show the request.
    workload.same_cluster = {"wl": "uid-1", "wl-b": "uid-1"}
    source.connections = ["wl-b", "wl"]
    scaler.pool_event("ADDED", pool_manifest("b", ns="team-b", secret="wl-b", priority=10))
    await clock.advance(0.2)
    source.items["job"] = request("job", provreq.ATOMIC, 2)
    await controller.pass_once()
    assert len(source.written) == 1  # judged once, through one of the two Secrets
    details = source.items["job"]["status"]["provisioningClassDetails"]
    assert details[provreq.POOL_DETAIL] == "team-b/b"  # a pool of the other Secret: a candidate
    assert list(controller.bookings.by_cluster) == ["uid-1"]
    await clock.advance(0.3)
    assert last_decision(writer, "b")["desiredReplicas"] == 2
    assert last_decision(writer, "a")["desiredReplicas"] == 0  # the placeholders went to b


@pytest.mark.parametrize(
    ("cls", "failed"), [(provreq.ATOMIC, True), (provreq.CHECK_CAPACITY, False)]
)
async def test_a_member_no_pool_fits_fails_an_atomic_request(
    gangs: World, cls: str, failed: bool
) -> None:
    _, controller, source, *_ = gangs
    source.templates["default/t"] = template("t", 30000)  # more than a 24576 MiB GPU
    source.items["job"] = request("job", cls, 2)
    await controller.pass_once()
    found = conditions(source, "job")
    assert found["Provisioned"] == ("False", "CapacityIsNotFound")
    assert (found.get("Failed") == ("True", "MemberFitsNoCell")) is failed
    written = source.written[-1]["status"]["conditions"]
    message = next(c["message"] for c in written if c["type"] == "Provisioned")
    assert message.startswith("no pool fits every member (pool ns/a: ")


async def test_a_request_waits_for_a_selecting_pool_to_observe_its_cells(gangs: World) -> None:
    scaler, controller, source, *_ = gangs
    state = scaler.pools[("ns", "a")]
    observed, state.last_inputs = state.last_inputs, None  # as before the pool's first decision
    source.items["job"] = request("job", provreq.ATOMIC, 2)
    await controller.pass_once()
    assert source.written == []  # not "no pool selects the pods": that pool will answer
    state.last_inputs = observed
    await controller.pass_once()
    assert conditions(source, "job")["Provisioned"] == ("True", "CapacityIsProvisioned")


async def test_a_booked_member_already_running_is_not_counted_twice(gangs: World) -> None:
    scaler, controller, source, workload, _, clock = gangs
    source.templates["default/t"] = template("t", 8000)
    manifest = pool_manifest("a", maxReplicas=5)
    manifest["status"] = {
        "cells": [{"name": "a-0", "index": 0, "phase": "Ready", "nodeName": "a-0"}]
    }
    workload.nodes = [{"metadata": {"name": "a-0"}}]
    scaler.pool_event("MODIFIED", manifest)
    source.items["first"] = request("first", provreq.CHECK_CAPACITY, 1)
    await clock.advance(0.3)
    await controller.pass_once()
    assert conditions(source, "first")["Provisioned"] == ("True", "CapacityIsFound")
    # The member runs on a-0 (8000 of 24576 MiB): its booking needs nothing more.
    member = pending_pod("first-member", 8000)
    member["metadata"]["annotations"] = {
        provreq.CONSUME_ANNOTATION: "first",
        "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,8000,0:;",
    }
    member["spec"]["nodeName"] = "a-0"
    member["status"] = {"phase": "Running"}
    workload.pods["first-member"] = member
    scaler.cluster_event("wl")
    await clock.advance(0.3)
    second = request("second", provreq.CHECK_CAPACITY, 2)  # 2 x 8000 fit the 16576 MiB left
    second["metadata"]["creationTimestamp"] = rfc3339(T0 + 1)
    source.items["second"] = second
    await controller.pass_once()
    assert conditions(source, "second")["Provisioned"] == ("True", "CapacityIsFound")
