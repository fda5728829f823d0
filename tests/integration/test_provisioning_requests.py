"""ProvisioningRequests of both classes, served by ``gpucellpool run`` on the real apiservers.

What these prove, with the operator in process (autoscaler, provisioner and the gang
controller) against the workload apiserver where the harness installed the published
ProvisioningRequest CRD, PodTemplates as Kueue writes them, and the twin (KubeSwift, kubelet,
HAMi registration; one 8192 MiB GPU per cell):

* check-capacity: with one Ready cell, a request for two 4000 MiB pods is Accepted and
  Provisioned (``CapacityIsFound``) and books that room; a second request for two more is
  Provisioned=False (``CapacityIsNotFound``) and the pool adds no cell for it;
* best-effort-atomic-scale-up within maxReplicas: three 6000 MiB pods (one cell each) make the
  pool go from 0 to 3 cells in one decision (no target of 1 or 2 is ever published), three
  SwiftGuests are created and the request is Provisioned (``CapacityIsProvisioned``); a pod
  that consumes the request is not counted again (still 3);
* best-effort-atomic-scale-up that cannot be met (three cells needed, maxReplicas 2): Failed
  (``AtMaxReplicas``) and Provisioned=False, no SwiftGuest, the target stays 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autoscaler.policy import provreq
from gpucellpool.kube.errors import KubeError
from gpucellpool.kube.rest import RestClient
from gpucellpool.operator.app import App
from gpucellpool.runtime.clock import SystemClock
from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import Twin, api_for, join_secret
from tests.integration import chart_support
from tests.integration.chart_support import one, render, rules
from tests.integration.test_loop_expander import guests_by_pool
from tests.integration.test_loop_helpers import (
    PoolWatch,
    autoscaled_pool,
    client_for,
    create_pool,
    decision,
    mark_unschedulable,
    shut_down,
    start_app,
    watch_pool,
)

JSON = dict[str, Any]
helm = chart_support.helm  # the fixture
PROVREQS = "/apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests"


def pod_template(namespace: str, name: str, trial: str, mem_mib: int) -> JSON:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem_mib)}
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "template": {
            "metadata": {"labels": {"trial": trial}},
            "spec": {
                "schedulerName": "hami-scheduler",
                "containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}],
            },
        },
    }


def request(namespace: str, name: str, cls: str, template: str, count: int) -> JSON:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "provisioningClassName": cls,
            "podSets": [{"podTemplateRef": {"name": template}, "count": count}],
        },
    }


def conditions(obj: JSON | None) -> dict[str, tuple[str, str]]:
    items = ((obj or {}).get("status") or {}).get("conditions") or []
    return {c["type"]: (c["status"], c["reason"]) for c in items}


@dataclass
class Setup:
    app: App
    infra: RestClient
    workload: RestClient
    watch: PoolWatch
    namespace: str

    async def ask(self, name: str, cls: str, mem_mib: int, count: int) -> None:
        ns = self.namespace
        await self.workload.create(
            f"/api/v1/namespaces/{ns}/podtemplates", pod_template(ns, name, ns, mem_mib)
        )
        await self.workload.create(PROVREQS.format(ns=ns), request(ns, name, cls, name, count))

    async def answered(
        self, name: str, check: Callable[[dict[str, tuple[str, str]]], bool], timeout_s: float
    ) -> dict[str, tuple[str, str]]:
        """The request's conditions once ``check`` holds (polled with a deadline)."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = conditions(
                await self.workload.get(f"{PROVREQS.format(ns=self.namespace)}/{name}")
            )
            if check(got):
                return got
            assert time.monotonic() < deadline, f"request {name}: {got}"
            await asyncio.sleep(0.2)  # polling the apiserver with a deadline

    async def passes_after_now(self, count: int = 2, timeout_s: float = 60) -> None:
        """Wait until the gang controller has made ``count`` more passes."""
        target = self.app.gangs.passes + count
        deadline = time.monotonic() + timeout_s
        while self.app.gangs.passes < target:
            assert time.monotonic() < deadline, "gang controller made no pass"
            await asyncio.sleep(0.05)  # polling an in-process counter with a deadline


