"""The one keyed runner: per key one task that runs ``step(key)`` when woken, requeued or retried.

Why this module exists: the autoscaling loop (per pool: decide) and the provisioner's driver (per
pool: reconcile) need the same scheduler - wake-ups from watch events, a debounce that turns a
burst into one step, a requeue the step asks for, a backoff after failures, a gate (leadership
or shard ownership) - and two hand-written copies had drifted apart (one debounced trailing
without backoff, the other leading with backoff). Both now run on this one, each with its own
``RunnerSettings``; time comes only from the injected ``Clock``.

Semantics, per key (``add`` starts its task, ``remove`` cancels it, ``close`` stops all):

- **One task, steps never overlap.** ``step(key, woken)`` runs in the key's task only; a
  ``wake`` during a step is remembered and starts the next cycle right after it (the event may
  have come after the step read its inputs). ``woken`` tells the step whether a wake-up (not the
  timer) started it.
- **Wake and debounce (trailing, with a cap).** After a wake-up the runner waits until wake-ups
  have been quiet for ``debounce_min_s``, but never longer than ``debounce_max_s`` after the
  first one, then steps once for all of them: a burst of pod creations is one decision, and a
  steady stream of events cannot starve a pool (Cluster Autoscaler's and Karpenter's batching
  idea: an idle window bounded by a maximum). ``debounce_min_s == debounce_max_s`` is a fixed
  delay after the first wake-up (the provisioner's 0.2 s).
- **Leading edge for a quiet key** (``leading(key)`` true, default never): a wake-up that finds
  the key quiet - no step and no wake-up for ``debounce_min_s`` - steps at once instead of
  waiting out the quiet time: a lone event (one pod turning Unschedulable) is served without
  the debounce's delay. What comes during or right after that step is the start of a burst,
  debounced trailing as above, so a burst costs one step more than without the leading edge
  (its head, then the rest), and a steady stream is still capped by ``debounce_max_s``.
- **Requeue-after.** A step returns the seconds until its key should step again unless woken
  (``math.inf``: only a wake-up), or ``None``: the key is done (its object is gone) and is
  forgotten, so a later ``add`` starts it again.
- **Backoff.** A step that raises is logged (``failure_message``, the key as ``pool``) and
  counted, and the key retries after ``backoff_base_s``, doubling with each consecutive failure
  up to ``backoff_max_s``; a success resets it. A wake-up still runs the key at once (after the
  debounce), as controller-runtime's queue lets a new event past a rate-limited requeue: the
  event may be the fix. One key's failure never touches another key's task.
- **Gate.** Before each step ``gate(key)`` (leadership, shard ownership) is asked; when it says
  no, the key does not step and waits for a wake-up or ``gate_recheck_s`` (whoever opens the gate
  wakes the keys: ``wake_all``).

Each key's task is created inside ``add``, so it inherits the caller's context variables (the
sharded operator marks a pool's code with one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gpucellpool.api.clock import Clock

K = TypeVar("K", bound=Hashable)
Step = Callable[[K, bool], Awaitable[float | None]]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    debounce_min_s: float = 0.15
    """Quiet time that ends a burst of wake-ups (one step for the whole burst)."""
    debounce_max_s: float = 1.0
    """Longest wait after the first wake-up of a burst, so a steady stream cannot starve a key."""
    backoff_base_s: float = 1.0
    """Retry delay after a failed step; doubled for each further consecutive failure."""
    backoff_max_s: float = 60.0
    """Upper bound of the retry delay."""
    gate_recheck_s: float = 30.0
    """How often a key whose gate is closed looks again without being woken."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.debounce_min_s <= self.debounce_max_s:
            raise ValueError("debounce_min_s must be >= 0 and <= debounce_max_s")
        if not 0.0 < self.backoff_base_s <= self.backoff_max_s:
            raise ValueError("backoff_base_s must be > 0 and <= backoff_max_s")
        if self.gate_recheck_s <= 0.0:
            raise ValueError("gate_recheck_s must be > 0")


@dataclass(slots=True)
class KeyState:
    """What the runner knows of one key (read by tests and metrics, written by the runner)."""

    woken: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    steps: int = 0
    """Steps that returned (successful)."""
    errors: int = 0
    """Steps that raised."""
    failures: int = 0
    """Consecutive failures (0 after a success): the backoff exponent."""
    running: bool = False
    """A step is in progress."""
    first_woken_s: float = 0.0
    """When the first wake-up not yet served came (the debounce's cap counts from it)."""
    last_woken_s: float = 0.0
    """When the latest wake-up came (the debounce's quiet time counts from it)."""
    served_woken_s: float = 0.0
    """The first wake-up of the burst the latest woken step serves (how long it waited)."""
    active_s: float = -math.inf
    """When the key was last busy: its last step ended or its last served wake-up came (the
    leading edge's quiet time counts from it)."""


