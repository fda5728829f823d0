"""``DelegatingKubeApi``: every verb reaches the inner API unchanged; only writes see the hook.

The crash-injecting (simulations/twin/faults.py) and recording (tests/integration/
provisioner_support.py) wrappers are subclasses; these tests pin what they rely on: the
forwarded arguments and answers, which calls count as writes, and each write's description
(the crash tests' log).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import pytest

from provisioner.kube import JSON, KINDS, Kind, KubeApi
from provisioner.kube_delegate import DelegatingKubeApi, Write
from simulations.twin.faults import CrashPlan, FaultyKubeApi, InjectedCrash

T = TypeVar("T")
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}


@dataclass
class Inner:
    """Answers every verb with what it was given, and remembers the calls."""

    seen: list[tuple[Any, ...]] = field(default_factory=list)

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        self.seen.append(("get", kind.kind, namespace, name))
        return {"got": name}

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        self.seen.append(("list", kind.kind, namespace, label_selector, field_selector))
        return [{"listed": kind.kind}]

    async def apply(
        self, obj: Mapping[str, Any], status: bool = False, field_manager: str | None = None
    ) -> JSON:
        self.seen.append(("apply", obj["metadata"]["name"], status, field_manager))
        return {"applied": True}

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        status: bool = False,
    ) -> JSON:
        self.seen.append(("patch", kind.kind, namespace, name, dict(patch), status))
        return {"patched": True}

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        self.seen.append(("create", obj["metadata"]["name"]))
        return {"created": True}

    async def delete(
        self, kind: Kind, namespace: str | None, name: str, grace_period_s: int | None = None
    ) -> bool:
        self.seen.append(("delete", kind.kind, namespace, name, grace_period_s))
        return False

    async def evict(self, namespace: str, name: str) -> None:
        self.seen.append(("evict", namespace, name))

    async def version(self) -> JSON:
        self.seen.append(("version",))
        return {"gitVersion": "v1"}

    async def close(self) -> None:
        self.seen.append(("close",))


@dataclass
class Hooked(DelegatingKubeApi):
    writes: list[Write] = field(default_factory=list)

    async def _write(self, write: Write, call: Callable[[], Awaitable[T]]) -> T:
        self.writes.append(write)
        return await call()


async def _every_verb(api: KubeApi) -> list[Any]:
    """The answers of every verb (``evict`` and ``close`` answer nothing)."""
    pool = KINDS["GPUCellPool"]
    answers = [
        await api.get(pool, "ns", "a"),
        await api.list(pool, "ns", "l=1", "f=2"),
        await api.apply(POD),
        await api.apply(POD, status=True, field_manager="m"),
        await api.patch(pool, "ns", "a", {"x": 1}, status=True),
        await api.create(POD),
        await api.delete(KINDS["Node"], None, "n", grace_period_s=0),
    ]
    await api.evict("ns", "p")
    answers.append(await api.version())
    await api.close()
    return answers


async def test_every_verb_is_forwarded_with_its_arguments_and_answer() -> None:
    inner = Inner()
    direct = await _every_verb(cast(KubeApi, Inner()))
    hooked = Hooked(cast(KubeApi, inner))
    assert await _every_verb(hooked) == direct
    assert inner.seen == [
        ("get", "GPUCellPool", "ns", "a"),
        ("list", "GPUCellPool", "ns", "l=1", "f=2"),
        ("apply", "p", False, None),
        ("apply", "p", True, "m"),
        ("patch", "GPUCellPool", "ns", "a", {"x": 1}, True),
        ("create", "p"),
        ("delete", "Node", None, "n", 0),
        ("evict", "ns", "p"),
        ("version",),
        ("close",),
    ]
    assert [w.describe() for w in hooked.writes] == [
        "apply Pod/p",
        "apply Pod/p/status",
        "patch GPUCellPool/a/status",
        "create Pod/p",
        "delete Node/n",
        "evict ns/p",
    ]


@pytest.mark.parametrize("after", [False, True])
async def test_the_crash_wrapper_crashes_at_the_planned_write(after: bool) -> None:
    inner = Inner()
    plan = CrashPlan(crash_at=1, after=after)
    api = FaultyKubeApi(cast(KubeApi, inner), plan)
    await api.get(KINDS["Pod"], "ns", "p")  # reads never count
    await api.apply(POD)
    with pytest.raises(InjectedCrash, match=("after" if after else "before") + " create Pod/p"):
        await api.create(POD)
    assert (("create", "p") in inner.seen) is after
    assert plan.log == (["apply Pod/p", "create Pod/p"] if after else ["apply Pod/p"])
