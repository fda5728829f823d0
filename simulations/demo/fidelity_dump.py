"""The fidelity dump: what re-simulating one twin run needs, in one versioned JSON file.

Why this module exists: when the twin and the simulator part (``tests/e2e/test_fidelity.py``,
the fidelity benchmark, ``gpucellpool demo``), finding why takes both sides' decisions next to
each other, and a twin run takes minutes while a re-simulation takes a second. With
``GPUCELLPOOL_FIDELITY_DUMP=<dir>`` set, ``run_twin`` writes here what ``build_report``
simulates from (the run's trace pods, spec, measured timings, the twin's cell timeline and the
replay's end) plus what the twin did (each pod's created/bound/ended/node, each change of the
pool's ``status.lastDecision`` and ``status.policyMemory``), all in the recorder's compressed
seconds since the replay started. ``gpucellpool fidelity-diff DUMP``
(``simulations.demo.divergence``) reads it. It holds no credentials: trace pods, times, cell
and pod names, and the pool's published status fields.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gpucellpool.runtime.errors import UserError
from simulations.demo.config import DemoSpec, WorldTimings
from simulations.demo.run_log import CellEvent, DecisionSeen
from simulations.demo.twin_measures import cell_timeline
from simulations.demo.twin_records import PodTimes
from simulations.simulator.traces import TracePod

if TYPE_CHECKING:
    from simulations.demo.twin_run import TwinResult

DUMP_ENV = "GPUCELLPOOL_FIDELITY_DUMP"
DUMP_VERSION: Literal[1] = 1


@dataclass(frozen=True, slots=True)
class PodSeen:
    """One twin pod as the recorder saw it (compressed seconds since the replay started)."""

    created_seconds: float
    bound_seconds: float | None
    ended_seconds: float | None
    node: str


class FidelityDump(BaseModel):
    """One twin run, enough to re-simulate it exactly as ``build_report`` does."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = DUMP_VERSION
    spec: DemoSpec
    namespace: str
    end_seconds: float  # the replay's end (the report's horizon is at most this)
    # the wall clock (epoch seconds) at the recorder's zero: the operator's policy memory
    # holds wall-clock times, this maps them to the run's seconds
    epoch_at_zero_seconds: float
    pods: tuple[TracePod, ...]  # the replayed trace, compressed, in the player's order
    timings: WorldTimings  # measured_timings(run): the report's "twin's timings"
    timings_lag_free: WorldTimings  # measured_timings(run, lag=False)
    twin_cells: tuple[tuple[float, float], ...]  # twin_measures.cell_timeline(rec)
    pod_times: dict[str, PodSeen]  # pod name -> what the twin did with it
    decisions: tuple[DecisionSeen, ...]  # each change of lastDecision or policyMemory
    cell_events: tuple[CellEvent, ...] = ()  # each cell's steps (absent in older dumps)


def _seen(times: PodTimes) -> PodSeen:
    return PodSeen(times.created, times.bound, times.ended, times.node)


def dump_of(run: TwinResult) -> FidelityDump:
    """The dump of a finished run."""
    from simulations.demo.report import measured_timings  # noqa: PLC0415 - report imports twin_run, which imports this

    rec = run.recorder
    return FidelityDump(
        spec=run.spec,
        namespace=run.namespace,
        end_seconds=run.end_seconds,
        epoch_at_zero_seconds=time.time() - rec.now(),
        pods=run.pods,
        timings=measured_timings(run),
        timings_lag_free=measured_timings(run, lag=False),
        twin_cells=tuple(cell_timeline(rec)),
        pod_times={name: _seen(times) for name, times in rec.pods.items()},
        decisions=tuple(rec.decisions),
        cell_events=tuple(rec.cell_events),
    )


def write_dump(dump: FidelityDump, directory: Path) -> Path:
    """``dump`` as ``fidelity-<UTC time>-<namespace>.json`` in ``directory`` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"fidelity-{stamp}-{dump.namespace}.json"
    path.write_text(dump.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return path


def dump_if_asked(run: TwinResult) -> Path | None:
    """With ``GPUCELLPOOL_FIDELITY_DUMP`` set: the run's dump written there (its path told on
    stderr); else nothing."""
    directory = os.environ.get(DUMP_ENV, "")
    if not directory:
        return None
    path = write_dump(dump_of(run), Path(directory))
    print(f"fidelity dump: {path}", file=sys.stderr)
    return path


def load_dump(path: Path) -> FidelityDump:
    """A dump written by ``write_dump``; ``UserError`` (one line) if it is not one this code
    reads."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: not a fidelity dump (not JSON: {error})") from error
    version = data.get("version") if isinstance(data, dict) else None
    if version != DUMP_VERSION:
        raise UserError(
            f"{path}: fidelity dump version {version!r}, this code reads {DUMP_VERSION}"
        )
    try:
        return FidelityDump.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(f"{path}: not a fidelity dump ({where}: {first['msg']})") from error
