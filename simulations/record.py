"""``gpucellpool trace record``: turn a Prometheus range of HAMi allocation metrics into a trace.

Why this module exists: the best trace to size a pool is the cluster's own history. HAMi's
scheduler exports one series per container-device allocation (hami-facts §4.1):
``hami_vgpu_memory_allocated_bytes`` and ``hami_vgpu_core_allocated_ratio`` (labels
``namespace, node, pod, container_index, device_uuid``; HAMi >= 2.9), or the legacy
``vGPUMemoryAllocated`` / ``vGPUCoreAllocated`` (labels ``podnamespace, podname,
containeridx, deviceuuid``; HAMi <= 2.8, or ``--legacy-metrics``). A pod *arrives* at the first
sample its series appear in and *ends* one step after the last; a gap longer than two steps
starts a new instance (``key#2``). Its ask is: GPUs = distinct devices, per-GPU memory and cores
= the largest per-device allocation seen. Output is the generic CSV format
(docs/simulation.md). Only ``fetch`` talks to Prometheus; the conversion is pure and tested.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autoscaler.policy.types import GPUAsk
from simulations import argtypes as at
from simulations.traces.generic import write_generic
from simulations.traces.model import TracePod, sort_pods

MIB = 1024 * 1024
METRICS = {
    "current": ("hami_vgpu_memory_allocated_bytes", "hami_vgpu_core_allocated_ratio"),
    "legacy": ("vGPUMemoryAllocated", "vGPUCoreAllocated"),
}
LABELS = {
    "current": ("namespace", "pod", "container_index", "device_uuid"),
    "legacy": ("podnamespace", "podname", "containeridx", "deviceuuid"),
}

Series = Mapping[str, Any]  # {"metric": {labels}, "values": [[ts, "value"], ...]}
PodKey = tuple[str, str]


@dataclass(slots=True)
class _Seen:
    times: set[float]
    memory: dict[str, float]  # device -> bytes (max over time of the per-device sum)
    cores: dict[str, float]


def query(metric: str, legacy: bool) -> str:
    """PromQL deduplicating scheduler replicas: one series per container-device."""
    labels = ", ".join(LABELS["legacy" if legacy else "current"])
    return f"max by ({labels}) ({metric})"


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


def to_trace(
    memory: Sequence[Series], cores: Sequence[Series], start: float, step: float
) -> tuple[TracePod, ...]:
    """Pods (generic-format values) from range-query results; times relative to ``start``."""
    pods: list[TracePod] = []
    for (namespace, name), entry in sorted(_collect(memory, cores).items()):
        devices = set(entry.memory) | set(entry.cores)
        if not devices or not entry.times:
            continue
        ask = GPUAsk(
            gpu_count=len(devices),
            memory_mib=math.ceil(max(entry.memory.values(), default=0.0) / MIB) or None,
            cores_percent=min(100, round(max(entry.cores.values(), default=0.0))),
        )
        for i, (first, end) in enumerate(_runs(entry.times, step), start=1):
            key = f"{namespace}/{name}" + (f"#{i}" if i > 1 else "")
            pods.append(TracePod(key, max(0.0, first - start), end - first, ask))
    return sort_pods(pods)


def fetch(url: str, start: datetime, end: datetime, step: str, legacy: bool) -> tuple[Any, Any]:
    """The two range queries, through prometheus-api-client."""
    from prometheus_api_client import PrometheusConnect  # noqa: PLC0415 (optional at import)

    client = PrometheusConnect(url=url, disable_ssl=False)
    memory_metric, cores_metric = METRICS["legacy" if legacy else "current"]
    return tuple(
        client.custom_query_range(query(m, legacy), start_time=start, end_time=end, step=step)
        for m in (memory_metric, cores_metric)
    )


def parse_time(text: str) -> datetime:
    """Unix seconds or ISO 8601 (UTC when no zone is given)."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither unix seconds nor ISO 8601"
            ) from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a representable time") from None


def step_seconds(step: str) -> float:
    """A query step in seconds: a Go duration ("15s", "1m30s"; the API's one parser) or plain
    seconds, > 0."""
    return at.duration_seconds(step)


def _step(text: str) -> str:
    """``--step`` as given, once it reads as a positive duration of at most a day."""
    if step_seconds(text) > 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than a day")
    return text


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or len(text) < 10:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s):// URL")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="trace_command", required=True)
    record = sub.add_parser("record", help="record HAMi allocations from Prometheus")
    record.add_argument("--prometheus", required=True, type=_url, help="Prometheus base URL")
    record.add_argument("--start", required=True, type=parse_time, help="unix or ISO 8601")
    record.add_argument("--end", required=True, type=parse_time, help="unix or ISO 8601")
    record.add_argument(
        "--step", default="30s", type=_step, help="query resolution, e.g. 15s, 1m (default: 30s)"
    )
    record.add_argument("--legacy", action="store_true", help="HAMi <= 2.8 metric names")
    record.add_argument("-o", "--output", required=True, type=at.output_file)


def run(args: argparse.Namespace) -> int:
    if args.end <= args.start:
        print("trace record: --end must be after --start", file=sys.stderr)
        return 2
    try:
        memory, cores = fetch(args.prometheus, args.start, args.end, args.step, args.legacy)
    except Exception as error:  # any client failure is reported, not raised
        print(f"trace record: query failed: {error}", file=sys.stderr)
        return 1
    pods = to_trace(memory, cores, args.start.timestamp(), step_seconds(args.step))
    count = write_generic(pods, args.output)
    print(f"wrote {count} pods to {args.output}", file=sys.stderr)
    return 0 if count else 2
