"""The one clock the provisioner shell reads.

Why this module exists: the pure core takes ``now_s`` as an argument; the shell gets it from an
injected ``Clock`` so tests can substitute a virtual one and nothing else calls ``time``.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (the scale of Kubernetes timestamps)."""
        ...


class SystemClock:
    """Wall-clock time: Kubernetes timestamps (creation, lease renewal) are wall-clock too."""

    def now(self) -> float:
        return time.time()
