"""Simulated kubelet for trace pods: start them once bound, end them after their duration.

Why this module exists: a replayed trace only exercises scale-down if pods finish. The trace
player stamps each pod with ``twin.gpucellpool.io/duration-seconds`` (already scaled to real
seconds); this controller plays the kubelet for those pods and only those:

* a bound pod still Pending is started (``Running``, ``Ready=True``, ``startTime``), unless
  ``start_pods`` is off because the node agent's ``run_pods`` already does it;
* once a pod has been Running for its duration it is marked ``Succeeded`` through the status
  subresource (HAMi drops terminal pods from its allocation, so the simulated HAMi frees its
  GPUs on its next pass) and, with ``delete_finished``, deleted right after (a terminal pod is
  removed at once, no grace period). ``on_finished`` is told of each pod it ended, once its
  phase is written: the twin wires it to the simulated HAMi's ``release``, which plays HAMi's
  pod informer seeing the pod end.

A pod's duration counts from the instant the simulated HAMi bound it (``BOUND_AT_ANNOTATION``,
written with the bind's own annotations): from then on its GPU is allocated, as the simulator
counts a pod's run from its placement. Counted instead from when this controller first saw
it Running, each pod ran one node-agent poll and one poll of this controller longer than the
trace said (0.5-1.7 s wall median at load 10-24, 10-35 trace seconds at x20), which the
fidelity check saw as the twin's scale-downs lagging the simulator's. Pods without the stamp
(bound by another scheduler) are timed from their first sight Running, to the clock's
precision; pods already Running when this controller started (a restart) from their
``status.startTime`` (whole seconds). Pods due in one pass are finished concurrently, so one
pod's writes do not hold up another's end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from gpucellpool.api.clock import Clock
from provisioner.kube import JSON, KINDS, KubeApi, NotFound
from simulations.twin.common import PollingController, each_bounded, raise_first, rfc3339

DURATION_ANNOTATION = "twin.gpucellpool.io/duration-seconds"
BOUND_AT_ANNOTATION = "twin.gpucellpool.io/bound-at"
"""Clock seconds (sub-second) at which the simulated HAMi bound the pod (HAMi's own
``hami.io/bind-time`` has whole seconds)."""
_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def duration_of(pod: Mapping[str, Any]) -> float | None:
    """The pod's run time in real seconds, or None when it is not a trace pod."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DURATION_ANNOTATION)
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def bound_at(pod: Mapping[str, Any]) -> float | None:
    """When the simulated HAMi bound the pod (``BOUND_AT_ANNOTATION``), or None."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(BOUND_AT_ANNOTATION)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def parse_rfc3339(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class PodLifecycle(PollingController):
    workload: KubeApi
    clock: Clock
    namespace: str | None = None
    poll_s: float = 0.1
    start_pods: bool = True
    delete_finished: bool = True
    concurrency: int = 16
    on_finished: Callable[[JSON], None] | None = None  # told of each pod this controller ended
    _started: dict[str, float] = field(default_factory=dict)
    _since: float | None = None  # the first pass: pods Running before it were started earlier

    async def step(self) -> None:
        now = self.clock.now()
        if self._since is None:
            self._since = now
        pods = await self.workload.list(KINDS["Pod"], self.namespace, field_selector=_SELECTOR)
        live: set[str] = set()
        passes = []
        for pod in pods:
            duration = duration_of(pod)
            meta = pod["metadata"]
            if duration is None or meta.get("deletionTimestamp") is not None:
                continue
            live.add(str(meta["uid"]))
            passes.append(partial(self._tend, pod, duration, now))
        errors = await each_bounded(passes, self.concurrency)
        for uid in set(self._started) - live:
            del self._started[uid]
        raise_first(errors)

    async def _tend(self, pod: JSON, duration: float, now: float) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        uid = str(meta["uid"])
        if status.get("phase") in (None, "Pending"):
            if self.start_pods:
                await self._start(pod, now)
            return
        started = self._started.get(uid)
        if started is None:
            # Bound by the simulated HAMi: from its bind. Else seen Running for the first
            # time: started just now (the node agent's run_pods), or, for a pod already
            # Running when this controller started, at its startTime.
            stamped = parse_rfc3339(status.get("startTime"))
            since = self._since if self._since is not None else now
            started = stamped if stamped is not None and stamped < since - 1 else now
            started = bound_at(pod) or started
            self._started[uid] = started
        if now - started >= duration:
            await self._finish(pod, now)

    async def _start(self, pod: JSON, now: float) -> None:
        meta = pod["metadata"]
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(now)}
        status = {"phase": "Running", "conditions": _with(pod, ready), "startTime": rfc3339(now)}
        try:
            await self.workload.patch(
                KINDS["Pod"], meta["namespace"], meta["name"], {"status": status}, status=True
            )
        except NotFound:
            return
        self._started[str(meta["uid"])] = now

    async def _finish(self, pod: JSON, now: float) -> None:
        meta = pod["metadata"]
        done = {
            "type": "Ready",
            "status": "False",
            "reason": "PodCompleted",
            "lastTransitionTime": rfc3339(now),
        }
        status = {"phase": "Succeeded", "conditions": _with(pod, done)}
        try:
            await self.workload.patch(
                KINDS["Pod"], meta["namespace"], meta["name"], {"status": status}, status=True
            )
            if self.on_finished is not None:
                self.on_finished(pod)
            if self.delete_finished:
                await self.workload.delete(KINDS["Pod"], meta["namespace"], meta["name"], 0)
        except NotFound:
            pass
        self._started.pop(str(meta["uid"]), None)


def _with(pod: Mapping[str, Any], condition: JSON) -> list[JSON]:
    """The pod's conditions with ``condition`` in place of its type (a merge patch replaces
    the whole list: the Binding's PodScheduled=True must be written back, not dropped)."""
    kept = [
        c
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("type") != condition["type"]
    ]
    return [*kept, condition]
