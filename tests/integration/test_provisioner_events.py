"""Events on transitions, posted to the real infrastructure apiserver (events.k8s.io/v1).

What these prove: a pool becoming Ready leaves the story in ``kubectl get events`` - the cell
created, its phase transitions up to Ready, the pool's conditions (Connected, AllCellsReady) -
reported by ``gpucellpool`` about the pool object; a scale-down leaves CellDraining and
CellDeleted; a failed cell leaves a Warning with its own reason and attempt number. No note
carries Secret contents (the kubeconfig or the join template).
"""

from __future__ import annotations

from typing import Any

from provisioner.events import EVENT
from provisioner.kube import KubeApi
from simulations.harness import ClusterEndpoint
from simulations.twin import GuestFault
from simulations.twin.scenario import swiftguest_pool
from tests.integration.provisioner_support import (
    apis,  # noqa: F401  (fixture)
    ready_with,
    row,
    running_pool,
)

SECRET_MARKERS = ("k0s install", "certificate-authority-data", "client-key-data", "token")


async def _events(infra_api: KubeApi, namespace: str, pool: str) -> list[dict[str, Any]]:
    items = await infra_api.list(EVENT, namespace)
    return [e for e in items if (e.get("regarding") or {}).get("name") == pool]


def _reasons(events: list[dict[str, Any]], type_: str = "Normal") -> set[str]:
    return {e["reason"] for e in events if e["type"] == type_}


def _no_secrets(events: list[dict[str, Any]]) -> None:
    for e in events:
        assert not any(m in e.get("note", "") for m in SECRET_MARKERS), e["note"]


async def test_ready_and_scale_down_are_announced(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    async with running_pool(apis, workload, swiftguest_pool("evt", namespace, replicas=1)) as run:
        pool = await run.converge(ready_with(1), timeout_s=30)
        ready_events = await _events(infra_api, namespace, "evt")
        await run.scale(0)
        await run.converge(ready_with(0), timeout_s=30)
    assert {"CellCreating", "CellReady", "Connected", "AllCellsReady"} <= _reasons(ready_events)
    assert not _reasons(ready_events, "Warning")
    creating = next(e for e in ready_events if e["reason"] == "CellCreating")
    assert creating["note"] == "creating cell evt-0" and creating["action"] == "Create"
    assert creating["reportingController"] == "gpucellpool"
    assert creating["regarding"]["uid"] == pool["metadata"]["uid"]  # type: ignore[index]
    assert creating["regarding"]["kind"] == "GPUCellPool"
    assert sum(1 for e in ready_events if e["reason"] == "CellReady") == 1  # transitions only
    after = await _events(infra_api, namespace, "evt")
    assert {"CellDraining", "CellDeleted", "ScaledToZero"} <= _reasons(after)
    _no_secrets(after)


async def test_failed_cell_is_a_warning_with_its_reason_and_attempt(
    apis: tuple[KubeApi, KubeApi],  # noqa: F811
    workload: ClusterEndpoint,
    namespace: str,
) -> None:
    infra_api = apis[0]
    async with running_pool(apis, workload, swiftguest_pool("evf", namespace, replicas=1)) as run:
        run.twin.kubeswift.faults["evf-0"] = GuestFault(fail=True)

        def failed(p: Any) -> bool:
            return bool(row(p, "evf-0").get("phase") == "Failed")

        await run.converge(failed, timeout_s=30)
    events = await _events(infra_api, namespace, "evf")
    warnings = [e for e in events if e["type"] == "Warning"]
    failure = next(e for e in warnings if e["reason"] == "GuestFailed")
    assert failure["note"].startswith("cell evf-0 failed (attempt 1)")
    _no_secrets(events)
