"""Load any supported trace file, choosing its format from its header, and enforce the
malformed-row policy.

Why this module exists: ``simulate``, ``sweep`` and ``demo`` all accept ``--trace`` and must
read it the same way and refuse it the same way. The policy for malformed rows (documented in
docs/simulation.md): by default the FIRST malformed row fails the command with one line naming
file, line and reason (and how many more there are); with ``--skip-malformed`` such rows are
skipped and counted in the one-line trace summary. Never silently either way.
"""

from __future__ import annotations

from pathlib import Path

from simulations.simulator.traces.bundled import BUNDLED_OPENB_PATH, read_trace_text
from simulations.simulator.traces.generic import load_generic
from simulations.simulator.traces.model import LoadResult, TraceError
from simulations.simulator.traces.openb import load_openb

FORMATS = ("auto", "openb", "generic")


def detect_format(path: Path) -> str:
    """``openb`` when the header names ``gpu_milli``, else ``generic``."""
    with read_trace_text(path) as stream:
        header = stream.readline()
    return "openb" if "gpu_milli" in header else "generic"


def load_trace(path: Path | None, trace_format: str = "auto") -> LoadResult:
    """The trace at ``path`` (default: the bundled openb); ``TraceError`` if unreadable."""
    path = path or BUNDLED_OPENB_PATH
    if trace_format == "auto":
        trace_format = detect_format(path)
    return load_openb(path) if trace_format == "openb" else load_generic(path)


def require_well_formed(loaded: LoadResult, path: Path | None) -> None:
    """``TraceError`` naming the first malformed row, if any (the default policy)."""
    if not loaded.malformed:
        return
    first, more = loaded.malformed[0], len(loaded.malformed) - 1
    extra = f" (and {more} more malformed rows)" if more else ""
    hint = "; --skip-malformed skips and counts them"
    raise TraceError(path or BUNDLED_OPENB_PATH, first.reason + extra + hint, first.line)
