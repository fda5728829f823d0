"""Loader for the Alibaba GPU cluster trace 2023 "openb" pod list (Weng et al., ATC '23).

Why this module exists: it is the public trace we bundle, and its GPU columns need an explicit
mapping to HAMi asks. Columns: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
pod_phase,creation_time,deletion_time,scheduled_time`` (times in seconds from trace start).

Mapping (documented in docs/simulation.md):

- ``num_gpu == 0``: CPU-only pod, skipped (it never asks HAMi for anything).
- ``num_gpu == 1``: ``gpu_milli`` is the share of one GPU x 1000. The HAMi ask is one GPU with
  ``gpumem-percentage = ceil(gpu_milli / 10)`` and ``gpucores = ceil(gpu_milli / 10)``; so
  ``gpu_milli = 1000`` is a whole, exclusive GPU (100 % memory, 100 cores).
- ``num_gpu > 1``: whole GPUs (``gpu_milli`` is 1000 in the trace): ``num_gpu`` GPUs at 100 %
  memory and 100 cores each.
- arrival = ``creation_time``; duration = ``deletion_time`` minus ``scheduled_time`` when the
  pod was scheduled, else minus ``creation_time`` (the time it wanted the GPU); at least 1 s.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from autoscaler.policy.types import GPUAsk
from simulations.simulator.traces.bundled import BUNDLED_OPENB_PATH, read_trace_text
from simulations.simulator.traces.model import (
    LoadResult,
    Malformed,
    TracePod,
    check_times,
    sort_pods,
)

REQUIRED = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time")
CPU_ONLY = "CPU-only pod"


def openb_ask(num_gpu: int, gpu_milli: int) -> GPUAsk:
    """The HAMi ask of an openb pod (see the module docstring)."""
    if num_gpu == 1:
        percent = max(1, min(100, math.ceil(gpu_milli / 10)))
        return GPUAsk(gpu_count=1, memory_percent=percent, cores_percent=percent)
    return GPUAsk(gpu_count=num_gpu, memory_percent=100, cores_percent=100)


def _int(row: dict[str, str], column: str) -> int:
    text = (row.get(column) or "").strip()
    if not text:
        raise ValueError(f"{column} is empty")
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{column}={text!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{column}={text!r} is not a finite number")
    return int(number)


def _row_pod(row: dict[str, str]) -> TracePod | None:
    """One row as a pod; None for a CPU-only pod; ValueError when malformed."""
    num_gpu = _int(row, "num_gpu")
    gpu_milli = _int(row, "gpu_milli")
    if num_gpu < 0 or gpu_milli < 0:
        raise ValueError("negative GPU request")
    if num_gpu == 0:
        return None
    if num_gpu == 1 and gpu_milli == 0:
        raise ValueError("num_gpu=1 with gpu_milli=0")
    created = _int(row, "creation_time")
    deleted = _int(row, "deletion_time")
    scheduled_text = (row.get("scheduled_time") or "").strip()
    started = _int(row, "scheduled_time") if scheduled_text else created
    if created < 0 or deleted < created:
        raise ValueError(f"deletion_time {deleted} before creation_time {created}")
    name = (row.get("name") or "").strip()
    if not name:
        raise ValueError("name is empty")
    check_times(float(created), float(deleted - created))
    return TracePod(
        key=f"openb/{name}",
        arrival_seconds=float(created),
        duration_seconds=float(max(1, deleted - max(started, created))),
        ask=openb_ask(num_gpu, gpu_milli),
    )


def parse_openb(text: Iterable[str]) -> LoadResult:
    """Parse an openb pod-list CSV stream; never raises on bad rows."""
    reader = csv.DictReader(text)
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        return LoadResult(pods=(), malformed=(Malformed(1, f"header lacks {missing}"),))
    pods: list[TracePod] = []
    malformed: list[Malformed] = []
    skipped: Counter[str] = Counter()
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as error:  # e.g. a field over the csv module's 131,072 characters
            malformed.append(Malformed(reader.line_num + 1, f"CSV: {error}"))
            continue
        try:
            pod = _row_pod(row)
        except ValueError as error:
            malformed.append(Malformed(reader.line_num, str(error)))
            continue
        if pod is None:
            skipped[CPU_ONLY] += 1
        else:
            pods.append(pod)
    return LoadResult(sort_pods(pods), tuple(malformed), tuple(sorted(skipped.items())))


def load_openb(path: Path | str) -> LoadResult:
    """Load an openb pod-list CSV (plain or ``.gz``)."""
    with read_trace_text(Path(path)) as stream:
        return parse_openb(stream)


def load_bundled() -> LoadResult:
    """The bundled openb trace (simulations/simulator/data/), as a ``LoadResult``."""
    return load_openb(BUNDLED_OPENB_PATH)
