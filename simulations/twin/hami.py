"""Simulated HAMi scheduler (extender + device plugin's Allocate) for the twin's workload cluster.

Why this module exists: the operator's scale-up signal is "a pod HAMi could not place", and
its utilisation reading is HAMi's pod annotations and ``hami_*`` metrics. In a live end-to-end
run without GPUs something must play HAMi on the real workload apiserver, with HAMi's rules
and HAMi's strings, so the operator under test sees exactly what it would see in production.

Every ``poll_s`` this controller:

* rebuilds HAMi's cache (``twin.hami_cache``), as the real scheduler does after a restart: Nodes
  (listed every pass) with the ``hami.io/node-nvidia-register`` annotation and allocatable
  ``nvidia.com/gpu`` > 0, and usage from the ``hami.io/vgpu-devices-allocated`` annotation of
  every non-terminal pod labelled ``hami.io/vgpu-node`` (all namespaces: HAMi sees every pod).
  That pod list is the expensive read (every placed pod), so it is taken on the first pass and
  then once per ``refresh_s``, or per four times what the last one took if that is longer (at
  1,000 placed pods on a loaded 2-core box one list took 1.5 s: listing each pass made a pass
  last that long and kept the apiserver at a full core); in between, the last list plus this
  controller's own bookings stand in. Usage grows only through bookings, so the stand-in never
  under-counts: no double allocation. A pod ended by the twin's kubelet (``twin.pod_lifecycle``,
  wired to ``release``) leaves the stand-in at once, as the real scheduler's pod informer drops
  a pod on its update to a terminal phase: its GPU is free for the next pass, as the simulator
  frees it at the pod's end (waiting for the next refresh held it up to ``refresh_s`` longer, 20
  trace seconds at x20). A pod ended by anything else is seen at the next refresh. A restarted
  twin starts from a fresh list;
* places each unbound ``hami-scheduler`` pod of ``namespace`` (oldest first) with the
  simulator's own placement (``twin.hami_placement``): node ``binpack`` (default) or
  ``spread``, GPU ``spread`` (a pod's ``hami.io/node-scheduler-policy`` and
  ``hami.io/gpu-scheduler-policy`` annotations override them), the pod's
  nodeSelector/affinity/tolerations against the Node;
* on success writes HAMi's annotations and label (``/filter`` then ``/bind``: vgpu-node,
  vgpu-time, devices-to-allocate, devices-allocated, bind-phase ``allocating``, bind-time),
  one pod after another (kube-scheduler's scheduling cycle: each placement books capacity the
  next one sees); once the pass has placed every pod it could, binds them through the Binding
  API together and plays the device plugin's ``Allocate`` for each (bind-phase ``success``,
  to-allocate emptied to ``;`` separators). kube-scheduler runs each pod's binding cycle
  asynchronously, apart from the scheduling cycle; bound one after another, a burst of N pods
  took 3N writes (about 1 s wall for 7 pods at load 4, 20 trace seconds at x20), and the
  autoscaler saw a wave's pods leave pending over that second;
* otherwise sets ``PodScheduled=False/Unschedulable`` with kube-scheduler's message over
  HAMi's per-node reasons (hami-facts §3.1-3.2), only when the message changed.

A pod annotated for a node but not yet bound (a pass died in between) is bound to that node on
the next pass; a bound pod still ``allocating`` gets its device-plugin step. Not simulated:
the node lock, Events (FilteringFailed / FailedScheduling), quotas, MIG, GPU-type selectors.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from autoscaler.policy.errors import AskError
from autoscaler.policy.pool_demand import metadata as metadata_of
from gpucellpool.api.clock import Clock
from provisioner.kube import JSON, KINDS, Conflict, KubeApi, NotFound, kind_of
from simulations.twin.common import (
    PollingController,
    each_bounded,
    mark_unschedulable,
    raise_first,
)
from simulations.twin.hami_cache import (
    PodAsks,
    annotations_of,
    book,
    plan_for,
    pod_asks,
    rebuild,
)
from simulations.twin.hami_codec import (
    ALLOCATED,
    BIND_PHASE,
    BIND_TIME,
    SCHEDULER_NAME,
    TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
    NodeAllocation,
    emptied_plan,
    natural_key,
    unschedulable_message,
)
from simulations.twin.hami_exporter import render_metrics
from simulations.twin.hami_placement import (
    BINPACK,
    SPREAD,
    NodeState,
    Placement,
    fits_some_empty_node,
    node_state,
    place,
)
from simulations.twin.pod_lifecycle import BOUND_AT_ANNOTATION

log = logging.getLogger("simulations.twin.hami")
BINDING = kind_of("Binding", "v1")
NODE_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"  # binpack | spread simulated
UNSCHEDULABLE_WRITES = 16  # a pass's Unschedulable verdicts written at once
BIND_WRITES = 16  # a pass's bindings (Binding, then Allocate) run at once
LIST_COST_FACTOR = 4.0  # the placed-pod list takes at most about a quarter of the time


@dataclass
class SimulatedHAMi(PollingController):
    """HAMi on the workload cluster: places ``hami-scheduler`` pods of ``namespace``.

    ``node_label_selector`` is HAMi's ``--node-label-selector``: only matching Nodes are
    known (tests use it to keep to their own Nodes on a shared apiserver).
    """

    workload: KubeApi
    clock: Clock
    namespace: str | None = None
    policy: str = BINPACK
    poll_s: float = 0.1
    gpu_policy: str = SPREAD
    node_label_selector: str = ""
    scheduler_name: str = SCHEDULER_NAME
    refresh_s: float = 1.0  # how often every placed pod is listed again (see the docstring)
    _snapshot: dict[str, NodeAllocation] = field(default_factory=dict)
    _placed: list[JSON] = field(default_factory=list)  # the last list plus bookings since
    _listed_at: float | None = None
    _list_cost_s: float = 0.0  # what the last list of placed pods took (the clock's seconds)
    _verdicts: list[tuple[JSON, str, float]] = field(default_factory=list)  # this pass's
    _binds: list[tuple[JSON, str]] = field(default_factory=list)  # this pass's (pod, node)
    _released: dict[str, float] = field(default_factory=dict)  # pod uid -> when (``release``)

    def release(self, pod: Mapping[str, Any]) -> None:
        """``pod`` ended: its allocation leaves HAMi's cache now (the informer's update to a
        terminal phase), not at the next refresh of the placed-pod list."""
        uid = str(metadata_of(pod).get("uid"))
        self._released[uid] = self.clock.now()
        self._placed = [p for p in self._placed if str(metadata_of(p).get("uid")) != uid]

    def _refreshed(self, listed: Sequence[JSON], asked: float) -> list[JSON]:
        """A fresh list of placed pods without those released since it was asked for (it may
        still show them running); releases before that are in the list as it is."""
        self._released = {u: t for u, t in self._released.items() if t >= asked}
        return [p for p in listed if str(metadata_of(p).get("uid")) not in self._released]

    def allocations(self) -> dict[str, NodeAllocation]:
        """Per node (HAMi's cache after the last pass): devices, usage, container allocations."""
        return dict(self._snapshot)

    def metrics_text(self, legacy_metrics: bool = False) -> str:
        """The ``hami_*`` exposition of the last pass (see ``twin.hami_exporter``)."""
        return render_metrics(self._snapshot.values(), legacy_metrics, self.clock.now())

    def policies_for(self, pod: Mapping[str, Any]) -> tuple[str, str]:
        """Node and GPU policy: the pod's ``hami.io/*-scheduler-policy`` annotations win."""
        notes = annotations_of(pod)
        node = notes.get(NODE_POLICY_ANNOTATION, self.policy)
        gpu = notes.get(GPU_POLICY_ANNOTATION, self.gpu_policy)
        return (
            node if node in (BINPACK, SPREAD) else self.policy,
            gpu if gpu in (BINPACK, SPREAD) else self.gpu_policy,
        )

    async def step(self) -> None:
        now = self.clock.now()
        nodes = await self.workload.list(KINDS["Node"], label_selector=self.node_label_selector)
        every = max(self.refresh_s, LIST_COST_FACTOR * self._list_cost_s)
        fresh = self._listed_at is None or now - self._listed_at >= every
        if fresh:
            asked = self.clock.now()
            listed = await self.workload.list(KINDS["Pod"], None, label_selector=VGPU_NODE)
            self._placed = self._refreshed(listed, asked)
            self._listed_at, self._list_cost_s = now, self.clock.now() - asked
        selector = f"spec.nodeName=,spec.schedulerName={self.scheduler_name}"
        pending = await self.workload.list(KINDS["Pod"], self.namespace, field_selector=selector)
        states = rebuild(nodes, self._placed)
        try:
            if fresh:  # the cached copies' bind-phase is stale; only a fresh list is acted on
                await self._finish_allocations(self._placed, states)
            self._verdicts, self._binds = [], []
            for pod in sorted(pending, key=_age_key):
                if metadata_of(pod).get("deletionTimestamp") is None:
                    await self._schedule(pod, states, now)
            # Placements take turns (each books capacity the next one sees); the bindings and
            # the verdicts on the pods that did not fit change nothing the others read, so they
            # are written together: one after another, a burst of N pending pods reached the
            # autoscaler spread over N writes (1-2 s wall at load ~15), its scale-up with them.
            binds = [partial(self._bind, *b) for b in await self._still_placeable(self._binds)]
            raise_first(await each_bounded(binds, BIND_WRITES))
            writes = [partial(mark_unschedulable, self.workload, *v) for v in self._verdicts]
            raise_first(await each_bounded(writes, UNSCHEDULABLE_WRITES))
        finally:
            self._snapshot = {
                name: states[name].snapshot()
                for name in sorted(states, key=natural_key)
                if states[name].registered
            }

    async def _still_placeable(self, binds: Sequence[tuple[JSON, str]]) -> list[tuple[JSON, str]]:
        """The pass's bindings whose Node is still there and placeable now. kube-scheduler
        filters each pod against its cache as that pod's cycle starts; the pass filtered every
        pod against one list of Nodes taken at its start, and a burst's placements take a
        write each (0.35 s wall for 15 pods at load 1), so a Node deleted or cordoned meanwhile
        (a cancelled boot drained as it turned Ready) got pods bound to it that no kubelet
        would ever run. The others keep their annotation: the next pass places them again."""
        if not binds:
            return []
        nodes = await self.workload.list(KINDS["Node"], label_selector=self.node_label_selector)
        placeable = {n.name for n in map(node_state, nodes) if n.blocked is None}
        return [(pod, node) for pod, node in binds if node in placeable]

    async def _finish_allocations(self, pods: Sequence[JSON], states: dict[str, NodeState]) -> None:
        """The device plugin's step for bound pods a previous pass left ``allocating``."""
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node in states and annotations_of(pod).get(BIND_PHASE) == "allocating":
                await self._device_plugin_allocate(pod)

    async def _schedule(self, pod: JSON, states: dict[str, NodeState], now: float) -> None:
        resumed = annotations_of(pod).get(VGPU_NODE)
        node = states.get(str(resumed or ""))
        if resumed and node is not None and node.blocked is None:
            self._binds.append((pod, str(resumed)))  # filtered by an earlier pass, bind it now
            return
        parsed = pod_asks(pod)
        if isinstance(parsed, AskError):
            await self._unschedulable(pod, f"twin: unreadable HAMi ask: {parsed.message}", now)
            return
        ordered = [states[n] for n in sorted(states, key=natural_key)]
        policy, gpu_policy = self.policies_for(pod)
        result = place(parsed.asks, parsed.constraints, ordered, policy, gpu_policy)
        if isinstance(result, Placement):
            await self._assign(pod, result, states[result.node], parsed, now)
        else:
            fits = fits_some_empty_node(parsed.asks, ordered)
            await self._unschedulable(pod, unschedulable_message(result, fits), now)

    async def _assign(
        self, pod: JSON, placement: Placement, node: NodeState, parsed: PodAsks, now: float
    ) -> None:
        """/filter's and /bind's annotations (one write); the Binding, then Allocate, once the
        pass has placed every pod (``step``)."""
        plan = plan_for(placement, node, parsed.asks)
        meta = metadata_of(pod)
        stamp = str(int(now))
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "labels": {VGPU_NODE: node.name},
                "annotations": {
                    VGPU_NODE: node.name,
                    VGPU_TIME: stamp,
                    TO_ALLOCATE: plan,
                    ALLOCATED: plan,
                    BIND_PHASE: "allocating",
                    BIND_TIME: stamp,
                    BOUND_AT_ANNOTATION: f"{self.clock.now():.3f}",  # the twin's, sub-second
                },
            }
        }
        try:
            booked = await self.workload.patch(KINDS["Pod"], meta["namespace"], meta["name"], patch)
        except (Conflict, NotFound):
            return  # changed or gone since the list: next pass
        book(node, pod, plan)
        # counted by the passes before the next refresh (by its annotation: bound or not yet)
        self._placed.append(booked)
        self._binds.append((pod, node.name))

    async def _bind(self, pod: JSON, node: str) -> None:
        meta = metadata_of(pod)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.workload.create(binding)
        except (Conflict, NotFound) as exc:  # a later pass binds it again (its annotation)
            log.debug("binding %s/%s to %s failed: %s", meta["namespace"], meta["name"], node, exc)
            return
        await self._device_plugin_allocate(pod)

    async def _device_plugin_allocate(self, pod: JSON) -> None:
        meta = metadata_of(pod)
        spec = pod.get("spec") or {}
        containers = len(spec.get("initContainers") or []) + len(spec.get("containers") or [])
        patch = {
            "metadata": {
                "annotations": {BIND_PHASE: "success", TO_ALLOCATE: emptied_plan(containers)}
            }
        }
        try:
            await self.workload.patch(KINDS["Pod"], meta["namespace"], meta["name"], patch)
        except NotFound:
            return

    async def _unschedulable(self, pod: JSON, message: str, now: float) -> None:
        """The pass's verdict on a pod that fits nowhere, written once the pass has placed
        every pod it could (``step``)."""
        self._verdicts.append((pod, message, now))


def _age_key(pod: Mapping[str, Any]) -> tuple[str, tuple[object, ...]]:
    meta = metadata_of(pod)
    return str(meta.get("creationTimestamp", "")), natural_key(str(meta.get("name", "")))
