"""Where the bundled public trace lives, and opening plain or gzipped text files.

Why this module exists: ``gpucellpool simulate`` must work with no arguments, so the openb pod
list (Alibaba clusterdata, cluster-trace-gpu-v2023, ATC '23 "Beware of Fragmentation") ships
gzipped inside the package; see simulations/simulator/data/*.source.txt for provenance and licence.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import TextIO

from simulations.simulator.traces.model import TraceError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
BUNDLED_OPENB_PATH = DATA_DIR / "alibaba-gpu-v2023_openb_pod_list_default.csv.gz"


def open_text(path: Path) -> TextIO:
    """Open ``path`` for reading text, transparently un-gzipping ``*.gz``."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def _raw_bytes(path: Path) -> bytes:
    if not path.exists():
        raise TraceError(path, "no such file")
    if path.is_dir():
        raise TraceError(path, "is a directory, not a trace file")
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if path.suffix == ".gz" else raw
    except (OSError, EOFError, zlib.error) as error:
        raise TraceError(path, f"cannot read: {error}") from None


def read_trace_text(path: Path) -> TextIO:
    """The whole of a trace file (``*.gz`` un-gzipped) as text; ``TraceError`` when it is
    missing, a directory, unreadable, binary (a NUL byte) or not UTF-8."""
    raw = _raw_bytes(Path(path))
    nul = raw.find(b"\0")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise TraceError(path, "binary data (a NUL byte), not a text trace", line)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        byte = raw[error.start]
        raise TraceError(path, f"not UTF-8 text (byte 0x{byte:02x})", line) from None
    return io.StringIO(text, newline="")
