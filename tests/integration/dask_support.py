"""A real Dask distributed cluster on loopback for tests: one ``dask scheduler`` and N
``dask worker`` processes, torn down (process groups killed) whatever the test did.

Why this module exists: "results identical on a Dask cluster" is only worth claiming against
the real scheduler and worker processes a user starts, over real TCP, not an in-process
LocalCluster. Without the ``dask`` CLI the test is skipped, or fails when ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.binary_support import unavailable

START_TIMEOUT_SECONDS = 60.0


def dask_cli() -> str:
    """The ``dask`` command of this venv (distributed ships it)."""
    found = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
    if found is None:
        unavailable("the dask CLI is missing: pip install 'gpucellpool[dask]'")
    return found


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it if it lingers; always reaped."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    else:
        with contextlib.suppress(ProcessLookupError):  # the leader is gone; its group may not be
            os.killpg(proc.pid, signal.SIGKILL)


def _spawn(stack: ExitStack, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = stack.enter_context(log.open("wb"))
    env = {**os.environ, "DASK_TEMPORARY_DIRECTORY": str(log.parent)}  # not the shared /tmp
    proc = subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    stack.callback(stop, proc)
    return proc


def _address(scheduler_file: Path, proc: subprocess.Popen[bytes], log: Path) -> str:
    """The scheduler's address once it has written its file (it binds a free port: --port 0)."""
    import json  # noqa: PLC0415

    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"dask scheduler exited {proc.returncode}: {log.read_text()[-2000:]}"
            )
        if scheduler_file.exists():
            try:
                return str(json.loads(scheduler_file.read_text())["address"])
            except (ValueError, KeyError):
                pass  # written but not yet complete
        time.sleep(0.1)  # polling a file the scheduler writes, with a deadline
    raise RuntimeError(f"dask scheduler wrote no address in {START_TIMEOUT_SECONDS:.0f} s")


@dataclass
class DaskProcesses:
    address: str
    client: Any  # a connected distributed.Client
    processes: list[subprocess.Popen[bytes]]


@contextmanager
def dask_cluster(folder: Path, workers: int = 2) -> Iterator[DaskProcesses]:
    """A scheduler and ``workers`` registered workers; every process is stopped on exit, also
    on failure."""
    from distributed import Client  # noqa: PLC0415

    dask = dask_cli()
    scheduler_file = folder / "scheduler.json"
    with ExitStack() as stack:
        argv = [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
        argv += ["--scheduler-file", str(scheduler_file)]
        scheduler = _spawn(stack, argv, folder / "scheduler.log")
        processes = [scheduler]
        address = _address(scheduler_file, scheduler, folder / "scheduler.log")
        for i in range(workers):
            argv = [dask, "worker", address, "--host", "127.0.0.1", "--nthreads", "1"]
            argv += ["--no-dashboard", "--no-nanny", "--name", f"w{i}"]
            processes.append(_spawn(stack, argv, folder / f"worker{i}.log"))
        client = Client(address, timeout=START_TIMEOUT_SECONDS, set_as_default=False)
        stack.callback(client.close)
        client.wait_for_workers(workers, timeout=START_TIMEOUT_SECONDS)
        yield DaskProcesses(address, client, processes)
