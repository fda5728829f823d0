"""``DelegatingKubeApi``: every verb reaches the inner API unchanged; only writes see the hook.

The crash-injecting (simulations/twin/faults.py) and recording (tests/integration/
provisioner_support.py) wrappers are subclasses; these tests pin what they rely on: the
forwarded arguments and answers, which calls count as writes, and each write's description
(the crash tests' log).
"""

from __future__ import annotations

import asyncio
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


class HeldApply(Inner):
    """An ``Inner`` whose applies wait until ``release`` is set (a write in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def apply(
        self, obj: Mapping[str, Any], status: bool = False, field_manager: str | None = None
    ) -> JSON:
        self.started.set()
        await self.release.wait()
        return await super().apply(obj, status, field_manager)


async def test_after_the_crash_no_write_starts_but_one_in_flight_lands() -> None:
    inner = HeldApply()
    plan = CrashPlan(crash_at=1)
    api = FaultyKubeApi(cast(KubeApi, inner), plan)
    in_flight = asyncio.create_task(api.apply(POD))  # write 0, held by the server
    await inner.started.wait()  # it took its number and reached the server
    with pytest.raises(InjectedCrash, match="before create Pod/p"):
        await api.create(POD)  # write 1: the process dies
    with pytest.raises(InjectedCrash, match="delete Node/n after the crash"):
        await api.delete(KINDS["Node"], None, "n")
    inner.release.set()
    assert await in_flight == {"applied": True}
    assert [c[0] for c in inner.seen] == ["apply"]  # neither the create nor the delete
    assert plan.log == ["apply Pod/p"] and plan.calls == 2


class Refusing(Inner):
    """An ``Inner`` whose creates are refused (a 409 the caller retries, say), once
    ``answer`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()
        self.answer.set()

    async def create(self, obj: Mapping[str, Any]) -> JSON:
        await self.answer.wait()
        raise RuntimeError("refused")


async def test_a_refused_write_takes_no_number() -> None:
    plan = CrashPlan(crash_at=1, after=True)
    api = FaultyKubeApi(cast(KubeApi, Refusing()), plan)
    await api.apply(POD)  # write 0
    with pytest.raises(RuntimeError, match="refused"):
        await api.create(POD)  # refused: not a write that landed
    with pytest.raises(InjectedCrash, match="after delete Node/n"):
        await api.delete(KINDS["Node"], None, "n")  # so this one is write 1
    assert plan.log == ["apply Pod/p", "delete Node/n"] and plan.calls == 2


async def test_writes_under_way_move_up_when_an_earlier_one_is_refused() -> None:
    inner, refusing = HeldApply(), Refusing()
    refusing.answer.clear()
    plan = CrashPlan(crash_at=1, after=True)
    api = FaultyKubeApi(cast(KubeApi, inner), plan)
    await api.patch(KINDS["Pod"], "ns", "p", {})  # write 0
    refused = asyncio.create_task(FaultyKubeApi(cast(KubeApi, refusing), plan).create(POD))
    held = asyncio.create_task(api.apply(POD))  # numbered 2 while the create is under way
    await inner.started.wait()
    assert [t.number for t in plan.under_way] == [1, 2]
    refusing.answer.set()
    with pytest.raises(RuntimeError, match="refused"):
        await refused  # gives its number back: the apply becomes write 1
    inner.release.set()
    with pytest.raises(InjectedCrash, match="after apply Pod/p"):
        await held
    assert plan.log == ["patch Pod/p", "apply Pod/p"] and plan.calls == 2
