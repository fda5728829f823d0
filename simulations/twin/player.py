"""Replay a trace on the live workload cluster: one HAMi pod per trace pod, at its arrival time.

Why this module exists: the offline simulator and the live twin must be fed the same demand
for their results to be comparable, and a demo needs real pods to appear at trace pace. The
player turns each ``TracePod`` into a pod HAMi reads exactly as the trace's ask
(``schedulerName: hami-scheduler``, so the webhook leaves it alone; ``nvidia.com/gpu``,
``gpumem`` or ``gpumem-percentage``, ``gpucores`` limits, hami-facts §1.1; the trace's
nodeSelector), stamped with its duration in real seconds for ``twin.pod_lifecycle``.

Time: trace time runs ``speed`` times faster than the clock; the first pod arrives when
``run()`` starts (or at ``origin``) and pod *i* ``(arrival_i - arrival_0) / speed`` seconds
later. The player sleeps until the next arrival, never polls.

Restart safety: pods are named ``<name_prefix>-<index>`` in arrival order, and a ConfigMap
``<name_prefix>-player`` records the origin and how many pods were created. A restarted
player resumes on the same timeline and skips what was created (a pod that already exists
is taken as created), even when earlier pods have finished and been deleted since. The
record is written after each batch of creations: a player killed between a batch and its
record re-creates that batch's pods if they also finished and were deleted before the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.policy.types import GPUAsk
from gpucellpool.api.clock import Clock
from provisioner.kube import JSON, Conflict, KubeApi, kind_of
from simulations.simulator.traces.model import TracePod, sort_pods
from simulations.twin.hami_codec import BUSY_SECONDS_ANNOTATION, SCHEDULER_NAME
from simulations.twin.pod_lifecycle import DURATION_ANNOTATION

CONFIG_MAP = kind_of("ConfigMap", "v1")
PLAYER_LABEL = "twin.gpucellpool.io/player"
TRACE_KEY_ANNOTATION = "twin.gpucellpool.io/trace-key"
ARRIVAL_ANNOTATION = "twin.gpucellpool.io/arrival-seconds"
IMAGE = "registry.k8s.io/pause:3.10"


def hami_limits(ask: GPUAsk) -> dict[str, str]:
    """The container limits HAMi's scheduler reads back as exactly ``ask`` (no webhook)."""
    limits = {"nvidia.com/gpu": str(ask.gpu_count)}
    if ask.memory_mib is not None:
        limits["nvidia.com/gpumem"] = str(ask.memory_mib)
    elif ask.memory_percent is not None:
        limits["nvidia.com/gpumem-percentage"] = str(ask.memory_percent)
    if ask.cores_percent:
        limits["nvidia.com/gpucores"] = str(ask.cores_percent)
    return limits


def _busy(pod: TracePod, speed: float) -> dict[str, str]:
    """The trace's ``usage`` as the twin's busy-seconds annotation (none when busy to the end)."""
    if pod.usage >= 1:
        return {}
    return {BUSY_SECONDS_ANNOTATION: f"{pod.usage * pod.duration_seconds / speed:.3f}"}


def pod_name(prefix: str, index: int, total: int) -> str:
    return f"{prefix}-{index:0{max(5, len(str(total)))}d}"


def trace_pod_manifest(
    pod: TracePod,
    name: str,
    namespace: str,
    speed: float = 1.0,
    labels: Mapping[str, str] | None = None,
    player: str = "trace",
) -> JSON:
    """The HAMi pod for one trace pod; its duration annotation is in real seconds."""
    container = {"name": "main", "image": IMAGE, "resources": {"limits": hami_limits(pod.ask)}}
    spec: JSON = {
        "schedulerName": SCHEDULER_NAME,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**dict(pod.labels), **dict(labels or {}), PLAYER_LABEL: player},
            "annotations": {
                DURATION_ANNOTATION: f"{pod.duration_seconds / speed:.3f}",
                TRACE_KEY_ANNOTATION: pod.key,
                ARRIVAL_ANNOTATION: f"{pod.arrival_seconds:g}",
                **_busy(pod, speed),
            },
        },
        "spec": spec,
    }


