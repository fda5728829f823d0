"""Two real ``gpucellpool run`` processes (the console script) sharing one Lease.

What this proves, with the binary a Deployment runs: both processes become ready (caches
synced, leadership known) and exactly one holds the Lease; ``kill -9`` of the holder hands the
Lease to the other within the lease duration plus a retry (timed on the Lease's own renewTime
and acquireTime, not on when this test noticed); SIGTERM of a holder releases the
Lease (the other takes over at its next retry) and the process exits 0; log lines are JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from provisioner.fsm.observations import parse_time_s
from simulations.harness import ClusterEndpoint
from tests.integration.test_loop_helpers import read_lease

LEASE_S, RETRY_S = 4, 0.5
SCHEDULING_SLACK_S = 2.0
"""Latency the standby process's rounds may add on a loaded machine; the takeover bound stays
below two leases, so waiting a lease twice (or a default 15 s lease) fails."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(
    infra: ClusterEndpoint,
    namespace: str,
    identity: str,
    port: int,
    log: Path,
    extra: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """``gpucellpool run`` with this test's short Lease periods, and ``extra`` flags."""
    exe = Path(sys.executable).with_name("gpucellpool")
    args = [
        str(exe), "run",
        "--kubeconfig", str(infra.kubeconfig_path),
        "--identity", identity,
        "--lease-namespace", namespace,
        "--namespace", namespace,
        "--lease-duration", str(LEASE_S), "--renew-deadline", "2", "--retry-period", str(RETRY_S),
        "--health-host", "127.0.0.1", "--health-port", str(port), *extra,
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=os.environ)


async def lease_spec(infra: ClusterEndpoint, namespace: str) -> dict[str, Any]:
    return dict(((await read_lease(infra, namespace)) or {}).get("spec") or {})


async def holder(infra: ClusterEndpoint, namespace: str) -> str:
    return str((await lease_spec(infra, namespace)).get("holderIdentity") or "")


def spec_time(spec: dict[str, Any], field: str) -> float:
    seconds = parse_time_s(spec.get(field))
    assert seconds is not None, (field, spec)
    return seconds


async def wait_for(check, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)  # polling with a deadline


async def test_two_processes_one_leader_and_failover(
    infra: ClusterEndpoint, namespace: str, tmp_path: Path
) -> None:
    ports = {"p1": free_port(), "p2": free_port()}
    procs = {n: spawn(infra, namespace, n, ports[n], tmp_path / f"{n}.log") for n in ports}
    try:
        async with httpx.AsyncClient(timeout=1) as http:

            async def all_ready() -> bool:
                for port in ports.values():
                    try:
                        if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code != 200:
                            return False
                    except httpx.HTTPError:
                        return False
                return True

            await wait_for(all_ready, 60, "both processes ready")
        first = await wait_for(lambda: holder(infra, namespace), 30, "a lease holder")
        other = next(n for n in procs if n != first)
        procs[first].send_signal(signal.SIGKILL)
        procs[first].wait(10)
        # The dead holder's last renewal; the other cannot have taken over yet (it waits a lease).
        crashed = await lease_spec(infra, namespace)
        assert crashed.get("holderIdentity") == first, crashed

        async def other_holds() -> bool:
            return await holder(infra, namespace) == other

        await wait_for(other_holds, LEASE_S + 30, "failover")
        taken = await lease_spec(infra, namespace)
        takeover = spec_time(taken, "acquireTime") - spec_time(crashed, "renewTime")
        print(f"\nprocess failover after kill -9: {takeover:.2f}s after the last renewal "
              f"(lease {LEASE_S}s)")  # fmt: skip
        assert takeover >= LEASE_S / 2, takeover  # the record had to stand still for the lease
        assert takeover <= LEASE_S + 2 * RETRY_S + SCHEDULING_SLACK_S, takeover

        procs[other].send_signal(signal.SIGTERM)
        assert procs[other].wait(30) == 0
        assert await holder(infra, namespace) == "", "SIGTERM must release the Lease"
        lines = (tmp_path / f"{other}.log").read_text().splitlines()
        assert lines and all(json.loads(line)["level"] for line in lines)
        assert any("leadership changed" in json.loads(line)["msg"] for line in lines)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
