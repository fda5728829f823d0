"""``gpucellpool trace record``'s conversion: Prometheus range results -> the demand as trace pods.

Why this module exists: the best trace to size a pool is the cluster's own history, and that
history must be the demand, not only the load a pool happened to serve. Two sources:

* HAMi's scheduler exports one series per container-device allocation (hami-facts §4.1):
  ``hami_vgpu_memory_allocated_bytes`` and ``hami_vgpu_core_allocated_ratio`` (labels
  ``namespace, node, pod, container_index, device_uuid``; HAMi >= 2.9), or the legacy
  ``vGPUMemoryAllocated`` / ``vGPUCoreAllocated`` (labels ``podnamespace, podname,
  containeridx, deviceuuid``; HAMi <= 2.8, or ``--legacy-metrics``). A pod *runs* from the
  first sample its series appear in to one step after the last; a gap longer than two steps
  starts a new instance (``key#2``). Its ask: GPUs = distinct devices, per-GPU memory and cores
  = the largest per-device allocation seen.
* The operator exports ``gpucellpool_pending_pod_first_seen_timestamp_seconds`` (one series per
  pending GPU pod a pool counts; value = unix time first seen pending; labels = the pod and its
  per-GPU ask). A run's pod *arrives* at the earliest first-seen value of the pending series
  that started before it (after the pod's previous run), so a pod that waited for a cell
  arrives when it asked, not when it got a GPU. A pod pending in the range that never ran after
  (still waiting at the end, or deleted while waiting) is kept as demand with its labelled ask
  and an estimated duration: the median run time of served pods with the same ask, else of all
  served pods, else the rest of the range from its arrival.

Without pending series in the range (an older operator, or a cluster without it) the trace is
allocation-only, as before this series existed: arrival = first allocation sample, pods that
never ran are missing; ``run`` says so on stderr. Malformed pending series are skipped and
named. This module is the pure conversion; ``simulations.simulator.record`` queries Prometheus and
writes the pods in the generic CSV format (docs/simulation.md).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.policy.types import GPUAsk
from gpucellpool.api.metric_catalogue import PENDING_LABELS
from simulations.simulator.traces.model import TracePod, sort_pods

MIB = 1024 * 1024
PENDING_METRIC = "gpucellpool_pending_pod_first_seen_timestamp_seconds"
LABELS = {
    "current": ("namespace", "pod", "container_index", "device_uuid"),
    "legacy": ("podnamespace", "podname", "containeridx", "deviceuuid"),
}
__all__ = ["LABELS", "PENDING_LABELS", "PENDING_METRIC", "Recording", "recording", "to_trace"]

Series = Mapping[str, Any]  # {"metric": {labels}, "values": [[ts, "value"], ...]}
PodKey = tuple[str, str]


@dataclass(slots=True)
class _Seen:
    times: set[float]
    memory: dict[str, float]  # device -> bytes (max over time of the per-device sum)
    cores: dict[str, float]


def _key(labels: Mapping[str, str]) -> tuple[PodKey, str, str] | None:
    for names in LABELS.values():
        namespace, pod, container, device = (labels.get(n) for n in names)
        if pod:
            return (namespace or "default", pod), container or "0", device or ""
    return None


def _samples(series: Series) -> Iterable[tuple[float, float]]:
    for pair in series.get("values", ()):
        try:
            stamp, value = float(pair[0]), float(pair[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(value) and value > 0:
            yield stamp, value


def _collect(memory: Sequence[Series], cores: Sequence[Series]) -> dict[PodKey, _Seen]:
    seen: dict[PodKey, _Seen] = {}
    for result, is_memory in ((memory, True), (cores, False)):
        per_time: dict[tuple[PodKey, str, float], float] = defaultdict(float)
        for series in result:
            key = _key(series.get("metric", {}))
            if key is None:
                continue
            pod, _container, device = key
            entry = seen.setdefault(pod, _Seen(set(), {}, {}))
            for stamp, value in _samples(series):
                entry.times.add(stamp)
                per_time[(pod, device, stamp)] += value  # containers sharing one device
        for (pod, device, _), total in per_time.items():
            target = seen[pod].memory if is_memory else seen[pod].cores
            target[device] = max(target.get(device, 0.0), total)
    return seen


def _runs(times: Iterable[float], step: float) -> list[tuple[float, float]]:
    """Contiguous presence runs: (first sample, last sample + step)."""
    runs: list[tuple[float, float]] = []
    for stamp in sorted(times):
        if runs and stamp - runs[-1][1] <= step:
            runs[-1] = (runs[-1][0], stamp + step)
        else:
            runs.append((stamp, stamp + step))
    return runs


@dataclass(frozen=True, slots=True)
class Wait:
    """One run of a pod's pending series: first seen pending (unix s), present from..until."""

    first_seen: float
    start: float
    end: float
    ask: GPUAsk


@dataclass(frozen=True, slots=True)
class Recording:
    """A converted range: the pods, and what the pending series contributed to them."""

    pods: tuple[TracePod, ...]
    pending_series: int  # well-formed pending series in the range (0: allocation-only)
    waited: int  # pods whose arrival is a first-seen-pending time before their allocation
    never_ran: int  # pods pending in the range with no allocation after (duration estimated)
    skipped: tuple[str, ...] = ()  # malformed pending series, each with the reason


def _whole(labels: Mapping[str, str], name: str, low: int, high: int | None) -> int | None:
    """An integer label in [low, high]; None when empty; ValueError naming the label."""
    text = str(labels.get(name, "")).strip()
    if not text:
        return None
    value = int(text) if text.isascii() and text.isdigit() else -1
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name}={text!r} is not a whole number {bound}")
    return value


