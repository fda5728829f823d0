"""Simulated KubeSwift controller: turns SwiftGuests into "booted VMs" on the status subresource.

Why this module exists: the provisioner reads only what KubeSwift publishes on a SwiftGuest, so
the twin publishes exactly that (kubeswift-facts.md §3 and §7 "suggested fidelity"), in the real
order and after configurable delays:

1. resolve: ``Resolved=True`` (or ``Failed`` + ``Resolved=False/ResolutionFailed`` when the
   seed profile is missing), ``phase=Scheduling``, ``PodScheduled=False/PodNotScheduled``, the
   ``kubeswift.io/gpu-allocation`` finalizer, ``GPUClaimPending=True/AwaitingScheduler`` (DRA);
2. allocate: ``status.gpu{devices, partitionId:-1, nodeName, hypervisor}``, ``nodeName``,
   ``podRef``, ``GPUAllocated=True/Allocated``, ``GPUClaimPending=False/Allocated``; the host
   is chosen once per guest, round-robin over ``hosts``, skipping a host whose infrastructure
   Node is cordoned (the launcher pod goes through the scheduler, which skips it);
3. run: ``phase=Running``, ``PodScheduled=True``, ``GuestRunning=True/VmRunning``, ``runtime``;
4. address: ``network{primaryIP, interface, ready, interfaces[]}`` (only the primary NIC has
   an ip), ``NetworkReady=True/IPAcquired``.

Failure knobs per guest name: never an address (optionally ``NetworkReady=False/DHCPTimeout``
after ``dhcp_timeout_s``), launcher Failed (``phase=Failed``, ``GuestRunning=False/VmFailed``,
restarts exhausted), stuck in Scheduling. On deletion the gpu-allocation finalizer is released.

A failed launcher stays failed: with ``runPolicy: Always`` KubeSwift restarts it only after its
backoff (10 s x 2^restartCount, capped at 300 s; kubeswift-facts.md "Telling failed apart"), so
clearing a fault does not revive a Failed guest at the next pass; after the backoff the guest
starts over from Scheduling with one more restart counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpucellpool.api.clock import Clock
from provisioner.kube import JSON, KINDS, KubeApi
from simulations.twin import gpu_ledger
from simulations.twin.common import (
    PollingController,
    condition,
    each_bounded,
    raise_first,
    same_conditions,
)

GPU_FINALIZER = "kubeswift.io/gpu-allocation"
RESTARTS_WHEN_FAILED = 3
RESTART_BACKOFF_BASE_S = 10.0
RESTART_BACKOFF_CAP_S = 300.0


def restart_backoff_s(restarts: int) -> float:
    """KubeSwift's wait before it re-creates a failed launcher (``runPolicy: Always``)."""
    return min(RESTART_BACKOFF_BASE_S * 2.0**restarts, RESTART_BACKOFF_CAP_S)


@dataclass(frozen=True, slots=True)
class GuestTimings:
    """Seconds from first sight to each stage (cumulative: allocate, then run, then address)."""

    allocate_s: float = 0.2
    run_s: float = 0.3
    address_s: float = 0.3


@dataclass(frozen=True, slots=True)
class GuestFault:
    never_address: bool = False
    dhcp_timeout_s: float | None = None
    fail: bool = False
    stuck_scheduling: bool = False


