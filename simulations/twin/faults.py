"""A fault-injecting ``KubeApi`` wrapper: crash the caller at its N-th mutating call.

Why this module exists: crash safety is a property of the reconciler's ORDER of writes, so it is
tested by killing a pass at every write in turn - before the write reaches the server, or after
it did but before the caller saw the answer - and restarting from scratch. Reads pass through;
every mutating verb counts. One ``CrashPlan`` can be shared by the infrastructure and the
workload clients so the count runs across both clusters in call order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from provisioner.kube_delegate import DelegatingKubeApi, Write

T = TypeVar("T")


class InjectedCrash(RuntimeError):
    """The simulated process death (never caught by the code under test)."""


@dataclass
class Ticket:
    """The number of a write under way (it moves up if an earlier one is refused)."""

    number: int


@dataclass
class CrashPlan:
    """Crash at mutating call number ``crash_at`` (0-based); ``after``: once it was applied.

    A call's number is taken when it starts, so writes that overlap (a pass creates a wave's
    cells concurrently) are numbered in the order they were issued, each exactly once. A write
    the server refuses (a 409 retried, a 404) gives its number back, and the writes issued
    after it move up one: the count is of writes that landed, whatever the timing (a crash
    before a later write that had already started is then missed, and the test that counts
    its crash points says so). Once the crash happened the process is dead: a write that starts
    later is refused (also raises ``InjectedCrash``, without a number), while one already under
    way may still land, as a request in flight when a process dies may or may not reach the
    server."""

    crash_at: int | None = None
    after: bool = False
    calls: int = 0
    log: list[str] = field(default_factory=list)
    dead: bool = False
    under_way: list[Ticket] = field(default_factory=list)

    @property
    def crashed(self) -> bool:
        return self.crash_at is not None and self.calls > self.crash_at

    def refuse_if_dead(self, what: str) -> None:
        if self.dead:
            raise InjectedCrash(f"{what} after the crash")

    def before(self, what: str) -> Ticket | None:
        """Number this call (None: a write a subclass does not count); crash now if it is
        the one and ``after`` is False."""
        self.refuse_if_dead(what)
        ticket = Ticket(self.calls)
        self.calls += 1
        if self.crash_at == ticket.number and not self.after:
            self.dead = True
            raise InjectedCrash(f"before {what}")
        self.under_way.append(ticket)
        return ticket

    def done(self, what: str, ticket: Ticket | None) -> None:
        if ticket is None:
            return
        self.under_way.remove(ticket)
        self.log.append(what)
        if self.crash_at == ticket.number and self.after:
            self.dead = True
            raise InjectedCrash(f"after {what}")

    def refused(self, ticket: Ticket | None) -> None:
        """The write failed: it takes no number."""
        if ticket is None:
            return
        self.under_way.remove(ticket)
        self.calls -= 1
        for later in self.under_way:
            if later.number > ticket.number:
                later.number -= 1


@dataclass
class FaultyKubeApi(DelegatingKubeApi):
    """Counts every write against ``plan`` and crashes where it says (reads pass through)."""

    plan: CrashPlan

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        what = write.describe()
        ticket = self.plan.before(what)
        try:
            result = await call()
        except BaseException:
            self.plan.refused(ticket)
            raise
        self.plan.done(what, ticket)
        return result