def pending_ask(labels: Mapping[str, str]) -> tuple[PodKey, GPUAsk]:
    """The pod and its per-GPU ask from a pending series' labels (ValueError names the label)."""
    namespace, pod = str(labels.get("pod_namespace", "")), str(labels.get("pod", ""))
    if not pod or not namespace:
        raise ValueError("pod_namespace and pod labels are required")
    gpus = _whole(labels, "gpus", 1, None)
    if gpus is None:
        raise ValueError("gpus label is required")
    ask = GPUAsk(
        gpu_count=gpus,
        memory_mib=_whole(labels, "memory_mib", 1, None),
        memory_percent=_whole(labels, "memory_percent", 1, 100),
        cores_percent=_whole(labels, "cores_percent", 0, 100) or 0,
    )
    return (namespace, pod), ask


def _waits(
    pending: Sequence[Series], step: float
) -> tuple[dict[PodKey, list[Wait]], int, list[str]]:
    """Every pod's waits in time order, the well-formed series count, the skipped ones."""
    waits: dict[PodKey, list[Wait]] = defaultdict(list)
    good, skipped = 0, []
    for series in pending:
        labels = series.get("metric", {})
        try:
            pod, ask = pending_ask(labels)
        except ValueError as error:
            skipped.append(f"{PENDING_METRIC}{dict(labels)}: {error}")
            continue
        samples = dict(_samples(series))  # sample time -> first-seen unix time
        if not samples:
            continue
        good += 1
        for first, end in _runs(samples, step):
            seen = min(v for t, v in samples.items() if first <= t < end)
            waits[pod].append(Wait(seen, first, end, ask))
    for entries in waits.values():
        entries.sort(key=lambda w: w.start)
    return waits, good, skipped


def _served(
    memory: Sequence[Series], cores: Sequence[Series], step: float
) -> dict[PodKey, list[tuple[float, float, GPUAsk]]]:
    """Every pod's allocation runs (first sample, end, ask) in time order."""
    served: dict[PodKey, list[tuple[float, float, GPUAsk]]] = {}
    for pod, entry in _collect(memory, cores).items():
        devices = set(entry.memory) | set(entry.cores)
        if not devices or not entry.times:
            continue
        ask = GPUAsk(
            gpu_count=len(devices),
            memory_mib=math.ceil(max(entry.memory.values(), default=0.0) / MIB) or None,
            cores_percent=min(100, round(max(entry.cores.values(), default=0.0))),
        )
        served[pod] = [(first, end, ask) for first, end in _runs(entry.times, step)]
    return served


def _match(
    runs: list[tuple[float, float, GPUAsk]], waits: list[Wait]
) -> tuple[list[tuple[float, float, float, GPUAsk]], list[Wait]]:
    """(arrival, first, end, ask) per run, arrival from the waits that began before it (and
    after the previous run began); the waits left after the last run (it never ran again)."""
    matched, queue = [], list(waits)
    for first, end, ask in runs:
        before = [w for w in queue if w.start <= first]
        queue = [w for w in queue if w.start > first]
        arrival = min([first, *(w.first_seen for w in before)])
        matched.append((arrival, first, end, ask))
    return matched, queue


def _estimate(never: Wait, served: Sequence[TracePod], range_end: float) -> float:
    """A never-run pod's duration: median served run of its ask, of all, else rest of range."""
    same = [p.duration_seconds for p in served if p.ask == never.ask]
    every = [p.duration_seconds for p in served]
    for durations in (same, every):
        if durations:
            return float(statistics.median(durations))
    return max(range_end - never.first_seen, never.end - never.start)


def recording(
    memory: Sequence[Series],
    cores: Sequence[Series],
    pending: Sequence[Series],
    *,
    start: float,
    end: float,
    step: float,
) -> Recording:
    """Pods (generic-format values) from range-query results; times relative to ``start``."""
    served, (waits, good, skipped) = _served(memory, cores, step), _waits(pending, step)
    pods: list[TracePod] = []
    never_ran: list[tuple[str, Wait]] = []
    waited = 0
    for namespace, name in sorted(set(served) | set(waits)):
        matched, left = _match(served.get((namespace, name), []), waits.get((namespace, name), []))
        for i, (arrival, first, run_end, ask) in enumerate(matched, start=1):
            key = f"{namespace}/{name}" + (f"#{i}" if i > 1 else "")
            waited += arrival < first
            pods.append(TracePod(key, max(0.0, arrival - start), run_end - first, ask))
        if left:  # one instance: a restart's second series of the same wait is not a new pod
            i = len(matched) + 1
            key = f"{namespace}/{name}" + (f"#{i}" if i > 1 else "")
            first_wait = min(left, key=lambda w: w.first_seen)
            never_ran.append((key, first_wait))
    ran = tuple(pods)
    for key, wait in never_ran:
        duration = _estimate(wait, ran, end)
        pods.append(TracePod(key, max(0.0, wait.first_seen - start), duration, wait.ask))
    return Recording(sort_pods(pods), good, waited, len(never_ran), tuple(skipped))


def to_trace(
    memory: Sequence[Series],
    cores: Sequence[Series],
    start: float,
    step: float,
    pending: Sequence[Series] = (),
    end: float | None = None,
) -> tuple[TracePod, ...]:
    """The pods of ``recording`` (``end`` defaults to the last sample's end)."""
    if end is None:
        stamps = [t for s in (*memory, *cores, *pending) for t, _ in _samples(s)]
        end = max(stamps, default=start) + step
    return recording(memory, cores, pending, start=start, end=end, step=step).pods
