"""The provisioner's reads answered from the operator's watch caches, with read-your-writes.

Why this module exists: a pass used to GET its pool and its kubeconfig Secret from the
apiserver every time, though the composition root already mirrors both (the pool watch that
wakes the driver, the Secret watch of each workload cluster). ``CachedReads`` is a ``KubeApi``
whose ``get`` asks a ``StoreLookup`` for the cache that holds the object and answers from it;
a ``list`` is answered from the cache that mirrors the collection when its selectors are ones
this module can evaluate (``selector_match``: equality labels, ``spec.nodeName``,
``metadata.name``); every other verb, and every object no cache holds, goes to the apiserver.

A cache lags the provisioner's own writes by a watch event, and a pass that read its pool from
before its own finalizer patch or status write would act on a state it has already replaced
(and lose the next write to a 409, or worse). The rule, using only resourceVersion equality
(resourceVersions are opaque and must not be ordered): the resourceVersion of the newest copy
the provisioner itself saw of an object (its own write's answer, or a GET's) is remembered;
while one is remembered the cache is used only once it holds that very version (then the
memory is dropped: the watch delivers later versions in order), otherwise the read is a GET,
whose answer becomes the remembered version. A delete, an accepted eviction (the pod is on its
way out) or a write that lost a 409 remembers "unknown", which only an absent cached object
matches: the next read is a GET until the cache has dropped the object too. A list is served
only while every remembered object of that cache is caught up (it is then forgotten);
otherwise it is a GET, whose answer updates the remembered versions of what it returned.
"""

from __future__ import annotations

import asyncio
import copy
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from provisioner.kube import JSON, Conflict, Kind
from provisioner.kube_delegate import DelegatingKubeApi, Write

T = TypeVar("T")
UNKNOWN = ""  # a remembered version no cached object has: read with a GET


class Store(Protocol):
    """A mirror of one kind (``gpucellpool.kube.cache.WatchCache``): objects by
    ``namespace/name`` (cluster-scoped: ``name``), ``synced`` once first listed."""

    synced: asyncio.Event

    def get(self, key: str) -> JSON | None: ...

    def items(self) -> list[JSON]: ...


StoreLookup = Callable[[str, str | None, str], Store | None]
"""(kind, namespace, name) -> the cache that mirrors that object, or None (read it with a GET);
name "" asks for the cache of the collection (a list)."""
Match = Callable[[Mapping[str, object]], bool]
FIELDS = {"spec.nodeName": ("spec", "nodeName"), "metadata.name": ("metadata", "name")}

WorkloadReads = Callable[[str, str], StoreLookup]
"""(namespace, kubeconfig Secret name) -> the caches of the workload cluster that Secret reaches."""


def _key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _split(key: str) -> tuple[str | None, str]:
    """``_key``'s inverse: (namespace or None, name)."""
    namespace, _, name = key.rpartition("/")
    return namespace or None, name


def _version(obj: JSON | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or UNKNOWN)


def _label_term(term: str) -> Match | None:
    """One equality-based label requirement (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``)."""
    if any(c in term for c in "() "):
        return None  # set-based (in, notin): not evaluated here
    key, op, value = term.partition("!=") if "!=" in term else term.partition("=")
    value = value.removeprefix("=")
    if not op:
        absent = term.startswith("!")
        key = term.removeprefix("!")
        return lambda obj: (key in _labels(obj)) != absent
    if op == "!=":
        return lambda obj: _labels(obj).get(key) != value
    return lambda obj: _labels(obj).get(key) == value


def _labels(obj: Mapping[str, object]) -> Mapping[str, object]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _field_term(term: str) -> Match | None:
    """One field requirement ``path=value`` or ``path!=value`` on a path in ``FIELDS``."""
    negate = "!=" in term
    path, _, value = term.partition("!=" if negate else "=")
    value = value.removeprefix("=")
    if path not in FIELDS:
        return None
    section, leaf = FIELDS[path]

    def match(obj: Mapping[str, object]) -> bool:
        part = obj.get(section)
        found = part.get(leaf) if isinstance(part, Mapping) else None
        return (str(found or "") == value) != negate

    return match


def selector_match(label_selector: str, field_selector: str) -> Match | None:
    """The objects both selectors select, or None if either uses what this cannot evaluate
    (the list is then a GET)."""
    terms: list[Match | None] = []
    terms += [_label_term(t.strip()) for t in label_selector.split(",") if t.strip()]
    terms += [_field_term(t.strip()) for t in field_selector.split(",") if t.strip()]
    known = [t for t in terms if t is not None]
    if len(known) < len(terms):
        return None
    return lambda obj: all(t(obj) for t in known)


