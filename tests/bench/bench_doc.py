"""Write one benchmark's block of docs/benchmarks.md, leaving every other block alone (no tests).

The live-operator benchmarks use the same mechanism as the simulator's (``test_sim_bench``):
each owns a block between ``<!-- KEY:start -->`` and ``<!-- KEY:end -->`` markers, appended at
the end of the file the first time, replaced in place afterwards. The file is read just before
it is written, so concurrent edits to other sections survive.
"""

from __future__ import annotations

import os
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH_DOC = ROOT / "docs" / "benchmarks.md"


def write_block(key: str, body: str) -> None:
    """Replace (or append) the ``key`` block of docs/benchmarks.md with ``body``."""
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    text = BENCH_DOC.read_text() if BENCH_DOC.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: block, text, count=1)
    else:
        text = f"{text.rstrip()}\n\n{block}\n"
    BENCH_DOC.write_text(text)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> str:
    """``p50 / p95 / max`` in seconds."""
    return f"{percentile(values, 0.5):.3f} / {percentile(values, 0.95):.3f} / {max(values):.3f}"


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def load_note() -> str:
    """The 1/5/15-minute load averages, to print next to every timing."""
    one, five, fifteen = os.getloadavg()
    cores = os.cpu_count() or 0
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {cores} cores"
