"""The generic trace format users bring their own demand in (CSV or JSONL), and its writer.

Why this module exists: the simulator must not be tied to one public trace. Any source (a
Prometheus recording, a scheduler log, a synthetic generator) can be turned into this format.

Columns / keys (docs/simulation.md has the full table):

- ``arrival_seconds`` (required), ``duration_seconds`` (required, > 0)
- ``gpu_count`` (default 1), ``memory_mib`` (per GPU) or ``memory_percent`` (per GPU; neither
  means the whole GPU), ``cores_percent`` (default 0)
- ``key`` (default ``line-N``), ``node_selector`` and ``labels``: in CSV ``k=v;k2=v2``, in JSONL
  an object.
- ``gang`` (default none): a gang id; pods sharing one are a distributed job that starts only
  when all of them are placed (``gang_id`` checks it).
- ``usage`` (default 1): the fraction of its run (0-1) the pod computes on its GPU, from its
  start; it holds its allocation idle for the rest (what ``scaleDownOn: Usage`` reclaims).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from autoscaler.policy.types import GPUAsk
from simulations.simulator.traces.bundled import read_trace_text
from simulations.simulator.traces.model import (
    MAX_FIELD_CHARS,
    LoadResult,
    Malformed,
    TracePod,
    check_times,
    sort_pods,
)

COLUMNS = (
    "key",
    "arrival_seconds",
    "duration_seconds",
    "gpu_count",
    "memory_mib",
    "memory_percent",
    "cores_percent",
    "node_selector",
    "labels",
    "gang",
    "usage",
)
GANG_ID_MAX_CHARS = 253  # a Kubernetes object name's limit: gang ids name Jobs and workloads


def _number(record: Mapping[str, Any], name: str, default: float | None = None) -> float | None:
    value = record.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name}={value!r} must be a number >= 0")
    return number


def _pairs(value: Any, name: str) -> tuple[tuple[str, str], ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), str(v)) for k, v in value.items()))
    if not isinstance(value, str):
        raise ValueError(f"{name} must be k=v;k2=v2 or an object")
    pairs = []
    for item in filter(None, (part.strip() for part in value.split(";"))):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{name} item {item!r} is not k=v")
        pairs.append((key.strip(), val.strip()))
    return tuple(sorted(pairs))


def gang_id(value: Any) -> str:
    """A gang id from a CSV field or JSON value: "" for none; ValueError naming the column."""
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # JSONL may number its gangs
    if not isinstance(value, str):
        raise ValueError(f"gang={value!r} must be a string or an integer")
    text = value.strip()
    if len(text) > GANG_ID_MAX_CHARS or any(ch.isspace() for ch in text):
        raise ValueError(f"gang={value[:40]!r} must be at most 253 characters without spaces")
    return text


def _optional_int(record: Mapping[str, Any], name: str) -> int | None:
    number = _number(record, name)
    return None if number is None else int(number)


def record_pod(record: Mapping[str, Any], line: int) -> TracePod:
    """One record (a CSV row or a JSON object) as a pod; ValueError when malformed."""
    arrival = _number(record, "arrival_seconds")
    duration = _number(record, "duration_seconds")
    if arrival is None or duration is None:
        raise ValueError("arrival_seconds and duration_seconds are required")
    if duration <= 0:
        raise ValueError("duration_seconds must be > 0")
    check_times(arrival, duration)
    gpu_count = int(_number(record, "gpu_count", 1.0) or 0)
    if gpu_count < 1:
        raise ValueError("gpu_count must be >= 1")
    ask = GPUAsk(
        gpu_count=gpu_count,
        memory_mib=_optional_int(record, "memory_mib"),
        memory_percent=_optional_int(record, "memory_percent"),
        cores_percent=min(100, int(_number(record, "cores_percent", 0.0) or 0)),
    )
    key = str(record.get("key") or f"line-{line}")
    return TracePod(
        key=key,
        arrival_seconds=arrival,
        duration_seconds=duration,
        ask=ask,
        node_selector=_pairs(record.get("node_selector"), "node_selector"),
        labels=_pairs(record.get("labels"), "labels"),
        gang=gang_id(record.get("gang")),
        usage=_usage(record),
    )


def _usage(record: Mapping[str, Any]) -> float:
    usage = _number(record, "usage", 1.0)
    if usage is None or usage > 1:
        raise ValueError(f"usage={record.get('usage')!r} must be a fraction from 0 to 1")
    return usage


def _collect(records: Iterable[tuple[int, Mapping[str, Any] | str]]) -> LoadResult:
    pods: list[TracePod] = []
    malformed: list[Malformed] = []
    for line, record in records:
        if isinstance(record, str):
            malformed.append(Malformed(line, record))
            continue
        try:
            pods.append(record_pod(record, line))
        except ValueError as error:
            malformed.append(Malformed(line, str(error)))
    return LoadResult(sort_pods(pods), tuple(malformed))


def _csv_records(lines: Iterable[str]) -> Iterable[tuple[int, Mapping[str, Any] | str]]:
    reader = csv.DictReader(lines)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:  # e.g. a field over the csv module's 131,072 characters
            yield reader.line_num + 1, f"CSV: {error}"
            continue
        if None in row:
            yield reader.line_num, "more fields than the header"
        else:
            yield reader.line_num, row


def _jsonl_records(lines: Iterable[str]) -> Iterable[tuple[int, Mapping[str, Any] | str]]:
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        if len(text) > MAX_FIELD_CHARS:
            yield number, f"line longer than {MAX_FIELD_CHARS} characters"
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            yield number, f"invalid JSON: {error.msg}"
            continue
        yield number, record if isinstance(record, dict) else "not a JSON object"


def parse_generic(lines: Iterable[str], jsonl: bool) -> LoadResult:
    """Parse generic-format text (CSV with header, or JSON Lines); never raises on bad rows."""
    return _collect(_jsonl_records(lines) if jsonl else _csv_records(lines))


def load_generic(path: Path | str) -> LoadResult:
    """Load a generic trace; ``.jsonl``/``.ndjson`` (optionally ``.gz``) is JSONL, else CSV."""
    path = Path(path)
    name = path.name.removesuffix(".gz")
    with read_trace_text(path) as stream:
        return parse_generic(stream, jsonl=name.endswith((".jsonl", ".ndjson")))


def _seconds(value: float) -> str:
    """Shortest text that reads back as the same float (integral values without ``.0``)."""
    return str(int(value)) if value.is_integer() else repr(value)


def _join(pairs: tuple[tuple[str, str], ...]) -> str:
    return ";".join(f"{k}={v}" for k, v in pairs)


def write_generic(pods: Iterable[TracePod], path: Path | str) -> int:
    """Write pods in the generic CSV format; returns the number of rows written."""
    count = 0
    with Path(path).open("w", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(COLUMNS)
        for pod in pods:
            ask = pod.ask
            writer.writerow(
                [
                    pod.key,
                    _seconds(pod.arrival_seconds),
                    _seconds(pod.duration_seconds),
                    ask.gpu_count,
                    "" if ask.memory_mib is None else ask.memory_mib,
                    "" if ask.memory_percent is None else ask.memory_percent,
                    ask.cores_percent,
                    _join(pod.node_selector),
                    _join(pod.labels),
                    pod.gang,
                    _seconds(pod.usage),
                ]
            )
            count += 1
    return count
