"""Several leaving cells drain concurrently in one pass (``drainer.drive_drains``).

What this proves: the drains of two cells progress together - the workload cluster answers
each cell's first read only once both cells have asked (a pass that drained one cell after the
other would wait for ever on the first) - and each still runs its own steps in order to the end
(finalizer released, then the outer object deleted). A drain that fails does not cut the other
short: it finishes, then the failure is raised, so the pass ends as after a crash.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from gpucellpool.api import GPUCellPool
from provisioner.backends.base import DRAIN_ANNOTATION, CellObjects
from provisioner.drainer import drive_drains
from provisioner.fsm.drain import DrainAction
from provisioner.fsm.identity import CELL_DRAIN_FINALIZER
from provisioner.kube import JSON, KINDS, Kind, KubeError

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"


def _pool() -> GPUCellPool:
    body = yaml.safe_load((SAMPLES / "autoscaling-off.yaml").read_text())
    body["metadata"].update({"namespace": "ns", "uid": "u-1", "resourceVersion": "1"})
    return GPUCellPool.model_validate(body)


def _leaving(name: str, index: int) -> CellObjects:
    meta = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "annotations": {DRAIN_ANNOTATION: "ScaleDown"},
        "finalizers": [CELL_DRAIN_FINALIZER],
    }
    return CellObjects(name, index, {"metadata": meta})


class Rendezvous:
    """A workload cluster whose Nodes are gone; a Node read is answered only once every cell
    in ``expected`` has asked (all drains are under way at once)."""

    def __init__(self, expected: set[str]) -> None:
        self.expected = expected
        self.asked: set[str] = set()
        self.all_asked = asyncio.Event()

    async def get(self, kind: Kind, namespace: str | None, name: str) -> JSON | None:
        assert kind is KINDS["Node"]
        self.asked.add(name)
        if self.asked >= self.expected:
            self.all_asked.set()
        await self.all_asked.wait()
        return None

    async def list(self, kind: Kind, *args: Any, **kwargs: Any) -> list[JSON]:
        return []


class Backend:
    """The outer objects: releasing a finalizer and deleting are recorded, in order."""

    outer_kind = KINDS["SwiftGuest"]

    def __init__(self, fail_release: str = "") -> None:
        self.api = None
        self.done: list[tuple[str, str]] = []
        self.fail_release = fail_release

    def observe(self, cell: CellObjects, node_ip_from: str) -> Any:
        return SimpleNamespace(provider_id="")

    async def release_finalizer(self, cell: CellObjects) -> None:
        await asyncio.sleep(0)  # a round trip: the other drain runs meanwhile
        if cell.name == self.fail_release:
            raise KubeError(500, "internal error")
        cell.outer["metadata"]["finalizers"] = []
        self.done.append(("release", cell.name))

    async def delete_outer(self, cell: CellObjects) -> None:
        await asyncio.sleep(0)
        self.done.append(("delete", cell.name))


async def test_two_drains_progress_in_one_pass() -> None:
    cells = [_leaving("p-1", 1), _leaving("p-2", 2)]
    backend = Backend()
    workload: Any = Rendezvous({"p-1", "p-2"})
    steps = await asyncio.wait_for(
        drive_drains(_pool(), cells, backend, workload, 100.0),  # type: ignore[arg-type]
        timeout=10,
    )
    assert {name: s.action for name, s in steps.items()} == {
        "p-1": DrainAction.DELETE_OUTER,
        "p-2": DrainAction.DELETE_OUTER,
    }
    for name in ("p-1", "p-2"):  # each drain's own steps in order
        mine = [what for what, cell in backend.done if cell == name]
        assert mine == ["release", "delete"]
    # interleaved: the second drain released before the first one deleted
    assert backend.done.index(("release", "p-2")) < backend.done.index(("delete", "p-1"))


async def test_a_failed_drain_lets_the_other_finish_then_raises() -> None:
    cells = [_leaving("p-1", 1), _leaving("p-2", 2)]
    backend = Backend(fail_release="p-1")
    workload: Any = Rendezvous({"p-1", "p-2"})
    try:
        await asyncio.wait_for(
            drive_drains(_pool(), cells, backend, workload, 100.0),  # type: ignore[arg-type]
            timeout=10,
        )
    except KubeError as exc:
        assert exc.status == 500
    else:
        raise AssertionError("the failed drain's error was swallowed")
    assert backend.done == [("release", "p-2"), ("delete", "p-2")]
