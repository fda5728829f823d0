"""Small shared pieces of the simulated controllers: time stamps, conditions, the poll loop.

Why this module exists: every simulated controller stamps metav1 times and conditions the same
way and runs the same "one pass, sleep, repeat" loop; a controller pass that fails (the harness
apiserver restarting, a conflict) is logged and retried on the next tick, like a real
controller's requeue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from provisioner.kube import KINDS, KubeApi, KubeError, NotFound

log = logging.getLogger("simulations.twin")


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(seconds: float) -> str:
    """metav1.MicroTime (Lease renewTime)."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def condition(type_: str, status: bool, reason: str, message: str, now: float) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(now),
    }


def same_conditions(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Equal ignoring transition times (only rewrite status when something changed)."""

    def strip(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in items
        )

    return strip(a) == strip(b)


async def each_bounded(
    passes: Sequence[Callable[[], Awaitable[None]]], concurrency: int
) -> list[BaseException]:
    """Run every pass, at most ``concurrency`` at once, and return the errors they raised.

    A real controller reconciles its objects with several workers, so one object's slow or
    failed request holds up no other object: a pass over N objects costs about the slowest
    one's time, not the sum (which, on a loaded machine, grew to 18-50 s per pass of the
    simulated Cluster API and KubeSwift over a crash suite's 31 pools). Each pass is started
    only once it holds the gate, so a cancelled caller leaves none half-started."""
    gate = asyncio.Semaphore(concurrency)

    async def bounded(work: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await work()

    results = await asyncio.gather(*(bounded(w) for w in passes), return_exceptions=True)
    return [r for r in results if isinstance(r, BaseException)]


def raise_first(errors: Sequence[BaseException]) -> None:
    """Raise the first of ``errors`` (the next poll retries, like a controller's requeue)."""
    if errors:
        raise errors[0]


class PollingController:
    """``step()`` once per ``poll_s`` until cancelled."""

    poll_s: float = 0.1

    async def step(self) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        """Passes until cancelled. A failed pass is retried at the next poll: an apiserver
        error quietly, anything else logged with its traceback - a controller that died
        silently on one malformed object would leave a test waiting for its deadline with no
        word of why."""
        while True:
            try:
                await self.step()
            except KubeError as exc:
                log.debug("%s pass failed: %s", type(self).__name__, exc)
            except Exception:
                log.exception("%s pass failed; retrying at the next poll", type(self).__name__)
            await asyncio.sleep(self.poll_s)


async def mark_unschedulable(api: KubeApi, pod: dict[str, Any], message: str, now: float) -> None:
    """A scheduler's verdict on ``pod``: PodScheduled=False/Unschedulable with ``message``,
    written only when it changed (a pod deleted meanwhile is left alone)."""
    conditions = list((pod.get("status") or {}).get("conditions") or [])
    current: dict[str, Any] = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if (current.get("status"), current.get("reason"), current.get("message")) == (
        "False",
        "Unschedulable",
        message,
    ):
        return
    kept = [c for c in conditions if c.get("type") != "PodScheduled"]
    cond = condition("PodScheduled", False, "Unschedulable", message, now)
    cond["lastProbeTime"] = None
    meta = pod.get("metadata") or {}
    try:
        await api.patch(
            KINDS["Pod"],
            meta["namespace"],
            meta["name"],
            {"status": {"conditions": [*kept, cond]}},
            status=True,
        )
    except NotFound:
        return
