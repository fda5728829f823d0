"""A ``KubeApi`` that forwards every verb to another one, with one hook around the writes.

Why this module exists: the operator itself wraps its ``KubeApi`` - ``provisioner.cached_reads``
answers reads from the watch caches and must see every write to keep read-your-writes - and so
do the twin and the tests, to watch or disturb what the operator writes (crash at the N-th
write, record every write's outcome, slip a competing write in first). Each wrapper used to
forward all nine Protocol methods by hand; now they subclass ``DelegatingKubeApi`` and override
``_write`` (and, for ``CachedReads``, the reads) only. Reads (``get``, ``list``, ``version``)
and ``close`` pass straight through. Production code (not test support): it sits next to
``kube`` because ``cached_reads`` builds on it, and ``simulations`` and ``tests`` import it
from there without production ever importing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from provisioner.kube import JSON, Kind, KubeApi

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Write:
    """One mutating call: ``verb`` (apply, patch, create, delete, evict), the object's kind,
    namespace and name, and whether it targets the status subresource."""

    verb: str
    kind: str
    namespace: str | None
    name: str
    status: bool = False

    def describe(self) -> str:
        """``patch GPUCellPool/p/status``, ``evict ns/pod``, ``create Event/e``."""
        if self.verb == "evict":
            return f"evict {self.namespace}/{self.name}"
        return f"{self.verb} {self.kind}/{self.name}{'/status' if self.status else ''}"


def _of_object(verb: str, obj: Mapping[str, Any], status: bool = False) -> Write:
    meta = obj["metadata"]
    return Write(verb, str(obj["kind"]), meta.get("namespace"), meta["name"], status)


@dataclass
class DelegatingKubeApi:
    """Every ``KubeApi`` verb forwarded to ``inner``; every write goes through ``_write``."""

    inner: KubeApi

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call`` (the forwarded write). Override to act before, after or instead."""
        return await call()

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

    async def apply(
        self, obj: Mapping[str, Any], status: bool = False, field_manager: str | None = None
    ) -> JSON:
        write = _of_object("apply", obj, status)
        return await self._write(write, lambda: self.inner.apply(obj, status, field_manager))

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        write = Write("patch", kind.kind, namespace, name, status)
        return await self._write(
            write, lambda: self.inner.patch(kind, namespace, name, patch, status)
        )

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        return await self._write(_of_object("create", obj), lambda: self.inner.create(obj))

    async def delete(
        self, kind: Kind, namespace: str | None, name: str, grace_period_s: int | None = None
    ) -> bool:
        write = Write("delete", kind.kind, namespace, name)
        return await self._write(
            write, lambda: self.inner.delete(kind, namespace, name, grace_period_s)
        )

    async def evict(self, namespace: str, name: str) -> None:
        write = Write("evict", "Pod", namespace, name)
        await self._write(write, lambda: self.inner.evict(namespace, name))

    async def version(self) -> JSON:
        return await self.inner.version()

    async def close(self) -> None:
        await self.inner.close()


__all__ = ["DelegatingKubeApi", "Write"]
