"""A fault-injecting ``KubeApi`` wrapper: crash the caller at its N-th mutating call.

Why this module exists: crash safety is a property of the reconciler's ORDER of writes, so it is
tested by killing a pass at every write in turn - before the write reaches the server, or after
it did but before the caller saw the answer - and restarting from scratch. Reads pass through;
every mutating verb counts. One ``CrashPlan`` can be shared by the infrastructure and the
workload clients so the count runs across both clusters in call order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from provisioner.kube import JSON, Kind, KubeApi


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
class FaultyKubeApi:
    inner: KubeApi
    plan: CrashPlan

    async def _mutate(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        self.plan.before(what)
        result = await call()
        self.plan.done(what)
        return result

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        return await self.inner.get(kind, namespace, name)

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        return await self.inner.list(kind, namespace, label_selector, field_selector)

    async def apply(self, obj: Mapping[str, Any], status: bool = False) -> JSON:
        what = f"apply {obj['kind']}/{obj['metadata']['name']}"
        result: JSON = await self._mutate(what, lambda: self.inner.apply(obj, status))
        return result

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        what = f"patch {kind.kind}/{name}{'/status' if status else ''}"
        result: JSON = await self._mutate(
            what, lambda: self.inner.patch(kind, namespace, name, patch, status)
        )
        return result

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        what = f"create {obj['kind']}/{obj['metadata']['name']}"
        result: JSON = await self._mutate(what, lambda: self.inner.create(obj))
        return result

    async def delete(
        self, kind: Kind, namespace: str | None, name: str, grace_period_s: int | None = None
    ) -> bool:
        result: bool = await self._mutate(
            f"delete {kind.kind}/{name}",
            lambda: self.inner.delete(kind, namespace, name, grace_period_s),
        )
        return result

    async def evict(self, namespace: str, name: str) -> None:
        await self._mutate(f"evict {namespace}/{name}", lambda: self.inner.evict(namespace, name))

    async def version(self) -> JSON:
        return await self.inner.version()

    async def close(self) -> None:
        await self.inner.close()
