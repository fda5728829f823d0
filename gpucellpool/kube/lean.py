"""Workload Pods and Nodes as the caches keep them: without ``metadata.managedFields``.

Why this module exists: every operator process mirrors every Pod and Node of each workload
cluster (``gpucellpool.kube.workload``), and in an apiserver's answer close to half of a pod's
JSON is ``metadata.managedFields``, the server-side-apply record of which writer owns which
field. Nothing in the operator reads it for a workload object (the field ownership the
provisioner migrates is the GPUCellPool's, read from the infrastructure cluster). Measured on
the 200-pool benchmark's pods (tests/bench/test_shard_scale_bench.py): 11.0 KiB of Python
objects per pod as listed, 4.9 KiB without it (tracemalloc), ~240 MiB of live objects less per
process at 40,000 pods; how much of it the process's RSS gives back depends on the allocator
(freed fields leave holes that later objects fill).
Dropping the field as each object arrives (a list page, a watch event) is the whole rule;
everything else of the object is kept as the apiserver sent it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from gpucellpool.kube.cache import JSON, ListWatch, Query


def without_managed_fields(obj: JSON) -> JSON:
    """``obj`` itself, its ``metadata.managedFields`` removed (nothing else touched)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


@runtime_checkable
class Paged(Protocol):
    """A source that lists page by page (``RestClient.pages``)."""

    def pages(self, query: Query) -> AsyncIterator[tuple[list[JSON], str]]: ...


class WithoutManagedFields:
    """A ``ListWatch`` over ``source`` whose listed and watched objects lack managedFields."""

    def __init__(self, source: ListWatch) -> None:
        self._source = source

    async def list(self, query: Query) -> tuple[list[JSON], str]:
        if not isinstance(self._source, Paged):
            items, version = await self._source.list(query)
            return [without_managed_fields(item) for item in items], version
        # Page by page: trimmed after all pages were decoded, the freed fields were holes in
        # memory the process never gave back (RSS as high as without trimming).
        kept: list[JSON] = []
        version = ""
        async for page, page_version in self._source.pages(query):
            kept += [without_managed_fields(item) for item in page]
            version = page_version
        return kept, version

    async def watch(self, query: Query, resource_version: str) -> AsyncIterator[JSON]:
        async for event in self._source.watch(query, resource_version):
            obj = event.get("object")
            if isinstance(obj, dict) and event.get("type") != "ERROR":
                without_managed_fields(obj)
            yield event
