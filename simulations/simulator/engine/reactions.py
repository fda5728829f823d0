"""When a reacting policy decides between its ticks, as the live loop's wake-ups do.

Why this module exists: our live loop decides when woken (a pod left pending, a pod that
ended, a cell that finished booting, an eviction) and when its last decision's promise runs out
(``Decision.steady.until``: a window or delay ending, a pending pod becoming stuck or due a
hedged spare), not only at its ticks. The simulator models that with REACT events; the delays
are the live loop's reactions, which the fidelity report measures on the twin apart (after a
pending pod, after a boot, the run's first decision). The rule lives here, apart from the
event loop: each method returns when a REACT is due, or None when one already comes sooner.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.policy.decision import Steady


@dataclass(slots=True)
class Reactions:
    """The next REACT of one run and the delays that set it."""

    on: bool  # the policy reacts (ours); off, it decides at its ticks only
    after_pod_seconds: float
    after_boot_seconds: float | None = None  # None: as after a pod
    first_seconds: float | None = None  # the run's first reaction; None: as after a pod
    due_at: float | None = None  # the REACT pushed and not run yet
    reacted: bool = False  # a REACT has run
    next_tick: float = 0.0

    def after_pod(self, now: float) -> float | None:
        """A pod left pending (or evicted, or ended, or a gang waiting) at ``now``."""
        first = self.first_seconds
        delay = self.after_pod_seconds if first is None or self.reacted else first
        return self._at(now + delay)

    def after_boot(self, now: float) -> float | None:
        """A cell finished booting (Ready or failed) at ``now``: the live loop wakes on the
        Node's change, not at its next requeue."""
        after = self.after_boot_seconds
        return self._at(now + (self.after_pod_seconds if after is None else after))

    def after_decision(self, now: float, steady: Steady | None) -> float | None:
        """The decision at ``now`` promised to hold until ``steady.until``: the live loop
        sleeps until then, so a promise ending before the next tick is a decision then."""
        if steady is None or not now < steady.until < self.next_tick:
            return None
        return self._at(steady.until)

    def ran(self) -> None:
        self.due_at, self.reacted = None, True

    def _at(self, at: float) -> float | None:
        if not self.on or (self.due_at is not None and self.due_at <= at):
            return None
        self.due_at = at
        return at