@contextlib.asynccontextmanager
async def operator(
    infra_ep: ClusterEndpoint, workload_ep: ClusterEndpoint, namespace: str, **autoscaling: Any
) -> AsyncIterator[Setup]:
    """The twin, the operator and one pool ``gangs`` (8192 MiB cells) whose demand is the pods
    labelled trial=<namespace>; ``autoscaling`` overrides its autoscaling fields."""
    infra, workload = await client_for(infra_ep), await client_for(workload_ep)
    twin_infra, twin_workload = (
        await api_for(infra_ep.kubeconfig_path),
        await api_for(workload_ep.kubeconfig_path),
    )
    await twin_infra.apply(join_secret(namespace))
    pool = autoscaled_pool("gangs", namespace, namespace)
    pool["spec"]["autoscaling"]["cellShape"]["gpuMemoryMiB"] = 8192
    pool["spec"]["autoscaling"].update(autoscaling)
    app = await start_app(infra_ep, namespace, "solo", provision=True)
    watch, task = await watch_pool(infra, namespace, "gangs")
    try:
        async with Twin(twin_infra, twin_workload, SystemClock(), namespace):
            await create_pool(infra, workload_ep, pool)
            await watch.until(lambda s: decision(s).get("reason") in ("Idle", "ScaledUp"), 90)
            yield Setup(app, infra, workload, watch, namespace)
    finally:
        await shut_down(app, [task], (infra, workload))


async def test_check_capacity_answers_from_ready_cells_and_books(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    async with operator(infra, workload, namespace, minReplicas=1) as run:
        await run.watch.until(lambda s: s.get("readyCells") == 1, 240)
        await run.ask("fits", provreq.CHECK_CAPACITY, 4000, 2)
        found = await run.answered("fits", lambda c: "Provisioned" in c, 60)
        assert found == {
            "Accepted": ("True", "Accepted"),
            "Provisioned": ("True", "CapacityIsFound"),
        }
        # The first request's 8000 MiB are booked: two more 4000 MiB pods do not fit the cell.
        await run.ask("more", provreq.CHECK_CAPACITY, 4000, 2)
        missing = await run.answered("more", lambda c: "Provisioned" in c, 60)
        assert missing["Provisioned"] == ("False", "CapacityIsNotFound")
        assert "Failed" not in missing  # check-capacity retries
        await run.passes_after_now()
        status = run.watch.seen[-1][1]
        assert status.get("desiredReplicas") == 1  # check-capacity never scales
        assert (await run.answered("fits", bool, 5))["Provisioned"][0] == "True"


async def test_atomic_gang_adds_all_its_cells_in_one_decision(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    async with operator(infra, workload, namespace, maxReplicas=4) as run:
        mark = len(run.watch.seen)
        await run.ask("gang", provreq.ATOMIC, 6000, 3)
        got = await run.answered("gang", lambda c: "Provisioned" in c, 60)
        assert got["Provisioned"] == ("True", "CapacityIsProvisioned"), got
        _, scaled = await run.watch.until(lambda s: s.get("desiredReplicas", 0) > 0, 60, mark)
        assert scaled["desiredReplicas"] == 3, decision(scaled)
        assert decision(scaled)["reason"] == "ScaledUp" and decision(scaled)["cellsNeeded"] == 3
        targets = {s.get("desiredReplicas", 0) for _, s in run.watch.seen[mark:]}
        assert targets <= {0, 3}, targets  # never 1 or 2: one decision
        deadline = time.monotonic() + 60
        while (guests := await guests_by_pool(run.infra, [namespace])) != {"gangs": 3}:
            assert time.monotonic() < deadline, guests
            await asyncio.sleep(0.2)  # polling the apiserver with a deadline

        # A gang member arrives, consuming the request: the placeholder stands for it.
        member = pod_template(namespace, "gang-member-0", namespace, 6000)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "gang-member-0",
                "namespace": namespace,
                "labels": {"trial": namespace},
                "annotations": {
                    provreq.CONSUME_ANNOTATION: "gang",
                    provreq.CLASS_ANNOTATION: provreq.ATOMIC,
                },
            },
            "spec": member["template"]["spec"],
        }
        await run.workload.create(f"/api/v1/namespaces/{namespace}/pods", pod)
        await mark_unschedulable(run.workload, namespace, "gang-member-0")
        state = run.app.autoscaler.pools[(namespace, "gangs")]
        cluster = next(iter(run.app.clusters.clusters.values()))
        deadline = time.monotonic() + 60
        while not (
            cluster.pods is not None
            and _unschedulable(cluster.pods.get(f"{namespace}/gang-member-0"))
        ):
            assert time.monotonic() < deadline, "the member never reached the Pods cache"
            await asyncio.sleep(0.05)  # polling in-process state with a deadline
        # Decide now on what the cache holds. Waiting for the loop's own decisions raced its
        # timing: the member standing in for a placeholder leaves the inputs unchanged, so the
        # event-woken pass may skip and the next one comes at the 60 s resync.
        await run.app.autoscaler.decide_once((namespace, "gangs"))
        assert state.last_decision is not None and state.last_decision.desired_replicas == 3
        pending = [p.key for p in state.last_inputs[0].pending] if state.last_inputs else []
        assert f"{namespace}/gang-member-0" not in pending
        assert len(pending) == 3 and all("/gang-0-" in k for k in pending), pending


