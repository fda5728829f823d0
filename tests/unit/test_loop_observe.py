"""Building the policy's Observation from raw manifests (autoscaler.observe), table-driven.

What these prove: usage comes from ``hami.io/vgpu-devices-allocated`` per GPU UUID (summed over
containers and pods, terminated pods ignored, one slot per container device); the pool's demand
selection is applied with metav1.LabelSelector semantics (and a namespace selector never
matches a namespace whose labels are unknown); first-seen times survive and are forgotten
when a pod stops pending; requested-but-uncreated cells appear as Booting placeholders; a
Ready cell whose usage is unknown makes the metrics unfresh instead of reading as empty; with
Prometheus configured, a cell packs by its annotations raised to what Prometheus reports, and
a cell Prometheus was not asked about (Ready for less than staleAfter) is busy, not empty.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from autoscaler.explain import Outcome, carry_victims
from autoscaler.observe import (
    CellInputs,
    cells_for_pool,
    observation,
    raised,
    usage_from_pods,
    with_requested,
)
from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.pool_demand import counts_as_demand, remember_first_seen, selector_matches
from autoscaler.policy.scale_down import is_empty
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUUsage,
    MetricsHealth,
    PolicyMemory,
)
from gpucellpool.api.autoscaling import DemandSelection
from gpucellpool.api.base import LabelSelector
from gpucellpool.api.pool import GPUCellPool
from tests.unit.test_loop_fakes import pending_pod, pool_manifest, with_cells


def running(plan: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"hami.io/vgpu-devices-allocated": plan}},
        "spec": {"nodeName": "n"},
        "status": {"phase": phase},
    }


def test_usage_from_allocation_annotations() -> None:
    pods = [
        running("GPU-a,NVIDIA,3000,20:;GPU-a,NVIDIA,5000,10:;"),  # two containers, one GPU
        running("GPU-b,NVIDIA,1000,0:;"),
        running("GPU-a,NVIDIA,9999,99:;", phase="Succeeded"),  # finished: frees its share
        running("garbage;;,,,:"),
    ]
    usage = usage_from_pods(pods, gpus=3)
    assert usage == (GPUUsage(8000, 30, 2), GPUUsage(1000, 0, 1), GPUUsage())


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {}, True),
        ({"matchLabels": {"team": "ml"}}, {"team": "ml"}, True),
        ({"matchLabels": {"team": "ml"}}, {"team": "web"}, False),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}, {"t": "a"}, True),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True),
        ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {"t": ""}, False),
    ],
)
def test_selector_semantics(
    selector: dict[str, Any] | None, labels: dict[str, str], expected: bool
) -> None:
    parsed = None if selector is None else LabelSelector.model_validate(selector)
    assert selector_matches(parsed, labels) is expected


def test_demand_selection() -> None:
    pod = pending_pod("p", team="ml")
    assert counts_as_demand(pod, DemandSelection(), None)
    assert not counts_as_demand(pod, DemandSelection(scheduler_name="other"), None)
    assert counts_as_demand({**pod}, DemandSelection(scheduler_name=""), None)
    by_pod = DemandSelection.model_validate({"podSelector": {"matchLabels": {"team": "web"}}})
    assert not counts_as_demand(pod, by_pod, None)
    by_ns = DemandSelection.model_validate({"namespaceSelector": {"matchLabels": {"gpu": "yes"}}})
    assert counts_as_demand(pod, by_ns, {"gpu": "yes"})
    assert not counts_as_demand(pod, by_ns, None)  # unknown namespace: not ours


def test_first_seen_is_kept_then_forgotten() -> None:
    seen = remember_first_seen({}, ["a", "b"], 10.0)
    seen = remember_first_seen(seen, ["a", "c"], 20.0)
    assert seen == {"a": 10.0, "c": 20.0}


def test_cells_placeholders_and_unknown_usage() -> None:
    rows = [
        {"name": "p-0", "index": 0, "phase": "Ready", "nodeName": "p-0"},
        {"name": "p-1", "index": 1, "phase": "Ready", "nodeName": "p-1"},  # no Node seen
        {"name": "p-2", "index": 2, "phase": "Booting"},
        {"name": "p-3", "index": 3, "phase": "Draining"},
    ]
    pool = GPUCellPool.model_validate(with_cells(pool_manifest("p"), rows))
    inputs = CellInputs(CellShape(), {"p-0": {}}, {"p-0": [running("GPU-a,NVIDIA,4096,0:;")]})
    cells, unknown = cells_for_pool(pool, inputs, now=100.0)
    states = [c.state for c in cells]
    assert states == [CellState.READY, CellState.READY, CellState.BOOTING, CellState.DRAINING]
    assert cells[0].gpus == (GPUUsage(4096, 0, 1),) and cells[0].pods == 1
    assert unknown == ["p-1"]
    obs = observation((), cells, unknown, MetricsHealth(), True)
    assert not obs.metrics.fresh and "p-1" in obs.metrics.detail
    padded = with_requested(cells, requested=5, since=90.0)
    extra = padded[len(cells) :]
    assert [(c.state, c.index) for c in extra] == [(CellState.BOOTING, 4), (CellState.BOOTING, 5)]
    assert with_requested(cells, requested=2, since=90.0) == cells


def test_placeholders_count_only_live_cells() -> None:
    failed = (CellView("x-0", 0, CellState.FAILED, 0.0),)
    assert len(with_requested(failed, 1, 0.0)) == 2


def _two_ready_cells() -> GPUCellPool:
    rows = [
        {"name": "p-0", "index": 0, "phase": "Ready", "nodeName": "p-0"},
        {"name": "p-1", "index": 1, "phase": "Ready", "nodeName": "p-1"},
    ]
    return GPUCellPool.model_validate(with_cells(pool_manifest("p"), rows))


def test_cells_prometheus_did_not_cover_pack_by_their_annotations() -> None:
    """A cell just Ready is not asked of Prometheus: its pods still fill it (was: empty)."""
    pods = {
        "p-0": [running("GPU-a,NVIDIA,24576,100:;")],
        "p-1": [running("GPU-b,NVIDIA,1024,10:;")],
    }
    reported = {"p-1": (GPUUsage(1024, 10, 1),)}
    inputs = CellInputs(CellShape(), {"p-0": {}, "p-1": {}}, pods, reported, frozenset({"p-1"}))
    cells, unknown = cells_for_pool(_two_ready_cells(), inputs, now=100.0)
    assert cells[0].gpus == (GPUUsage(24576, 100, 1),)
    assert unknown == []


def test_a_cell_prometheus_was_asked_about_and_lacks_is_unknown_but_keeps_its_pods() -> None:
    pods = {"p-0": [running("GPU-a,NVIDIA,24576,100:;")], "p-1": []}
    inputs = CellInputs(CellShape(), {"p-0": {}, "p-1": {}}, pods, {}, frozenset({"p-0", "p-1"}))
    cells, unknown = cells_for_pool(_two_ready_cells(), inputs, now=100.0)
    assert unknown == ["p-0", "p-1"]
    assert cells[0].gpus == (GPUUsage(24576, 100, 1),)  # stale metrics never read as empty


def test_prometheus_raises_a_gpu_it_reports_busier_and_never_lowers_one() -> None:
    pods = {"p-0": [running("GPU-a,NVIDIA,8192,30:;")], "p-1": [running("GPU-b,NVIDIA,8192,30:;")]}
    reported = {"p-0": (GPUUsage(12288, 20, 2),), "p-1": (GPUUsage(0, 0, 0),)}
    inputs = CellInputs(CellShape(), {"p-0": {}, "p-1": {}}, pods, reported)
    cells, unknown = cells_for_pool(_two_ready_cells(), inputs, now=100.0)
    assert cells[0].gpus == (GPUUsage(12288, 30, 2),)
    assert cells[1].gpus == (GPUUsage(8192, 30, 1),)
    assert unknown == []


def test_a_cell_without_node_is_known_only_through_prometheus() -> None:
    reported = {"p-0": (GPUUsage(4096, 10, 1),)}
    inputs = CellInputs(CellShape(), {}, {}, reported)
    cells, unknown = cells_for_pool(_two_ready_cells(), inputs, now=100.0)
    assert cells[0].gpus == (GPUUsage(4096, 10, 1),)
    assert unknown == ["p-1"]


def test_raised_pairs_gpus_busiest_first() -> None:
    a = (GPUUsage(0, 0, 0), GPUUsage(8192, 50, 1))
    b = (GPUUsage(4096, 80, 1),)
    assert raised(a, b) == (GPUUsage(8192, 80, 1), GPUUsage(0, 0, 0))


def test_victims_of_the_scale_down_in_force_count_as_draining() -> None:
    """A hold decided before the provisioner marks its victim must not undo the scale-down."""
    cells = tuple(CellView(f"p-{i}", i, CellState.READY, 0.0) for i in range(4))
    after = with_requested(cells, requested=2, since=0.0, victims=("p-1", "p-3", "p-0"))
    assert [c.state for c in after] == [
        CellState.READY,
        CellState.DRAINING,
        CellState.READY,
        CellState.DRAINING,
    ]
    # Victims already gone or being drained are not replaced by others.
    gone = (cells[0], cells[2], replace(cells[3], state=CellState.DRAINING))
    assert with_requested(gone, requested=1, since=0.0, victims=("p-1", "p-3", "p-0")) == (
        replace(cells[0], state=CellState.DRAINING),
        cells[2],
        replace(cells[3], state=CellState.DRAINING),
    )
    # No victims known (a scale-down we did not choose): the count is left as it is.
    assert with_requested(cells, requested=2, since=0.0) == cells


def test_published_victims_accumulate_over_scale_down_steps_until_they_leave() -> None:
    live = [f"p-{i}" for i in range(16)]
    down = Outcome(15, "ScaledDown", "m", True, 0, 0, "True", "ScaledDown", ("p-15",))
    assert carry_victims(down, (), live).victims == ("p-15",)
    # 15 -> 14 before p-15 was marked Draining: both are named, the earlier step first.
    step = replace(down, desired=14, victims=("p-9",))
    assert carry_victims(step, ("p-15",), live).victims == ("p-15", "p-9")
    # A hold at 14 keeps both; once p-15 is Draining (no longer live) only p-9 is left.
    hold = Outcome(14, "MetricsStale", "m", True, 0, 0, "True", "MetricsStale")
    assert carry_victims(hold, ("p-15", "p-9"), live).victims == ("p-15", "p-9")
    assert carry_victims(hold, ("p-15", "p-9"), live[:15]).victims == ("p-9",)
    # A scale-up past the live count needs no victims; Shadow mode publishes none of ours.
    assert carry_victims(replace(hold, desired=17), ("p-15",), live).victims == ()
    assert carry_victims(replace(hold, act=False), ("p-15",), live) == replace(hold, act=False)


def test_a_cancelled_spare_stays_marked_unused_while_it_is_carried() -> None:
    live = [f"p-{i}" for i in range(6)]
    cancel = Outcome(
        4,
        "SparesCancelled",
        "m",
        True,
        0,
        0,
        "True",
        "SparesCancelled",
        ("p-5", "p-4"),
        empty_victims=("p-5", "p-4"),
    )
    assert carry_victims(cancel, (), live).empty_victims == ("p-5", "p-4")
    # The next decision holds at 4 before the provisioner acted: the victims are carried, and
    # so is the mark (the provisioner keeps a carried spare that took a pod meanwhile).
    hold = Outcome(4, "DemandSatisfied", "m", True, 0, 0, "True", "DemandSatisfied")
    carried = carry_victims(hold, ("p-5", "p-4"), live, frozenset({"p-5", "p-4"}))
    assert carried.victims == ("p-5", "p-4") and carried.empty_victims == ("p-5", "p-4")
    # A scale-down step after it: its own victim is not marked; a spare gone is dropped.
    down = replace(hold, desired=3, reason="ScaledDown", victims=("p-1",))
    stepped = carry_victims(down, ("p-5", "p-4"), live[:5], frozenset({"p-5", "p-4"}))
    assert stepped.victims == ("p-4", "p-1") and stepped.empty_victims == ("p-4",)


def test_daemonset_mirror_and_finished_pods_do_not_make_a_cell_busy() -> None:
    """Every real cell runs HAMi's device-plugin DaemonSet pod (and often a CNI agent and a
    static pod): counted, no cell was ever empty, so the warm spare and headroomCells asked for
    a cell on every decision. A workload pod without a GPU still counts (a drain evicts it)."""
    daemon: dict[str, Any] = {
        "metadata": {"ownerReferences": [{"kind": "DaemonSet", "name": "hami-device-plugin"}]},
        "spec": {"nodeName": "p-0"},
        "status": {"phase": "Running"},
    }
    static: dict[str, Any] = {
        "metadata": {"annotations": {"kubernetes.io/config.mirror": "abc"}},
        "spec": {"nodeName": "p-0"},
        "status": {"phase": "Running"},
    }
    done: dict[str, Any] = {
        "metadata": {},
        "spec": {"nodeName": "p-0"},
        "status": {"phase": "Succeeded"},
    }
    cpu_job: dict[str, Any] = {
        "metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "web"}]},
        "spec": {"nodeName": "p-1"},
        "status": {"phase": "Running"},
    }
    pods = {"p-0": [daemon, static, done], "p-1": [dict(daemon), cpu_job]}
    inputs = CellInputs(CellShape(), {"p-0": {}, "p-1": {}}, pods)
    cells, unknown = cells_for_pool(_two_ready_cells(), inputs, now=100.0)
    assert unknown == []
    assert [(c.pods, c.evictable_pods) for c in cells] == [(0, 0), (1, 1)]
    assert is_empty(cells[0], cells[0].gpus) and not is_empty(cells[1], cells[1].gpus)


def test_a_draining_cell_shows_what_its_pods_hold_so_evict_mode_rehomes_them() -> None:
    """The live path gave Draining cells no usage (only Ready cells were read), so in Evict mode
    ``decide`` never found or started room for the pods about to be evicted; the simulator's
    draining cells always had theirs."""
    rows = [
        {"name": "p-0", "index": 0, "phase": "Ready", "nodeName": "p-0"},
        {"name": "p-1", "index": 1, "phase": "Draining", "nodeName": "p-1"},
    ]
    pool = GPUCellPool.model_validate(with_cells(pool_manifest("p"), rows))
    full = running("GPU-a,NVIDIA,24576,100:;")
    pods = {"p-0": [full], "p-1": [running("GPU-b,NVIDIA,24576,100:;")]}
    inputs = CellInputs(CellShape(), {"p-0": {}, "p-1": {}}, pods)
    cells, unknown = cells_for_pool(pool, inputs, now=100.0)
    assert unknown == [] and cells[1].state is CellState.DRAINING
    assert cells[1].gpus == (GPUUsage(24576, 100, 1),)
    obs = observation((), cells, unknown, MetricsHealth(), True)
    config = PolicyConfig(max_replicas=5, rehome_draining_pods=True)
    d = decide(obs, PolicyMemory(), config, 100.0)
    assert (d.reason, d.desired_replicas, d.cells_needed) == (Reason.SCALED_UP, 2, 1)
    waiting = decide(obs, PolicyMemory(), PolicyConfig(max_replicas=5), 100.0)
    assert waiting.desired_replicas == 1  # WaitForIdle: the pod stays where it is
