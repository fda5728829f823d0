"""The system clock: the one production implementation of ``gpucellpool.api.clock.Clock``.

Why this module exists: only one object in the operator reads the wall clock and sleeps for
real; everything else is handed a ``Clock`` so tests and the simulator substitute a virtual one.
"""

from __future__ import annotations

import asyncio
import time


class SystemClock:
    """Wall-clock seconds (Kubernetes timestamps, Lease renewals and Prometheus samples are
    wall-clock too) and a real ``asyncio`` sleep."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
