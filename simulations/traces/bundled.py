"""Where the bundled public trace lives, and opening plain or gzipped text files.

Why this module exists: ``gpucellpool simulate`` must work with no arguments, so the openb pod
list (Alibaba clusterdata, cluster-trace-gpu-v2023, ATC '23 "Beware of Fragmentation") ships
gzipped inside the package; see simulations/data/*.source.txt for provenance and licence.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import TextIO

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
BUNDLED_OPENB_PATH = DATA_DIR / "alibaba-gpu-v2023_openb_pod_list_default.csv.gz"


def open_text(path: Path) -> TextIO:
    """Open ``path`` for reading text, transparently un-gzipping ``*.gz``."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")
