"""Bad traces and flags for ``simulate``, ``sweep``, ``demo`` and ``trace record``, run as a
newcomer runs them: the installed console script, a subprocess.

Every row must exit non-zero within ``TIMEOUT_S``, print at most ``MAX_LINES`` lines (stdout
and stderr together), never a traceback, and name its problem (``expect``): for a trace file,
the file and line. ``{tmp}`` in an argument is the row's own temporary directory; ``files`` are
written there first (``str`` as UTF-8, ``bytes`` as they are). None of these rows needs an
apiserver: a bad demo flag is refused before anything starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

EXE = Path(sys.executable).with_name("gpucellpool")
TIMEOUT_S = 10.0
MAX_LINES = 3
GENERIC = "arrival_seconds,duration_seconds,gpu_count\n"
OPENB = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


@dataclass(frozen=True)
class Bad:
    args: tuple[str, ...]
    expect: str
    files: Mapping[str, str | bytes] = field(default_factory=dict)

    @property
    def id(self) -> str:
        args = " ".join(a for a in self.args if a != "--no-progress")
        return f"{args[:50]} -> {self.expect[:40]}"


def sim(*args: str, expect: str, **files: str | bytes) -> Bad:
    return Bad(("simulate", "--no-progress", *args), expect, files)


ROWS = [
    # trace files: one line naming file (and line) and reason
    sim("--trace", "{tmp}/missing.csv", expect="missing.csv: no such file"),
    sim("--trace", "{tmp}", expect="not a regular file"),
    sim("--trace", "{tmp}/t.csv", expect="t.csv:2: binary data", **{"t.csv": b"a,b\n\x00\x01\n"}),
    sim("--trace", "{tmp}/t.csv", expect="t.csv:3: not UTF-8",
        **{"t.csv": GENERIC.encode() + b"0,10,1\n\xff\xfe,1,1\n"}),
    sim("--trace", "{tmp}/t.csv.gz", expect="t.csv.gz: cannot read", **{"t.csv.gz": b"plain"}),
    sim("--trace", "{tmp}/t.csv", expect="t.csv:3: CSV: field larger than field limit",
        **{"t.csv": GENERIC + "0,10,1\n0,10," + "7" * 131_073 + "\n"}),
    sim("--trace", "{tmp}/t.csv", expect="t.csv:2: deletion_time='inf' is not a finite",
        **{"t.csv": OPENB + "p1,1,1,1,1000,,,,0,inf,\n"}),
    sim("--trace", "{tmp}/t.csv", expect="t.csv:2: ends at 1e+300 s, beyond the",
        **{"t.csv": GENERIC + "1e300,10,1\n"}),
    sim("--trace", "{tmp}/t.csv", expect="t.csv:2: ends at 1e+300 s, beyond the",
        **{"t.csv": GENERIC + "0,1e300,1\n"}),
    sim("--trace", "{tmp}/t.csv", expect="t.csv:2: duration_seconds='-5' must be",
        **{"t.csv": GENERIC + "0,-5,1\n"}),
    sim("--trace", "{tmp}/t.jsonl", expect="t.jsonl:1: invalid JSON",
        **{"t.jsonl": "{not json\n"}),
    sim("--trace", "{tmp}/t.csv", expect="t.csv:2: arrival_seconds and duration_seconds are",
        **{"t.csv": "when,how_long\n0,10\n"}),
    # simulate flags
    sim("--days", "nan", expect="--days: 'nan' is not a finite number"),
    sim("--days", "0", expect="--days: '0' must be > 0"),
    sim("--time-compression", "inf", expect="--time-compression"),
    sim("--duration-scale", "-1", expect="--duration-scale"),
    sim("--arrival-multiplier", "1e9", expect="--arrival-multiplier"),
    sim("--jobs", "0", expect="--jobs: '0' must be between 1 and 64"),
    sim("--cell-gpus", "1.5", expect="--cell-gpus: '1.5' is not an integer"),
    sim("--boot-failure", "1", expect="--boot-failure"),
    sim("--min-cells", "5", "--max-cells", "2", expect="--min-cells 5 is above --max-cells 2"),
    sim("--json", "{tmp}/no/such/dir/out.json", expect="does not exist"),
    # sweep
    Bad(("sweep", "--threshold", "0.5,nan"), "--threshold: 'nan' is not a finite number"),
    Bad(("sweep", "--prewarm", "maybe"), "--prewarm: 'maybe' is not on/off"),
    Bad(("sweep", "--in-flight", "0"), "--in-flight: '0' must be between 1"),
    Bad(("sweep", "--trace", "{tmp}/t.csv"), "t.csv:2: ends at",
        {"t.csv": GENERIC + "0,1e300,1\n"}),
    # demo: refused before any apiserver starts
    Bad(("demo", "--minutes", "0"), "--minutes: '0' must be in (0, 1440]"),
    Bad(("demo", "--minutes", "nan"), "--minutes: 'nan' is not a finite number"),
    Bad(("demo", "--speed", "-3"), "--speed"),
    Bad(("demo", "--trace", "{tmp}/missing.csv"), "missing.csv: no such file"),
    Bad(("demo", "--hours", "inf"), "--hours"),
    Bad(("demo", "--trace", "{tmp}/t.csv"), "t.csv:3: not UTF-8",
        {"t.csv": GENERIC.encode() + b"0,10,1\n\xff,1,1\n"}),
    Bad(("demo", "--trace", "{tmp}/t.csv"), "t.csv:2: ends at 1e+300 s",
        {"t.csv": GENERIC + "1e300,10,1\n"}),
    # trace record
    Bad(("trace", "record", "--prometheus", "http://127.0.0.1:1", "--start", "0", "--end", "60",
         "--step", "1m30x", "-o", "{tmp}/o.csv"), "--step: '1m30x'"),
    Bad(("trace", "record", "--prometheus", "http://127.0.0.1:1", "--start", "inf", "--end", "60",
         "-o", "{tmp}/o.csv"), "--start: 'inf' is not a representable time"),
    Bad(("trace", "record", "--prometheus", "localhost", "--start", "0", "--end", "60",
         "-o", "{tmp}/o.csv"), "--prometheus: 'localhost' is not an http(s):// URL"),
    Bad(("trace", "record", "--prometheus", "http://127.0.0.1:1", "--start", "60", "--end", "0",
         "-o", "{tmp}/o.csv"), "--end must be after --start"),
]  # fmt: skip


@pytest.mark.parametrize("bad", ROWS, ids=[row.id for row in ROWS])
def test_bad_trace_and_flag_inputs_get_one_short_error(bad: Bad, tmp_path: Path) -> None:
    assert EXE.exists(), f"{EXE}: the console script is not installed (make venv)"
    for name, content in bad.files.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    args = [a.replace("{tmp}", str(tmp_path)) for a in bad.args]
    env = {**os.environ, "HOME": str(tmp_path), "COLUMNS": "100"}
    started = time.monotonic()
    proc = subprocess.run(
        [str(EXE), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    elapsed = time.monotonic() - started
    output = (proc.stdout + proc.stderr).strip()
    lines = output.splitlines()
    assert proc.returncode != 0, output
    assert "Traceback" not in output, output
    assert len(lines) <= MAX_LINES, output
    assert bad.expect in output, output
    assert elapsed < TIMEOUT_S
