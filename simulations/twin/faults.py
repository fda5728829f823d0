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
class CrashPlan:
    """Crash at mutating call number ``crash_at`` (0-based); ``after``: once it was applied."""

    crash_at: int | None = None
    after: bool = False
    calls: int = 0
    log: list[str] = field(default_factory=list)

    @property
    def crashed(self) -> bool:
        return self.crash_at is not None and self.calls > self.crash_at

    def before(self, what: str) -> None:
        if self.crash_at == self.calls and not self.after:
            self.calls += 1
            raise InjectedCrash(f"before {what}")

    def done(self, what: str) -> None:
        self.log.append(what)
        hit = self.crash_at == self.calls and self.after
        self.calls += 1
        if hit:
            raise InjectedCrash(f"after {what}")


@dataclass
class FaultyKubeApi(DelegatingKubeApi):
    """Counts every write against ``plan`` and crashes where it says (reads pass through)."""

    plan: CrashPlan

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        what = write.describe()
        self.plan.before(what)
        result = await call()
        self.plan.done(what)
        return result
