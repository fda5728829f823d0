"""The one ``Clock`` protocol: where every part of the operator reads the time and waits.

Why this module exists: the pure cores take ``now`` as an argument and their shells read it from
an injected clock, so a test or the simulator can run time virtually and nothing but the one
system clock calls ``time``. It lives in the bottom layer (beside the API models) because every
package, pure cores included, may import it; it is a Protocol only, so importing it pulls in
neither ``time`` nor ``asyncio``. Implementations: ``gpucellpool.runtime.clock.SystemClock``
(production) and ``simulations.simulator.engine.clock.VirtualClock`` (the simulator and the tests).
"""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch: the scale of Kubernetes and Prometheus timestamps."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock (at once for 0 or less)."""
        ...