def _in_namespace(namespace: str | None, obj: JSON) -> bool:
    return namespace is None or (obj.get("metadata") or {}).get("namespace") == namespace


@dataclass
class CachedReads(DelegatingKubeApi):
    """``get`` from the caches ``stores`` names (read-your-writes, see the module); the rest
    passes through. ``served`` and ``fetched`` count the gets answered each way."""

    stores: StoreLookup = field(default=lambda kind, namespace, name: None)
    served: int = 0
    fetched: int = 0
    _seen: dict[tuple[str, str], str] = field(default_factory=dict)
    _by_node: dict[int, tuple[weakref.ref[Store], int, dict[str, list[JSON]]]] = field(
        default_factory=dict
    )

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        store = self.stores(kind.kind, namespace, name)
        ident = (kind.kind, _key(namespace, name))
        if store is not None and store.synced.is_set():
            cached = store.get(_key(namespace, name))
            seen = self._seen.get(ident)
            if seen is None or _version(cached) == seen:
                self._seen.pop(ident, None)
                self.served += 1
                # A copy: the cached object is shared with the autoscaler's view, and a pass that
                # edits what it read (a status built in place) must not change that view.
                return copy.deepcopy(cached)
        self.fetched += 1
        fresh = await self.inner.get(kind, namespace, name)
        if store is not None:
            self._seen[ident] = _version(fresh)
        return fresh

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        store = self.stores(kind.kind, namespace, "")
        match = selector_match(label_selector, field_selector)
        if store is not None and match is not None and self._caught_up(kind.kind, store):
            self.served += 1
            candidates = self._candidates(store, field_selector)
            objects = [o for o in candidates if _in_namespace(namespace, o) and match(o)]
            return copy.deepcopy(objects)
        self.fetched += 1
        items = await self.inner.list(kind, namespace, label_selector, field_selector)
        if store is not None:
            listed = {_key(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in items}
            for ident in self._remembered(kind.kind, store):
                if ident[1] in listed:
                    self._seen[ident] = _version(listed[ident[1]])
        return items

    def _candidates(self, store: Store, field_selector: str) -> Sequence[JSON]:
        """The store's objects a list may select: for ``spec.nodeName=<node>`` alone (each
        cell's pods, each DRA cell's slices: one list per cell per pass) the objects on that
        node, from an index rebuilt only when the store changed (``WatchCache.version``), so a
        pass does not scan every pod of the cluster per cell."""
        path, _, node = field_selector.partition("=")
        version = getattr(store, "version", None)
        if path != "spec.nodeName" or "," in node or "!" in path or not isinstance(version, int):
            return store.items()
        held = self._by_node.get(id(store))
        if held is None or held[0]() is not store or held[1] != version:
            index: dict[str, list[JSON]] = {}
            for obj in store.items():
                on = (obj.get("spec") or {}).get("nodeName")
                if on:
                    index.setdefault(str(on), []).append(obj)
            # Only a weak reference to the store: a rebuilt cluster's old cache is let go,
            # and its index with it at the next rebuild of any index.
            live = {k: v for k, v in self._by_node.items() if v[0]() is not None}
            held = live[id(store)] = (weakref.ref(store), version, index)
            self._by_node = live
        return held[2].get(node, [])

    def _remembered(self, kind: str, store: Store) -> tuple[tuple[str, str], ...]:
        """The remembered objects of ``kind`` that ``store`` mirrors."""
        return tuple(
            ident
            for ident in tuple(self._seen)
            if ident[0] == kind and self.stores(kind, *_split(ident[1])) is store
        )

    def _caught_up(self, kind: str, store: Store) -> bool:
        """Whether ``store`` is synced and holds every version remembered of it (then they
        are forgotten: the watch delivers later versions in order)."""
        if not store.synced.is_set():
            return False
        remembered = self._remembered(kind, store)
        if any(_version(store.get(key)) != self._seen[(k, key)] for k, key in remembered):
            return False
        for ident in remembered:
            self._seen.pop(ident, None)
        return True

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        ident = (write.kind, _key(write.namespace, write.name))
        if self.stores(write.kind, write.namespace, write.name) is None:
            return await call()
        try:
            result = await call()
        except Conflict:
            self._seen[ident] = UNKNOWN
            raise
        # An evicted pod is on its way out: read fresh until the cache has dropped it.
        if write.verb == "evict" or not isinstance(result, dict):
            self._seen[ident] = UNKNOWN
        else:
            self._seen[ident] = _version(result)
        return result


__all__ = ["CachedReads", "Store", "StoreLookup", "WorkloadReads", "selector_match"]
