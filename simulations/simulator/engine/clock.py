"""The one virtual clock: time that moves only when told to, for the simulator and the tests.

Why this module exists: the simulator replays months in seconds and the loop's tests check
timing rules (debounce, requeue, backoff) to the millisecond; both need a ``Clock``
(``gpucellpool.api.clock``) whose time is a plain number moved on purpose, never the wall clock.
One implementation serves both, so a rule checked in a test runs on the same clock the
simulator's numbers were produced with.

Two ways to move it: ``move_to`` (synchronous; the discrete-event simulator sets the time of the
event it handles) and ``advance`` (async; releases every ``sleep`` whose deadline it passes, in
deadline order, letting the woken tasks run before going on). With ``jump_on_sleep`` a ``sleep``
moves the time itself and returns (for code that only sleeps between rounds, such as leader
election, where no other task needs to run meanwhile).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

START_S = 1_000_000.0
"""The default start: far from 0, so ``now - something`` never reads as negative time."""


class VirtualClock:
    """``sleep`` parks until ``advance`` passes its deadline (unless ``jump_on_sleep``)."""

    def __init__(self, start: float = START_S, *, jump_on_sleep: bool = False) -> None:
        self.t = start
        self.jump_on_sleep = jump_on_sleep
        self._seq = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        if self.jump_on_sleep:
            self.t += max(0.0, seconds)
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.t + seconds, next(self._seq), fut))
        await fut

    def move_to(self, t: float) -> None:
        """Set the time to ``t`` (never backwards); the next ``advance`` releases due sleepers."""
        if t < self.t:
            raise ValueError(f"time cannot go back: {t} < {self.t}")
        self.t = t

    @property
    def next_deadline(self) -> float | None:
        """When the earliest pending ``sleep`` ends (None: nobody sleeps)."""
        while self._sleepers and self._sleepers[0][2].done():  # cancelled sleeps
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    async def advance(self, seconds: float) -> None:
        """Move ``seconds`` ahead, waking each sleeper at its own deadline in order."""
        target = self.t + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self.t = max(self.t, deadline)
            if not fut.done():
                fut.set_result(None)
            await settle()
        self.t = max(self.t, target)
        await settle()


async def settle(rounds: int = 30) -> None:
    """Let every ready task run: yields to the event loop, never waits on the wall clock."""
    for _ in range(rounds):
        await asyncio.sleep(0)