def _unschedulable(pod: JSON | None) -> bool:
    items = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c.get("reason") == "Unschedulable" for c in items)


async def test_atomic_gang_that_cannot_be_met_adds_nothing_and_fails(
    infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str
) -> None:
    async with operator(infra, workload, namespace, maxReplicas=2) as run:
        await run.ask("toobig", provreq.ATOMIC, 6000, 3)
        got = await run.answered("toobig", lambda c: "Failed" in c, 60)
        assert got["Failed"] == ("True", "AtMaxReplicas"), got
        assert got["Provisioned"] == ("False", "CapacityIsNotFound")
        assert got["Accepted"] == ("True", "Accepted")
        obj = await run.workload.get(f"{PROVREQS.format(ns=namespace)}/toobig")
        assert obj is not None
        failed = next(c for c in obj["status"]["conditions"] if c["type"] == "Failed")
        assert "need 3 cell(s) even on an empty pool; max replicas is 2" in failed["message"]
        await run.passes_after_now()
        state = run.app.autoscaler.pools[(namespace, "gangs")]
        decided = state.decisions
        run.app.autoscaler.wake([(namespace, "gangs")])
        deadline = time.monotonic() + 60
        while state.decisions == decided:
            assert time.monotonic() < deadline, "no decision"
            await asyncio.sleep(0.05)  # polling an in-process counter with a deadline
        assert state.last_decision is not None and state.last_decision.desired_replicas == 0
        assert await guests_by_pool(run.infra, [namespace]) == {}
        assert conditions(obj) == await run.answered("toobig", bool, 5)  # terminal: unchanged


def test_workload_rbac_lets_the_operator_serve_requests(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, {"workloadObserverRBAC": {"enabled": True}})
    role = one(docs, "ClusterRole", "gpucellpool-observer")
    grants = {
        (group, res, verb)
        for r in rules(role)
        for group in r["apiGroups"]
        for res in r["resources"]
        for verb in r["verbs"]
    }
    for verb in ("list", "watch"):
        assert ("autoscaling.x-k8s.io", "provisioningrequests", verb) in grants
        assert ("", "podtemplates", verb) in grants
    assert ("autoscaling.x-k8s.io", "provisioningrequests/status", "patch") in grants
    assert ("autoscaling.x-k8s.io", "provisioningrequests", "patch") not in grants  # spec: no
    status = {verb for group, res, verb in grants if res == "provisioningrequests/status"}
    assert status == {"patch"}  # server-side apply only (least privilege)


async def test_the_published_schema_is_enforced(workload: ClusterEndpoint, namespace: str) -> None:
    api = await client_for(workload)
    try:
        path = PROVREQS.format(ns=namespace)
        bad = request(namespace, "zero", provreq.ATOMIC, "t", 1)
        bad["spec"]["podSets"][0]["count"] = 0
        with pytest.raises(KubeError) as refused:
            await api.create(path, bad)
        assert refused.value.status == 422 and "count" in str(refused.value)
        await api.create(path, request(namespace, "fixed", provreq.ATOMIC, "t", 1))
        change = {"spec": {"provisioningClassName": provreq.CHECK_CAPACITY}}
        with pytest.raises(KubeError) as immutable:
            await api.merge_patch(f"{path}/fixed", change)
        assert "Value is immutable" in str(immutable.value)
    finally:
        await api.close()
