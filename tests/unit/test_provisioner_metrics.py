"""The provisioner's counters: reconcile errors, failed capacity reads, evictions.

What this proves: the shell counts through ``metrics_port`` (which ``OperatorMetrics``
satisfies as it is) exactly the failures the earlier implementation meant - a pass that
raised (a lost 409 race is not an error), a capacity or physical-inventory read that failed
(an API that is not served is a state, not a failed read), and every eviction the Eviction API
accepted (a PDB's 429 is not an eviction).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gpucellpool.api import GPUCellPool
from gpucellpool.api.status import CellPhase, CellStatus
from gpucellpool.operator.metrics import OperatorMetrics
from provisioner.backends.base import CellObjects
from provisioner.drainer import _perform
from provisioner.events import NullEventSink
from provisioner.fsm.drain import DrainAction, DrainStep, PodOnNode
from provisioner.inventory import free_physical_gpus, read_capacity
from provisioner.kube import JSON, Conflict, Kind, KubeError, NotFound, Unreachable
from provisioner.metrics_port import NO_METRICS, ProvisionerMetrics
from provisioner.reconciler import PoolKey, Reconciler
from simulations.simulator.engine.clock import VirtualClock

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"
REGISTER = "GPU-a,10,8192,100,NVIDIA-T4,0,true:"


class ScriptedApi:
    """A KubeApi whose reads return ``objects`` or raise ``fail`` (by kind); evictions raise
    for the pod names in ``refuse``."""

    def __init__(
        self,
        fail: Mapping[str, Exception] | None = None,
        objects: Mapping[str, JSON] | None = None,
        refuse: frozenset[str] = frozenset(),
    ) -> None:
        self.fail = dict(fail or {})
        self.objects = dict(objects or {})
        self.refuse = refuse
        self.evicted: list[str] = []

    def _check(self, kind: Kind) -> None:
        if kind.kind in self.fail:
            raise self.fail[kind.kind]

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        self._check(kind)
        return self.objects.get(name)

    async def list(self, kind: Kind, *args: Any, **kwargs: Any) -> list[JSON]:
        self._check(kind)
        return []

    async def evict(self, namespace: str, name: str) -> None:
        if name in self.refuse:
            raise KubeError(429, "Cannot evict pod as it would violate the pod's PDB")
        self.evicted.append(name)

    async def close(self) -> None:
        return None


def _pool(backend: str = "Native") -> GPUCellPool:
    body = yaml.safe_load((SAMPLES / "autoscaling-off.yaml").read_text())
    body["metadata"].update({"namespace": "ns", "uid": "u-1", "resourceVersion": "1"})
    body["spec"]["cell"]["gpu"]["backend"] = backend
    return GPUCellPool.model_validate(body)


def _value(reg: CollectorRegistry, name: str, **extra: str) -> float | None:
    return reg.get_sample_value(name, {"namespace": "ns", "pool": "p", **extra})


@pytest.fixture
def reg() -> CollectorRegistry:
    return CollectorRegistry()


def _metrics(reg: CollectorRegistry) -> ProvisionerMetrics:
    metrics: ProvisionerMetrics = OperatorMetrics(reg)  # the operator's recorder fits the port
    return metrics


async def test_a_failed_pass_is_counted_and_still_raised(reg: CollectorRegistry) -> None:
    api = ScriptedApi(fail={"GPUCellPool": Unreachable(0, "connection refused")})
    reconciler = Reconciler(
        api,  # type: ignore[arg-type]
        VirtualClock(1_790_000_000.0),
        events=NullEventSink(),
        metrics=_metrics(reg),
    )
    with pytest.raises(Unreachable):
        await reconciler.reconcile_once(PoolKey("ns", "p"))
    with pytest.raises(Unreachable):
        await reconciler.reconcile_once(PoolKey("ns", "p"))
    assert _value(reg, "gpucell_reconcile_errors_total") == 2


async def test_a_lost_race_is_not_a_reconcile_error(reg: CollectorRegistry) -> None:
    api = ScriptedApi(fail={"GPUCellPool": Conflict(409, "the object has been modified")})
    reconciler = Reconciler(
        api,  # type: ignore[arg-type]
        VirtualClock(1_790_000_000.0),
        events=NullEventSink(),
        metrics=_metrics(reg),
    )
    result = await reconciler.reconcile_once(PoolKey("ns", "p"))
    assert result.requeue_after_s is not None
    assert _value(reg, "gpucell_reconcile_errors_total") == 0


async def test_without_metrics_a_failure_is_only_raised() -> None:
    api = ScriptedApi(fail={"GPUCellPool": RuntimeError("boom")})
    reconciler = Reconciler(api, VirtualClock(1_790_000_000.0), events=NullEventSink())  # type: ignore[arg-type]
    assert reconciler.metrics is NO_METRICS
    with pytest.raises(RuntimeError):
        await reconciler.reconcile_once(PoolKey("ns", "p"))


@pytest.mark.parametrize(
    ("backend", "failing", "error", "counted"),
    [
        ("Native", "SwiftGPUNode", Unreachable(0, "timeout"), 1),
        ("Native", "SwiftGPUNode", KubeError(500, "etcd"), 1),
        ("DRA", "ResourceSlice", KubeError(403, "forbidden"), 1),
        ("Native", "SwiftGPUNode", NotFound(404, "no such API"), 0),  # not served: a state
    ],
)
async def test_physical_inventory_read_failures_are_counted(
    reg: CollectorRegistry, backend: str, failing: str, error: Exception, counted: int
) -> None:
    recorder = OperatorMetrics(reg).pool("ns", "p")
    api = ScriptedApi(fail={failing: error})
    assert await free_physical_gpus(api, _pool(backend), recorder) is None  # type: ignore[arg-type]
    assert _value(reg, "gpucell_capacity_scrape_errors_total", reason="inventory") == counted
    assert _value(reg, "gpucell_capacity_scrape_errors_total", reason="capacity") == 0


def _ready(name: str) -> CellStatus:
    return CellStatus(name=name, index=0, phase=CellPhase.READY, node_name=name)


async def test_hami_read_failure_is_counted_once_and_keeps_the_stored_capacity(
    reg: CollectorRegistry,
) -> None:
    recorder = OperatorMetrics(reg).pool("ns", "p")
    api = ScriptedApi(fail={"Pod": Unreachable(0, "timeout")})
    rows = [_ready("p-0"), _ready("p-1")]
    reading = await read_capacity(api, _pool(), rows, 2, 0.0, recorder)  # type: ignore[arg-type]
    assert reading.capacity is None and reading.condition[0] == "Unknown"
    assert _value(reg, "gpucell_capacity_scrape_errors_total", reason="capacity") == 1


async def test_unreachable_or_unregistered_is_a_state_not_a_failed_read(
    reg: CollectorRegistry,
) -> None:
    recorder = OperatorMetrics(reg).pool("ns", "p")
    gone = await read_capacity(None, _pool(), [_ready("p-0")], 1, 0.0, recorder)
    assert gone.capacity is None and gone.condition[2] == "workload cluster unreachable"
    bare = ScriptedApi(objects={"p-0": {"metadata": {"name": "p-0"}}})
    unregistered = await read_capacity(bare, _pool(), [_ready("p-0")], 1, 0.0, recorder)  # type: ignore[arg-type]
    assert unregistered.capacity is None
    assert _value(reg, "gpucell_capacity_scrape_errors_total", reason="capacity") == 0


async def test_a_read_capacity_is_the_status_object() -> None:
    node = {"metadata": {"name": "p-0", "annotations": {"hami.io/node-nvidia-register": REGISTER}}}
    api = ScriptedApi(objects={"p-0": node})
    reading = await read_capacity(api, _pool(), [_ready("p-0")], 1, 0.0)  # type: ignore[arg-type]
    assert reading.condition[1] == "CapacityFree"
    assert reading.capacity is not None and reading.capacity.gpu_devices == 1
    assert reading.capacity.gpu_memory is not None
    assert reading.capacity.gpu_memory.total == "8Gi"


async def test_each_accepted_eviction_is_counted(reg: CollectorRegistry) -> None:
    recorder = OperatorMetrics(reg).pool("ns", "p")
    pods = tuple(PodOnNode("w", n, True, False, False, False) for n in ("a", "b", "c"))
    step = DrainStep(DrainAction.EVICT, CellPhase.DRAINING, "CellDraining", "", evict=pods)
    workload = ScriptedApi(refuse=frozenset({"b"}))
    cell = CellObjects(name="p-0", index=0, outer={"metadata": {}})
    await _perform(step, cell, None, workload, 0.0, recorder)  # type: ignore[arg-type]
    assert workload.evicted == ["a", "c"]
    assert _value(reg, "gpucellpool_evictions_total") == 2