def backoff_s(settings: RunnerSettings, failures: int) -> float:
    """The retry delay after ``failures`` consecutive failed steps (>= 1)."""
    return min(settings.backoff_max_s, settings.backoff_base_s * 2.0 ** (failures - 1))


class KeyedRunner(Generic[K]):
    """One task per key running ``step``; see the module docstring for the semantics."""

    def __init__(
        self,
        step: Step[K],
        clock: Clock,
        settings: RunnerSettings | None = None,
        gate: Callable[[K], bool] = lambda _key: True,
        *,
        leading: Callable[[K], bool] = lambda _key: False,
        name: str = "runner",
        label: Callable[[K], str] = str,
        failure_message: str = "step failed",
    ) -> None:
        self.step = step
        self.clock = clock
        self.settings = settings or RunnerSettings()
        self.gate = gate
        self.leading = leading
        self.name = name
        self.label = label
        self.failure_message = failure_message
        self.keys: dict[K, KeyState] = {}

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def __iter__(self) -> Iterator[K]:
        return iter(list(self.keys))

    def add(self, key: K, *, wake: bool = True, delay_s: float = math.inf) -> KeyState:
        """Start ``key``'s task (no-op when running): it steps once woken, or after ``delay_s``."""
        state = self.keys.get(key)
        if state is None:
            state = self.keys[key] = KeyState()
            name = f"{self.name}:{self.label(key)}"
            state.task = asyncio.create_task(self._run(key, state, delay_s), name=name)
        if wake:
            self._wake(state)
        return state

    def wake(self, key: K) -> None:
        """Step ``key`` soon (after the debounce); unknown keys are ignored."""
        state = self.keys.get(key)
        if state is not None:
            self._wake(state)

    def wake_all(self) -> None:
        for state in self.keys.values():
            self._wake(state)

    def _wake(self, state: KeyState) -> None:
        now = self.clock.now()
        if not state.woken.is_set():
            state.first_woken_s = now
        state.last_woken_s = now
        state.woken.set()

    def pending(self, key: K) -> bool:
        """Whether a wake-up of ``key`` waits to be served."""
        state = self.keys.get(key)
        return state is not None and state.woken.is_set()

    def remove(self, key: K) -> None:
        """Stop ``key``'s task (a step in progress is cancelled)."""
        state = self.keys.pop(key, None)
        if state is not None and state.task is not None:
            state.task.cancel()

    async def close(self) -> None:
        tasks = [s.task for s in self.keys.values() if s.task is not None]
        self.keys.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, key: K, state: KeyState, delay_s: float) -> None:
        while self.keys.get(key) is state:
            woken = await self._wait(key, state, delay_s)
            if not self.gate(key):
                delay_s = self.settings.gate_recheck_s
                continue
            state.running = True
            try:
                after = await self._step(key, state, woken)
            finally:
                state.running = False
                state.active_s = self.clock.now()
            if after is None:  # done: forget the key, a later ``add`` starts it again
                if self.keys.get(key) is state:
                    del self.keys[key]
                return
            delay_s = after

    async def _step(self, key: K, state: KeyState, woken: bool) -> float | None:
        try:
            after = await self.step(key, woken)
        except asyncio.CancelledError:
            raise
        except Exception:  # one key's failure never stops the others (or itself)
            state.errors += 1
            state.failures += 1
            log.exception(self.failure_message, extra={"pool": self.label(key)})
            return backoff_s(self.settings, state.failures)
        state.steps += 1
        state.failures = 0
        return after

    async def _wait(self, key: K, state: KeyState, delay_s: float) -> bool:
        """Until woken or ``delay_s`` passed, then the debounce (none on a leading edge);
        whether a wake-up ended it."""
        if not state.woken.is_set() and delay_s > 0.0:
            waiter: asyncio.Future[object] = asyncio.ensure_future(state.woken.wait())
            timers = {waiter}
            if delay_s < math.inf:
                timers.add(asyncio.ensure_future(self.clock.sleep(delay_s)))
            try:
                await asyncio.wait(timers, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for timer in timers:
                    timer.cancel()
        if not state.woken.is_set():
            return False
        quiet_s = state.first_woken_s - state.active_s
        if not (quiet_s >= self.settings.debounce_min_s and self.leading(key)):
            await self._debounce(state)
        state.active_s = max(state.active_s, state.last_woken_s)
        state.served_woken_s = state.first_woken_s
        state.woken.clear()
        return True

    async def _debounce(self, state: KeyState) -> None:
        """Trailing: until wake-ups were quiet for debounce_min_s, capped at debounce_max_s."""
        cap_s = state.first_woken_s + self.settings.debounce_max_s
        while True:
            pause_s = min(state.last_woken_s + self.settings.debounce_min_s, cap_s)
            pause_s -= self.clock.now()
            if pause_s <= 0.0:
                return
            await self.clock.sleep(pause_s)
