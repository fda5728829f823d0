"""ProvisioningRequest conditions as Cluster Autoscaler sets them, and booked placeholders."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.explain import rfc3339
from autoscaler.gang_pods import Booking, placed_consumers, with_bookings
from autoscaler.loop_ports import WorkloadSnapshot
from autoscaler.policy import provreq
from autoscaler.policy.demand import is_pending_hami_pod
from autoscaler.policy.errors import AskError
from autoscaler.policy.gang import AT_MAX_REPLICAS, SCALE_UP, GangPlan

T0 = 1_800_000_000.0


def raw_request(cls: str = provreq.ATOMIC, **params: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "team",
            "name": "job-a",
            "generation": 1,
            "creationTimestamp": rfc3339(T0),
        },
        "spec": {
            "provisioningClassName": cls,
            "podSets": [{"podTemplateRef": {"name": "worker"}, "count": 3}],
            "parameters": params,
        },
    }


def request(cls: str = provreq.ATOMIC, **params: str) -> provreq.Request:
    parsed = provreq.parse_request(raw_request(cls, **params))
    assert isinstance(parsed, provreq.Request)
    return parsed


def status(verdict: provreq.Verdict) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in verdict.conditions}


FITS = GangPlan(True, 0, "CapacityAvailable", "fits", 3, 0)
ADDS = GangPlan(False, 2, SCALE_UP, "3 member(s) need 2 new cell(s)", 3, 2)
SHORT = GangPlan(False, 0, AT_MAX_REPLICAS, "short now", 3, 2)
NEVER = GangPlan(False, 0, AT_MAX_REPLICAS, "need 3 even empty", 3, 3, permanent=True)


def test_parse_reads_class_pod_sets_and_creation_time() -> None:
    req = request(ValidUntilSeconds="60")
    assert (req.key, req.class_name, req.pod_sets) == (
        "team/job-a",
        provreq.ATOMIC,
        (("worker", 3),),
    )
    assert req.created_at == T0 and req.parameters == {"ValidUntilSeconds": "60"}


def test_parse_names_the_bad_field() -> None:
    raw = raw_request()
    raw["spec"]["podSets"] = [{"podTemplateRef": {}, "count": 1}]
    bad = provreq.parse_request(raw)
    assert isinstance(bad, AskError) and bad.field == "spec.podSets[0]"


@pytest.mark.parametrize("cls", provreq.SERVED_CLASSES)
def test_fits_now_is_provisioned_capacity_found_and_booked(cls: str) -> None:
    verdict = provreq.judge(request(cls), FITS, "infra/pool-a", "", T0 + 5)
    assert status(verdict) == {
        "Accepted": ("True", "Accepted"),
        "Provisioned": ("True", "CapacityIsFound"),
    }
    assert verdict.book and verdict.pool == "infra/pool-a"
    assert verdict.booked_until == T0 + 5 + provreq.BOOKING_SECONDS
    assert verdict.details[provreq.POOL_DETAIL] == "infra/pool-a"


def test_atomic_scale_up_is_provisioned_when_requested() -> None:
    verdict = provreq.judge(request(), ADDS, "infra/pool-a", "", T0)
    assert status(verdict)["Provisioned"] == ("True", "CapacityIsProvisioned")
    assert verdict.book and verdict.details[provreq.CELLS_DETAIL] == "2"


def test_check_capacity_does_not_scale_up() -> None:
    verdict = provreq.judge(request(provreq.CHECK_CAPACITY), ADDS, "infra/pool-a", "", T0)
    assert status(verdict)["Provisioned"] == ("False", "CapacityIsNotFound")
    assert not verdict.book and "Failed" not in status(verdict)


def test_atomic_short_for_now_retries() -> None:
    verdict = provreq.judge(request(), SHORT, "infra/pool-a", "", T0)
    assert status(verdict)["Provisioned"] == ("False", "CapacityIsNotFound")
    assert "Failed" not in status(verdict) and "will retry" in verdict.conditions[-1].message


def test_atomic_that_can_never_fit_fails_with_the_reason() -> None:
    verdict = provreq.judge(request(), NEVER, "infra/pool-a", "", T0)
    assert status(verdict)["Failed"] == ("True", AT_MAX_REPLICAS)
    assert status(verdict)["Provisioned"] == ("False", "CapacityIsNotFound")
    assert not verdict.book


def test_check_capacity_no_retry_fails_at_once() -> None:
    verdict = provreq.judge(request(provreq.CHECK_CAPACITY, noRetry="true"), SHORT, "p/a", "", T0)
    assert status(verdict)["Failed"] == ("True", "CapacityIsNotFound")


def test_no_pool_says_why_and_retries() -> None:
    verdict = provreq.judge(request(), None, None, "PodTemplate team/worker not found", T0)
    provisioned = next(c for c in verdict.conditions if c.type == "Provisioned")
    assert provisioned.status == "False" and "PodTemplate team/worker" in provisioned.message


def test_valid_until_expires_an_atomic_request() -> None:
    verdict = provreq.judge(request(ValidUntilSeconds="60"), SHORT, "p/a", "", T0 + 61)
    assert status(verdict)["Failed"] == ("True", "Expired")
    default = provreq.judge(request(), SHORT, "p/a", "", T0 + provreq.EXPIRY_SECONDS)
    assert status(default)["Failed"] == ("True", "Expired")


def _provisioned_at(at: float) -> provreq.Request:
    first = provreq.judge(request(), ADDS, "infra/pool-a", "", at)
    return provreq.Request(
        **{
            **{f: getattr(request(), f) for f in provreq.Request.__dataclass_fields__},
            "conditions": first.conditions,
            "details": first.details,
        }
    )


def test_booking_holds_then_expires_after_ten_minutes() -> None:
    booked = _provisioned_at(T0)
    held = provreq.judge(booked, None, None, "", T0 + 599)
    assert held.book and held.pool == "infra/pool-a" and provreq.unchanged(booked, held)
    over = provreq.judge(booked, None, None, "", T0 + 600)
    assert not over.book
    assert status(over)["BookingExpired"] == ("True", "CapacityReservationTimeExpired")
    assert status(over)["Provisioned"] == ("True", "CapacityIsProvisioned")


def test_transition_time_kept_while_status_holds() -> None:
    first = provreq.judge(request(), SHORT, "p/a", "", T0)
    again_req = provreq.Request(
        "team", "job-a", 1, provreq.ATOMIC, (("worker", 3),), T0, {}, first.conditions
    )
    again = provreq.judge(again_req, SHORT, "p/a", "", T0 + 30)
    assert [c.last_transition for c in again.conditions] == [T0, T0]


def test_status_body_is_an_apply_of_conditions_and_details() -> None:
    verdict = provreq.judge(request(), ADDS, "infra/pool-a", "", T0)
    body = provreq.status_body(request(), verdict)
    assert body["apiVersion"] == "autoscaling.x-k8s.io/v1" and body["kind"] == "ProvisioningRequest"
    cond = body["status"]["conditions"][1]
    assert cond["lastTransitionTime"] == rfc3339(T0) and cond["observedGeneration"] == 1


TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "train"}},
    "spec": {
        "containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000}}}
        ]
    },
}


def test_pod_set_reads_the_template_ask() -> None:
    ps = provreq.pod_set(request(), 0, {"template": TEMPLATE})
    assert not isinstance(ps, AskError)
    assert (
        ps.count == 3 and ps.template.ask.memory_mib == 8000 and ps.template.key == "team/job-a/0"
    )


def _pod(name: str, node: str | None, consumes: str | None) -> dict[str, Any]:
    annotations = {provreq.CONSUME_ANNOTATION: consumes} if consumes else {}
    return {
        "metadata": {"namespace": "team", "name": name, "annotations": annotations},
        "spec": {"nodeName": node, "schedulerName": "hami-scheduler", **TEMPLATE["spec"]},
        "status": {
            "phase": "Running" if node else "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def test_snapshot_swaps_consumers_for_placeholders() -> None:
    booking = Booking("team", "job-a", provreq.ATOMIC, ("infra", "a"), ((TEMPLATE, 3),), T0 + 600)
    pods = [
        _pod("m0", "cell-0", "job-a"),  # placed: one placeholder fewer
        _pod("m1", None, "job-a"),  # pending consumer: the placeholder stands for it
        _pod("other", None, None),
    ]
    snap = WorkloadSnapshot(True, pods)
    pins = {("infra", "a"): {"gpu": "a"}}
    seen = with_bookings(snap, [booking], "hami-scheduler", pins)
    assert seen.pod_index is not None
    names = [p["metadata"]["name"] for p in seen.pod_index.unbound]
    assert names == ["other", "job-a-0-1", "job-a-0-2"]
    fake = seen.pod_index.unbound[1]
    assert is_pending_hami_pod(fake, "hami-scheduler")
    assert fake["spec"]["nodeSelector"] == {"gpu": "a"}
    assert fake["metadata"]["annotations"][provreq.CONSUME_ANNOTATION] == "job-a"
    assert with_bookings(snap, [], "hami-scheduler", pins) is snap
    assert placed_consumers({"cell-0": [pods[0]]}) == {("team", "job-a"): 1}