@dataclass(frozen=True, slots=True)
class PlayerProgress:
    """How far the replay is: pods created of the total, and the trace time reached."""

    created: int
    total: int
    trace_seconds: float
    trace_end_seconds: float

    @property
    def done(self) -> bool:
        return self.created >= self.total

    def line(self) -> str:
        """One terminal progress line."""
        share = 100.0 * self.created / self.total if self.total else 100.0
        return (
            f"trace {_hms(self.trace_seconds)} / {_hms(self.trace_end_seconds)}: "
            f"{self.created}/{self.total} pods created ({share:.0f}%)"
        )


def _hms(seconds: float) -> str:
    whole = int(max(seconds, 0))
    return f"{whole // 3600:d}:{whole // 60 % 60:02d}:{whole % 60:02d}"


@dataclass
class TracePlayer:
    workload: KubeApi
    pods: Sequence[TracePod]
    clock: Clock
    namespace: str
    speed: float = 1.0
    labels: Mapping[str, str] = field(default_factory=dict)
    name_prefix: str = "trace"
    origin: float | None = None  # clock time of the first arrival; None: recorded, else now
    _origin: float | None = None
    _created: int = 0

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError(f"speed must be positive, got {self.speed}")
        self.pods = sort_pods(list(self.pods))

    @property
    def _first(self) -> float:
        return self.pods[0].arrival_seconds if self.pods else 0.0

    def due_at(self, index: int, origin: float) -> float:
        """Clock time at which pod ``index`` (arrival order) is created."""
        return origin + (self.pods[index].arrival_seconds - self._first) / self.speed

    def progress(self) -> PlayerProgress:
        end = self.pods[-1].arrival_seconds if self.pods else 0.0
        reached = self._first
        if self._origin is not None:
            reached = self._first + max(0.0, self.clock.now() - self._origin) * self.speed
        return PlayerProgress(self._created, len(self.pods), reached, end)

    async def run(self) -> None:
        """Create every pod at its time; returns once the last one exists."""
        origin, self._created = await self._resume()
        self._origin = origin
        while self._created < len(self.pods):
            wait = self.due_at(self._created, origin) - self.clock.now()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            now = self.clock.now()
            while self._created < len(self.pods) and self.due_at(self._created, origin) <= now:
                await self._create(self._created)
                self._created += 1
            await self._record(origin)

    async def _create(self, index: int) -> None:
        name = pod_name(self.name_prefix, index, len(self.pods))
        manifest = trace_pod_manifest(
            self.pods[index], name, self.namespace, self.speed, self.labels, self.name_prefix
        )
        with contextlib.suppress(Conflict):  # created before a restart
            await self.workload.create(manifest)

    def _record_manifest(self, origin: float, created: int) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{self.name_prefix}-player",
                "namespace": self.namespace,
                "labels": {PLAYER_LABEL: self.name_prefix},
            },
            "data": {"origin": repr(origin), "created": str(created), "speed": repr(self.speed)},
        }

    async def _resume(self) -> tuple[float, int]:
        """The recorded origin and progress, or a fresh record."""
        name = f"{self.name_prefix}-player"
        record = await self.workload.get(CONFIG_MAP, self.namespace, name)
        if record is None:
            origin = self.origin if self.origin is not None else self.clock.now()
            try:
                await self.workload.create(self._record_manifest(origin, 0))
                return origin, 0
            except Conflict:
                record = await self.workload.get(CONFIG_MAP, self.namespace, name)
        data = (record or {}).get("data") or {}
        return float(data["origin"]), min(int(data["created"]), len(self.pods))

    async def _record(self, origin: float) -> None:
        await self.workload.apply(self._record_manifest(origin, self._created))
