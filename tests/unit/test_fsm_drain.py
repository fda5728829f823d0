"""Drain decisions: cordon, wait for idle or evict, timeouts, teardown order, pool deletion."""
# ruff: noqa: E501  (the tables below keep one case per line on purpose)

from __future__ import annotations

from dataclasses import replace

import pytest

from gpucellpool.api.autoscaling import DrainMode
from provisioner.fsm.drain import (
    DrainAction as A,
)
from provisioner.fsm.drain import (
    DrainCause,
    DrainInput,
    PodOnNode,
    decide_drain,
    eviction_hold,
    plan_pool_deletion,
)
from provisioner.fsm.vocabulary import CellPhase as P
from provisioner.fsm.vocabulary import CellReason as R

NOW = 1_000.0
GPU_POD = PodOnNode("ml", "train-0", uses_gpu=True)
WEB_POD = PodOnNode("web", "api-0")
DS_POD = PodOnNode("kube-system", "hami-device-plugin-x", daemonset=True)
MIRROR = PodOnNode("kube-system", "static", mirror=True)
GOING = PodOnNode("ml", "old", uses_gpu=True, terminating=True)

START = DrainInput(cause=DrainCause.SCALE_DOWN, now_s=NOW, started_at_s=NOW - 10)
CORDONED = replace(START, node_cordoned=True)
IDLE = replace(CORDONED, allocations_known=True, allocations=0)
BUSY = replace(CORDONED, allocations_known=True, allocations=2, pods=(WEB_POD, GPU_POD, DS_POD))

# (id, input, action, phase, reason)
CASES = [
    ("cordon-first", START, A.CORDON, P.DRAINING, R.CELL_DRAINING),
    ("unknown-allocations-wait", CORDONED, A.WAIT, P.DRAINING, R.WAITING_FOR_ALLOCATIONS),
    ("busy-wait-for-idle", BUSY, A.WAIT, P.DRAINING, R.WAITING_FOR_ALLOCATIONS),
    ("idle-delete-node", IDLE, A.DELETE_NODE, P.DELETING, R.CELL_DRAINING),
    ("node-gone-release-finalizer", replace(IDLE, node_exists=False), A.RELEASE_FINALIZER, P.DELETING, R.CELL_DRAINING),
    ("finalizer-gone-delete-outer", replace(IDLE, node_exists=False, finalizer_present=False), A.DELETE_OUTER, P.DELETING, R.CELL_DRAINING),
    ("outer-deleting-wait", replace(IDLE, node_exists=False, finalizer_present=False, outer_deleting=True), A.WAIT, P.DELETING, R.CELL_DRAINING),
    ("outer-gone-done", replace(IDLE, outer_exists=False), A.DONE, P.DELETING, R.CELL_DELETING),
    ("node-never-existed", replace(START, node_exists=False), A.RELEASE_FINALIZER, P.DELETING, R.CELL_DRAINING),
    ("evict-mode-evicts", replace(BUSY, mode=DrainMode.EVICT), A.EVICT, P.DRAINING, R.EVICTING_PODS),
    ("evict-mode-waits-for-terminating", replace(BUSY, mode=DrainMode.EVICT, pods=(GOING, DS_POD)), A.WAIT, P.DRAINING, R.WAITING_FOR_ALLOCATIONS),
    ("evict-mode-non-gpu-pod-blocks-idle", replace(IDLE, mode=DrainMode.EVICT, pods=(WEB_POD,)), A.EVICT, P.DRAINING, R.EVICTING_PODS),
    ("evict-mode-only-daemonsets-left", replace(IDLE, mode=DrainMode.EVICT, pods=(DS_POD, MIRROR)), A.DELETE_NODE, P.DELETING, R.CELL_DRAINING),
    ("scale-down-timeout-abandons", replace(BUSY, timeout_s=5), A.ABANDON, P.READY, R.DRAIN_TIMED_OUT),
    ("rollout-timeout-abandons", replace(BUSY, cause=DrainCause.ROLLING_UPDATE, timeout_s=5), A.ABANDON, P.READY, R.DRAIN_TIMED_OUT),
    ("no-timeout-waits-forever", replace(BUSY, started_at_s=-(10**9)), A.WAIT, P.DRAINING, R.WAITING_FOR_ALLOCATIONS),
    ("pool-deletion-timeout-proceeds", replace(BUSY, cause=DrainCause.POOL_DELETION, timeout_s=5), A.DELETE_NODE, P.DELETING, R.DRAIN_TIMED_OUT),
    ("pool-deletion-within-window", replace(BUSY, cause=DrainCause.POOL_DELETION, timeout_s=600), A.WAIT, P.DRAINING, R.WAITING_FOR_ALLOCATIONS),
    ("hand-deleted-outer-timeout-proceeds", replace(BUSY, cause=DrainCause.OUTER_DELETED, timeout_s=5), A.DELETE_NODE, P.DELETING, R.DRAIN_TIMED_OUT),
    ("force-skips-cordon-and-wait", replace(START, cause=DrainCause.POOL_DELETION, force=True), A.DELETE_NODE, P.DELETING, R.CELL_DELETING),
    ("failed-replacement-skips-wait", replace(START, cause=DrainCause.REPLACE_FAILED), A.DELETE_NODE, P.DELETING, R.CELL_DELETING),
    ("unreachable-pauses", replace(BUSY, workload_reachable=False), A.WAIT, P.DRAINING, R.UNREACHABLE),
    ("unreachable-scale-down-never-times-out", replace(BUSY, workload_reachable=False, timeout_s=5), A.WAIT, P.DRAINING, R.UNREACHABLE),
    ("unreachable-pool-deletion-timeout", replace(BUSY, workload_reachable=False, cause=DrainCause.POOL_DELETION, timeout_s=5), A.RELEASE_FINALIZER, P.DELETING, R.DRAIN_TIMED_OUT),
]  # fmt: skip


