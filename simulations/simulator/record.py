"""``gpucellpool trace record``: query Prometheus over a range and write the demand as a trace.

Why this module exists: it is the shell of the recorder: the command line, and ``fetch``, the
three range queries (HAMi's allocation series, and the operator's pending-pod series) cut into
windows a Prometheus accepts. What the results mean and how they become pods is the pure
``simulations.simulator.record_convert`` (its docstring, and docs/simulation.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from simulations.simulator import argtypes as at
from simulations.simulator.record_convert import (
    LABELS,
    PENDING_LABELS,
    PENDING_METRIC,
    Recording,
    Series,
    recording,
    to_trace,
)
from simulations.simulator.traces.generic import write_generic

__all__ = ["Recording", "fetch", "recording", "run", "to_trace"]

METRICS = {
    "current": ("hami_vgpu_memory_allocated_bytes", "hami_vgpu_core_allocated_ratio"),
    "legacy": ("vGPUMemoryAllocated", "vGPUCoreAllocated"),
}
MAX_POINTS = 10_000  # per series and query; Prometheus refuses more than 11,000


def query(metric: str, legacy: bool) -> str:
    """PromQL deduplicating scheduler replicas: one series per container-device."""
    labels = ", ".join(LABELS["legacy" if legacy else "current"])
    return f"max by ({labels}) ({metric})"


def pending_query() -> str:
    """PromQL for the pending series, one per pod and ask (the earliest first-seen when two
    pools, or two replicas' overlapping scrapes, export the same pod)."""
    return f"min by ({', '.join(PENDING_LABELS)}) ({PENDING_METRIC})"


def windows(start: float, end: float, step: float) -> list[tuple[float, float]]:
    """``[start, end]`` cut into range queries of at most ``MAX_POINTS`` steps each (Prometheus
    refuses more than 11,000 points per series), each starting one step after the last."""
    out, span = [], step * (MAX_POINTS - 1)
    while start <= end:
        out.append((start, min(end, start + span)))
        start += span + step
    return out


def merge(chunks: Iterable[Sequence[Series]]) -> list[dict[str, Any]]:
    """Series of consecutive windows joined by their label set, samples in order."""
    joined: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for chunk in chunks:
        for series in chunk:
            labels = dict(series.get("metric", {}))
            key = tuple(sorted(labels.items()))
            entry = joined.setdefault(key, {"metric": labels, "values": []})
            entry["values"].extend(series.get("values", ()))
    return list(joined.values())


def fetch(
    url: str, start: datetime, end: datetime, step: str, legacy: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The three range queries (memory, cores, pending), through prometheus-api-client, in
    windows Prometheus accepts."""
    from prometheus_api_client import PrometheusConnect  # noqa: PLC0415 (optional at import)

    client = PrometheusConnect(url=url, disable_ssl=False)
    memory_metric, cores_metric = METRICS["legacy" if legacy else "current"]
    parts = windows(start.timestamp(), end.timestamp(), step_seconds(step))

    def ranged(promql: str) -> list[dict[str, Any]]:
        return merge(
            client.custom_query_range(
                promql,
                start_time=datetime.fromtimestamp(a, tz=UTC),
                end_time=datetime.fromtimestamp(b, tz=UTC),
                step=step,
            )
            for a, b in parts
        )

    memory, cores = (ranged(query(m, legacy)) for m in (memory_metric, cores_metric))
    return memory, cores, ranged(pending_query())


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
    demand = "HAMi allocations and the operator's pending pods"
    record = sub.add_parser("record", help=f"record GPU demand ({demand}) from Prometheus")
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
        memory, cores, pending = fetch(
            args.prometheus, args.start, args.end, args.step, args.legacy
        )
    except Exception as error:  # any client failure is reported, not raised
        print(f"trace record: query failed: {error}", file=sys.stderr)
        return 1
    start, end = args.start.timestamp(), args.end.timestamp()
    result = recording(memory, cores, pending, start=start, end=end, step=step_seconds(args.step))
    for line in summary(result):
        print(f"trace record: {line}", file=sys.stderr)
    count = write_generic(result.pods, args.output)
    print(f"wrote {count} pods to {args.output}", file=sys.stderr)
    return 0 if count else 2


def summary(result: Recording) -> list[str]:
    """What the pending series gave (or a warning that the range had none); skipped series."""
    lines = [f"skipped {reason}" for reason in result.skipped]
    if result.pending_series == 0:
        lines.append(
            f"warning: no {PENDING_METRIC} series in the range (operator without it, or not "
            "scraped): arrivals are allocation starts and pods that never got a GPU are "
            "missing, so the trace under-states the demand"
        )
    else:
        lines.append(
            f"{result.waited} pods waited (arrival = first seen pending), {result.never_ran} "
            "never ran in the range (kept, duration estimated: docs/simulation.md)"
        )
    return lines
