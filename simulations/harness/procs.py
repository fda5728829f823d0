"""Child processes that cannot outlive the test run, plus free ports and condition polling.

Every server the harness starts runs in its own session (process group), so stopping it kills
the whole group, and is wrapped in `setpriv --pdeathsig KILL` when available, so even a
SIGKILLed pytest leaves no etcd or kube-apiserver behind. `stop()` always waits for the exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")


class HarnessTimeout(TimeoutError):
    """A polled condition did not hold before its deadline."""


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    max_interval: float = 0.5,
) -> T:
    """Poll `condition` until it returns a truthy value; raise HarnessTimeout at the deadline."""
    deadline = time.monotonic() + timeout
    delay = interval
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise HarnessTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(delay)  # polling back-off, not synchronisation
        delay = min(delay * 1.5, max_interval)


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:`port` (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _pdeathsig_prefix() -> list[str]:
    # Only from the main thread: PDEATHSIG fires when the spawning *thread* exits.
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


class ManagedProcess:
    """One long-running server process with its output in a log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = log_path.open("wb")
        try:
            self._proc = subprocess.Popen(
                [*_pdeathsig_prefix(), *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        except OSError:
            self._log.close()
            raise
        self.pid = self._proc.pid

    def running(self) -> bool:
        """True until the process has exited."""
        return self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the process output, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace` seconds, and reap it."""
        if self.running():
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=grace)
        self._signal_group(signal.SIGKILL)  # stragglers in the group, if any
        self._proc.wait()
        self._log.close()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