@pytest.mark.parametrize(
    ("inp", "action", "phase", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_drain_step(inp: DrainInput, action: A, phase: P, reason: R) -> None:
    step = decide_drain(inp)
    assert (step.action, step.phase, step.reason) == (action, phase, reason)


def test_eviction_order_and_exclusions() -> None:
    pods = (WEB_POD, DS_POD, MIRROR, GOING, GPU_POD, PodOnNode("a", "z", uses_gpu=True))
    step = decide_drain(replace(BUSY, mode=DrainMode.EVICT, pods=pods))
    assert [(p.namespace, p.name) for p in step.evict] == [
        ("a", "z"),
        ("ml", "train-0"),
        ("web", "api-0"),
    ]


def test_node_left_behind_is_reported() -> None:
    inp = replace(BUSY, workload_reachable=False, cause=DrainCause.POOL_DELETION, timeout_s=5)
    assert decide_drain(inp).node_left_behind
    assert not decide_drain(IDLE).node_left_behind


def test_unknown_never_proceeds_message() -> None:
    assert "unknown never proceeds" in decide_drain(CORDONED).message


def test_full_sequence_reaches_done() -> None:
    state = START
    seen = []
    for _ in range(10):
        step = decide_drain(state)
        seen.append(step.action)
        if step.action is A.DONE:
            break
        state = {
            A.CORDON: replace(state, node_cordoned=True, allocations_known=True),
            A.DELETE_NODE: replace(state, node_exists=False),
            A.RELEASE_FINALIZER: replace(state, finalizer_present=False),
            A.DELETE_OUTER: replace(state, outer_exists=False),
        }[step.action]
    assert seen == [A.CORDON, A.DELETE_NODE, A.RELEASE_FINALIZER, A.DELETE_OUTER, A.DONE]


def test_pool_deletion_plan() -> None:
    cells = (("gpu-0", P.READY), ("gpu-1", P.DRAINING), ("gpu-2", P.FAILED), ("gpu-3", P.DELETING))
    plan = plan_pool_deletion(cells, deletion_started_s=NOW - 599, drain_timeout_s=600, now_s=NOW)
    assert (
        plan.drain == ("gpu-0", "gpu-2") and not plan.release_pool_finalizer and not plan.timed_out
    )
    assert plan_pool_deletion(cells, NOW - 600, 600, NOW).timed_out
    assert plan_pool_deletion((), NOW, 600, NOW).release_pool_finalizer


def test_force_deletes_pods_once_then_tears_down() -> None:
    forced = replace(
        START, cause=DrainCause.POOL_DELETION, force=True, pods=(GPU_POD, WEB_POD, DS_POD, MIRROR)
    )
    step = decide_drain(forced)
    assert step.action is A.DELETE_PODS and step.phase is P.DELETING
    assert {p.name for p in step.delete} == {"train-0", "api-0"}  # never DaemonSet or mirror
    assert step.evict == ()
    again = decide_drain(replace(forced, pods_deleted=True))  # a refused delete never holds it
    assert again.action is A.DELETE_NODE
    failed = replace(START, cause=DrainCause.REPLACE_FAILED, pods=(GPU_POD,))
    assert decide_drain(failed).action is A.DELETE_NODE  # only Force deletes pods


def test_outer_node_drain_proceeds_at_timeout() -> None:
    busy = replace(BUSY, cause=DrainCause.OUTER_NODE_DRAIN, timeout_s=5)
    step = decide_drain(busy)
    assert (step.action, step.reason) == (A.DELETE_NODE, R.DRAIN_TIMED_OUT)
    within = replace(busy, timeout_s=600, mode=DrainMode.EVICT)
    assert decide_drain(within).action is A.EVICT


def test_eviction_hold_names_the_refused_pods() -> None:
    assert eviction_hold((), 30) == (None, "")
    reason, message = eviction_hold(("ml/train-0 (cell p-0)",), 42.4)
    assert reason == "EvictionBlocked"
    assert "ml/train-0 (cell p-0)" in message and "in 42s" in message
