"""Drives the provisioner's ``reconcile_once`` per pool from watch events, like the loop does.

Why this module exists: ``gpucellpool run`` must not only decide but also act. The provisioner
shell (``provisioner.reconciler.Reconciler``) is stateless per pass; this driver has the one keyed
runner (``gpucellpool.runtime.runner``) reconcile a pool when something relevant changed - the
pool's spec, deletion, ``status.desiredReplicas`` or the acted ``lastDecision.victims`` (the
autoscaler's plan), its SwiftGuests/Machines, or one of its cells' Nodes or a pod on one (routed
by ``autoscaler.routing``: the drain waits for a Node to empty) - 0.2 s after the first such event
(the runner's debounce with min == max), and otherwise when the reconciler asked to be requeued
(``requeue_after_s``, else ``idle_requeue_s``). Failures back off exponentially (1 s doubling to
``max_backoff_s``) and never touch other pools. Only the leader reconciles, and only the pools
it ``owns`` (shard ownership; every pool by default): the runner's gate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpucellpool.api.clock import Clock
from gpucellpool.runtime.runner import KeyedRunner, RunnerSettings
from provisioner.reconciler import PoolKey, ReconcileResult

JSON = dict[str, Any]


class Reconcile(Protocol):
    async def reconcile_once(self, key: PoolKey) -> ReconcileResult: ...


@dataclass(slots=True)
class _Pool:
    fingerprint: tuple[Any, ...]
    passes: int = 0
    """Reconcile passes that returned (the runner counts the failed ones)."""


def _fingerprint(raw: JSON) -> tuple[Any, ...]:
    """What a pass executes: the spec, the deletion, and the autoscaler's plan - its target and
    its victims (``lastDecision.victims`` of an acted decision), so that a plan that only changes
    which cells leave at the same target wakes the pool instead of waiting for a requeue."""
    meta, status = raw.get("metadata") or {}, raw.get("status") or {}
    last = status.get("lastDecision")
    victims: Any = None
    if isinstance(last, dict) and last.get("act", True):
        chosen = last.get("victims")
        victims = tuple(str(v) for v in chosen) if isinstance(chosen, list) else None
    return (
        meta.get("generation"),
        meta.get("deletionTimestamp"),
        status.get("desiredReplicas"),
        victims,
    )


def owner_pool(obj: JSON) -> tuple[str, str] | None:
    """The GPUCellPool controlling an outer object (SwiftGuest, Machine), if any."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "GPUCellPool":
            return str(meta.get("namespace", "")), str(ref.get("name", ""))
    return None


class ProvisionerDriver:
    def __init__(
        self,
        reconciler: Reconcile,
        clock: Clock,
        is_leader: Callable[[], bool],
        debounce_s: float = 0.2,
        idle_requeue_s: float = 30.0,
        max_backoff_s: float = 60.0,
        *,
        owns: Callable[[tuple[str, str]], bool] = lambda _key: True,
    ) -> None:
        self.reconciler = reconciler
        self.idle_requeue_s = idle_requeue_s
        self.pools: dict[tuple[str, str], _Pool] = {}
        settings = RunnerSettings(
            debounce_min_s=debounce_s,
            debounce_max_s=debounce_s,
            backoff_max_s=max_backoff_s,
            gate_recheck_s=idle_requeue_s,
        )
        self.runner: KeyedRunner[tuple[str, str]] = KeyedRunner(
            self._step,
            clock,
            settings,
            lambda key: is_leader() and owns(key),  # the leader, of this pool's shard
            name="provision",
            label="/".join,
            failure_message="reconcile failed",
        )

    def pool_event(self, kind: str, raw: JSON) -> None:
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if kind == "DELETED":
            self.pools.pop(key, None)
            self.runner.remove(key)
            return
        entry = self.pools.get(key)
        if entry is None:
            self.pools[key] = _Pool(_fingerprint(raw))
            self.runner.add(key)
        elif _fingerprint(raw) != entry.fingerprint:
            entry.fingerprint = _fingerprint(raw)
            self.runner.wake(key)

    def wake(self, key: tuple[str, str]) -> None:
        self.runner.wake(key)

    def wake_all(self) -> None:
        self.runner.wake_all()

    async def _step(self, key: tuple[str, str], _woken: bool) -> float | None:
        result = await self.reconciler.reconcile_once(PoolKey(*key))
        entry = self.pools.get(key)
        if entry is not None:
            entry.passes += 1
        if result.gone:
            return None
        return result.requeue_after_s or self.idle_requeue_s

    async def close(self) -> None:
        await self.runner.close()
        self.pools.clear()
