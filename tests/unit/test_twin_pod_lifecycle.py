"""The twin's pod lifecycle times a trace pod's run from its bind, as the simulator does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from provisioner.kube import JSON, Kind, KubeApi
from simulations.simulator.engine.clock import VirtualClock
from simulations.twin.pod_lifecycle import (
    BOUND_AT_ANNOTATION,
    DURATION_ANNOTATION,
    PodLifecycle,
    bound_at,
)


@dataclass
class Pods:
    """A workload cluster with Running pods: what a lifecycle pass lists, and what it wrote."""

    pods: list[JSON]
    finished: list[str] = field(default_factory=list)

    async def list(self, kind: Kind, namespace: str | None = None, **_: Any) -> list[JSON]:
        return list(self.pods)

    async def patch(
        self, kind: Kind, namespace: str | None, name: str, patch: JSON, status: bool = False
    ) -> JSON:
        if patch["status"]["phase"] == "Succeeded":
            self.finished.append(name)
        return {}

    async def delete(self, kind: Kind, namespace: str | None, name: str, *_: Any) -> bool:
        self.pods = [p for p in self.pods if p["metadata"]["name"] != name]
        return True


def _running(name: str, duration_s: float, bound: float | None) -> JSON:
    annotations = {DURATION_ANNOTATION: f"{duration_s:.3f}"}
    if bound is not None:
        annotations[BOUND_AT_ANNOTATION] = f"{bound:.3f}"
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name, "annotations": annotations},
        "spec": {"nodeName": "cell-0"},
        "status": {"phase": "Running"},
    }


async def test_a_pod_bound_by_the_twin_ends_its_duration_after_the_bind() -> None:
    # Bound at 100 for 5 s; the lifecycle first sees it Running at 103 (slow polls).
    clock = VirtualClock(103.0)
    pods = Pods([_running("bound", 5.0, 100.0), _running("unstamped", 5.0, None)])
    lifecycle = PodLifecycle(cast(KubeApi, pods), clock, "ns")
    await lifecycle.step()
    assert pods.finished == []
    clock.move_to(105.0)
    await lifecycle.step()
    assert pods.finished == ["bound"]  # 100 + 5, not 103 + 5
    clock.move_to(108.0)
    await lifecycle.step()
    assert pods.finished == ["bound", "unstamped"]  # no stamp: from its first sight Running


def test_bound_at_reads_the_stamp_or_nothing() -> None:
    assert bound_at(_running("p", 1.0, 12.5)) == 12.5
    assert bound_at(_running("p", 1.0, None)) is None
    broken = _running("p", 1.0, None)
    broken["metadata"]["annotations"][BOUND_AT_ANNOTATION] = "soon"
    assert bound_at(broken) is None