@dataclass
class SimulatedKubeSwift(PollingController):
    api: KubeApi
    clock: Clock
    namespace: str | None = None
    timings: GuestTimings = GuestTimings()
    faults: dict[str, GuestFault] = field(default_factory=dict)
    poll_s: float = 0.1
    hosts: tuple[str, ...] = ("gpu-host-a", "gpu-host-b")
    _first_seen: dict[str, float] = field(default_factory=dict)
    _slots: dict[str, int] = field(default_factory=dict)
    _failed_at: dict[str, float] = field(default_factory=dict)
    _restarts: dict[str, int] = field(default_factory=dict)
    _host_of: dict[str, str] = field(default_factory=dict)
    fault_for: Callable[[str], GuestFault] | None = None
    concurrency: int = 16
    _ledger: asyncio.Lock = field(default_factory=asyncio.Lock)  # one ledger write at a time
    # Guests whose GPU the ledger holds (or that need none: no ledger), and whose seed profile
    # resolved: a pass over every guest (10 a second) read the ledger under its lock and the
    # seed profile for each guest each time, and a deleted guest's release queued behind them
    _held: set[str] = field(default_factory=set)
    _resolved: set[str] = field(default_factory=set)

    def _fault(self, name: str) -> GuestFault:
        if self.fault_for is not None:
            return self.fault_for(name)
        return self.faults.get(name, GuestFault())

    async def step(self) -> None:
        """One pass over every guest, reconciled concurrently (KubeSwift's workers): a pass
        costs about one guest's requests, not their sum, and one guest's failure holds up no
        other. Launcher slots (host round-robin, devices, address) are handed out first, in
        list order, as one guest after another took them."""
        guests = await self.api.list(KINDS["SwiftGuest"], self.namespace)
        now = self.clock.now()
        for guest in guests:
            uid = str(guest["metadata"]["uid"])
            due = now - self._first_seen.get(uid, now) >= self.timings.allocate_s
            if guest["metadata"].get("deletionTimestamp") is None and due:
                self._slot(uid)
        passes = [partial(self._reconcile, g) for g in guests]
        raise_first(await each_bounded(passes, self.concurrency))

    async def _reconcile(self, guest: JSON) -> None:
        meta = guest["metadata"]
        if meta.get("deletionTimestamp") is not None:
            await self._release(guest)
            return
        uid = str(meta["uid"])
        now = self.clock.now()
        first = self._restart_if_due(uid, guest["metadata"]["name"], now)
        if GPU_FINALIZER not in (meta.get("finalizers") or []) and self._wants_gpu(guest):
            patch = {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "finalizers": [*(meta.get("finalizers") or []), GPU_FINALIZER],
                }
            }
            guest = await self.api.patch(
                KINDS["SwiftGuest"], meta["namespace"], meta["name"], patch
            )
        seed_ok = await self._seed_exists(guest)
        no_capacity = False
        if (guest.get("spec") or {}).get("gpuProfileRef") and uid not in self._held:
            async with self._ledger:  # Native: take a GPU from the ledger, once
                held = await gpu_ledger.hold(self.api, uid)
            no_capacity = held is False
            if not no_capacity:
                self._held.add(uid)
        if uid not in self._host_of and now - first >= self.timings.allocate_s:
            host = await self._place(self._slot(uid))
            if host is not None:
                self._host_of[uid] = host
        status = self._status(guest, uid, now - first, seed_ok, now, no_capacity)
        await self._write(guest, status)

    def _restart_if_due(self, uid: str, name: str, now: float) -> float:
        """When this guest's boot clock started: a failed launcher restarts (boot clock reset)
        once its fault is gone and its restart backoff has passed, never sooner."""
        failed_at = self._failed_at.get(uid)
        restarts = self._restarts.get(uid, RESTARTS_WHEN_FAILED)
        due = failed_at is not None and now - failed_at >= restart_backoff_s(restarts)
        if due and not self._fault(name).fail:
            del self._failed_at[uid]
            self._restarts[uid] = restarts + 1
            self._first_seen[uid] = now
        return self._first_seen.setdefault(uid, now)

    async def _place(self, slot: int) -> str | None:
        """The launcher pod's host, chosen once, as the scheduler would: round-robin over
        ``hosts``, skipping a host whose infrastructure Node is cordoned (``spec.unschedulable``;
        a host without a Node object is schedulable). None: no host is schedulable, the launcher
        pod stays Pending and the guest in Scheduling."""
        order = [self.hosts[(slot + i) % len(self.hosts)] for i in range(len(self.hosts))]
        for host in order:
            node = await self.api.get(KINDS["Node"], None, host)
            if not ((node or {}).get("spec") or {}).get("unschedulable"):
                return host
        return None

    @staticmethod
    def _wants_gpu(guest: JSON) -> bool:
        spec = guest.get("spec") or {}
        return bool(spec.get("gpuResourceClaim") or spec.get("gpuProfileRef"))

    async def _seed_exists(self, guest: JSON) -> bool:
        """The guest's seed profile was there when it was resolved: KubeSwift renders the seed
        on create (kubeswift-facts, 'Suggested fidelity' 1) and does not look again."""
        uid = str(guest["metadata"]["uid"])
        ref = ((guest.get("spec") or {}).get("seedProfileRef") or {}).get("name")
        if not ref or uid in self._resolved:
            return True
        found = await self.api.get(KINDS["SwiftSeedProfile"], guest["metadata"]["namespace"], ref)
        if found is not None:
            self._resolved.add(uid)
        return found is not None

    def _slot(self, uid: str) -> int:
        return self._slots.setdefault(uid, len(self._slots))

    def _status(
        self, guest: JSON, uid: str, age: float, seed_ok: bool, now: float, no_capacity: bool
    ) -> dict[str, Any]:
        name = guest["metadata"]["name"]
        fault, t = self._fault(name), self.timings
        dra = bool((guest.get("spec") or {}).get("gpuResourceClaim"))
        if not seed_ok:
            msg = "SwiftSeedProfile not found"
            return {
                "phase": "Failed",
                "conditions": [condition("Resolved", False, "ResolutionFailed", msg, now)],
            }
        conds = [
            condition("Resolved", True, "Resolved", "", now),
            condition("StorageReady", True, "StorageReady", "", now),
        ]
        status: dict[str, Any] = {"phase": "Scheduling"}
        if no_capacity:
            msg = "no free GPU in the SwiftGPUNode ledger"
            conds.append(condition("GPUAllocated", False, "NoCapacity", msg, now))
            return {**status, "phase": "Pending", "conditions": conds}
        unplaced = age >= t.allocate_s and uid not in self._host_of
        if age < t.allocate_s or fault.stuck_scheduling or unplaced:
            conds.append(condition("PodScheduled", False, "PodNotScheduled", "Scheduling", now))
            if dra:
                conds.append(condition("GPUClaimPending", True, "AwaitingScheduler", "", now))
            return {**status, "conditions": conds}
        slot = self._slot(uid)
        host = self._host_of[uid]
        status.update(self._placement(guest, host, slot))
        conds.append(
            condition("GPUAllocated", True, "Allocated", f"allocated 1 GPU(s) on node {host}", now)
        )
        if dra:
            conds.append(condition("GPUClaimPending", False, "Allocated", "", now))
        if age < t.allocate_s + t.run_s:
            conds.append(condition("PodScheduled", False, "PodNotScheduled", "Scheduling", now))
            return {**status, "conditions": conds}
        return self._launched(guest, slot, age, fault, status, conds, now)

    def _launched(
        self,
        guest: JSON,
        slot: int,
        age: float,
        fault: GuestFault,
        status: dict[str, Any],
        conds: list[dict[str, Any]],
        now: float,
    ) -> dict[str, Any]:
        """The launcher pod started: the VM fails, or runs and (maybe) gets its address."""
        t = self.timings
        uid = str(guest["metadata"]["uid"])
        if fault.fail or uid in self._failed_at:
            self._failed_at.setdefault(uid, now)
            conds.append(
                condition("PodScheduled", False, "PodNotScheduled", "Error: launcher exited 1", now)
            )
            conds.append(condition("GuestRunning", False, "VmFailed", "VmFailed", now))
            return {
                **status,
                "phase": "Failed",
                "restartCount": self._restarts.get(uid, RESTARTS_WHEN_FAILED),
                "conditions": conds,
            }
        status["phase"] = "Running"
        status["runtime"] = {"pid": 1000 + slot, "hypervisor": "cloud-hypervisor"}
        conds.append(condition("PodScheduled", True, "PodScheduled", "", now))
        conds.append(condition("GuestRunning", True, "VmRunning", "VmRunning", now))
        booted = age >= t.allocate_s + t.run_s + t.address_s
        if booted and not fault.never_address:
            status["network"] = self._network(guest, slot)
            conds.append(condition("NetworkReady", True, "IPAcquired", "", now))
        elif (
            fault.dhcp_timeout_s is not None
            and age >= t.allocate_s + t.run_s + fault.dhcp_timeout_s
        ):
            conds.append(condition("NetworkReady", False, "DHCPTimeout", "no DHCP lease", now))
        return {**status, "conditions": conds}

    @staticmethod
    def _placement(guest: JSON, host: str, slot: int) -> dict[str, Any]:
        meta = guest["metadata"]
        bdf = f"0000:{(slot % 8) + 1:02x}:00.0"
        return {
            "nodeName": host,
            "podRef": {
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": f"pod-{meta['uid']}",
            },
            "gpu": {
                "devices": [bdf],
                "partitionId": -1,
                "nodeName": host,
                "hypervisor": "cloud-hypervisor",
            },
        }

    @staticmethod
    def _network(guest: JSON, slot: int) -> dict[str, Any]:
        ip = f"10.77.{slot // 250}.{slot % 250 + 2}"
        interfaces: list[dict[str, Any]] = []
        for i, iface in enumerate(
            (guest.get("spec") or {}).get("interfaces") or [{"name": "eth0"}]
        ):
            entry = {
                "name": iface.get("name", f"eth{i}"),
                "mac": f"52:54:00:00:{slot % 256:02x}:{i:02x}",
            }
            if i == 0 or iface.get("primary"):
                entry["ip"] = ip
            interfaces.append(entry)
        return {"primaryIP": ip, "interface": "eth0", "ready": True, "interfaces": interfaces}

    async def _write(self, guest: JSON, status: dict[str, Any]) -> None:
        current = guest.get("status") or {}
        unchanged = all(
            current.get(k) == v for k, v in status.items() if k != "conditions"
        ) and same_conditions(current.get("conditions") or [], status.get("conditions") or [])
        if unchanged:
            return
        meta = guest["metadata"]
        await self.api.patch(
            KINDS["SwiftGuest"], meta["namespace"], meta["name"], {"status": status}, status=True
        )

    async def _release(self, guest: JSON) -> None:
        meta = guest["metadata"]
        async with self._ledger:
            await gpu_ledger.release(self.api, str(meta["uid"]))
        self._held.discard(str(meta["uid"]))
        self._resolved.discard(str(meta["uid"]))
        finalizers = list(meta.get("finalizers") or [])
        if GPU_FINALIZER in finalizers:
            patch = {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "finalizers": [f for f in finalizers if f != GPU_FINALIZER],
                }
            }
            await self.api.patch(KINDS["SwiftGuest"], meta["namespace"], meta["name"], patch)
