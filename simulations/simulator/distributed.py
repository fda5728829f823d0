"""Where a batch of independent simulations runs: in this process, in local processes, or on a
Dask distributed cluster.

Why this module exists: ``simulate --jobs``, ``sweep`` and their ``--scheduler`` flag all hand
out the same kind of work (pure, deterministic calls of module-level functions) and must get
the same answers wherever it runs; one small interface keeps the choice of engine out of them.
Every call is deterministic for its arguments (the seed is in the config), so the results do
not depend on the executor, the worker count or the order the workers finish in: ``run``
returns them in the order of the calls.

Dask is an optional extra (``gpucellpool[dask]``); it is imported only when a scheduler address
is given, and a missing install or an unreachable scheduler is a ``ClusterUnavailable`` with a
one-line message.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

SCHEDULER_ADDRESS = re.compile(r"^tcp://[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")
CONNECT_TIMEOUT_SECONDS = 20.0


class ClusterUnavailable(RuntimeError):
    """Dask is not installed, or its scheduler cannot be reached or was lost during a run."""


class Executor(Protocol):
    """Runs ``fn(*args)`` for every ``args`` of ``calls``; results in the order of ``calls``."""

    name: str

    def share(self, value: object) -> object:
        """A handle to pass in ``calls`` instead of ``value`` when many calls use it (Dask
        sends it to the workers once; local executors return ``value`` itself)."""
        ...

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple[object, ...]]) -> list[Any]: ...


class InProcess:
    """One call after the other in this process (``--jobs 1``)."""

    name = "in-process"

    def share(self, value: object) -> object:
        return value

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple[object, ...]]) -> list[Any]:
        return [fn(*args) for args in calls]


@dataclass(frozen=True, slots=True)
class _Shared:
    """A value ``LocalProcesses`` gave each worker once, named in a call instead of the value."""

    key: int


_WORKER_SHARED: dict[int, object] = {}  # in a worker process: what ``share`` registered


def _receive(shared: dict[int, object]) -> None:
    _WORKER_SHARED.update(shared)


def _call(fn: Callable[..., Any], args: tuple[object, ...]) -> Any:
    return fn(*(_WORKER_SHARED[a.key] if isinstance(a, _Shared) else a for a in args))


class LocalProcesses:
    """``jobs`` worker processes on this machine (``--jobs N``); a shared value (a trace
    window) goes to each worker once when the pool starts, not with every call."""

    def __init__(self, jobs: int) -> None:
        self._jobs = jobs
        self._shared: dict[int, object] = {}
        self.name = f"{jobs} local processes"

    def share(self, value: object) -> object:
        key = len(self._shared)
        self._shared[key] = value
        return _Shared(key)

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple[object, ...]]) -> list[Any]:
        with ProcessPoolExecutor(
            self._jobs, initializer=_receive, initargs=(self._shared,)
        ) as pool:
            futures = [pool.submit(_call, fn, args) for args in calls]
            return [f.result() for f in futures]


class DaskCluster:
    """The workers of a Dask distributed scheduler (``--scheduler tcp://host:port``)."""

    def __init__(self, client: Any, address: str) -> None:
        self._client = client
        self._address = address
        self.name = f"dask scheduler {address}"

    def share(self, value: object) -> object:
        # One key for the whole value: scattering a tuple of pods itself would make one key
        # per pod (thousands per trace window, every one tracked by the scheduler).
        # hash=False: two equal traces are still two uploads, never a cross-run cache hit.
        [future] = self._client.scatter([value], broadcast=True, hash=False)
        return future

    def run(self, fn: Callable[..., Any], calls: Sequence[tuple[object, ...]]) -> list[Any]:
        # pure=False: every call runs (no result reuse keyed on argument hashes)
        futures = [self._client.submit(fn, *args, pure=False) for args in calls]
        try:
            return list(self._client.gather(futures))
        except CancelledError as error:  # the client cancels every future when it loses the
            # scheduler; a run's own exception is re-raised by gather as it is, not caught here
            done = sum(f.status == "finished" for f in futures)
            raise ClusterUnavailable(
                f"lost the Dask scheduler at {self._address} with {done} of {len(futures)} "
                f"runs finished: {error}".splitlines()[0]
            ) from error


def scheduler_address(text: str) -> str:
    """argparse type: ``tcp://host:port``, refused at parse time with a one-line error."""
    if not SCHEDULER_ADDRESS.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a scheduler address like tcp://127.0.0.1:8786"
        )
    port = int(text.rsplit(":", 1)[1])
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: port {port} is out of range")
    return text


def _dask_client(address: str, timeout_seconds: float) -> Any:
    try:
        from distributed import Client  # noqa: PLC0415 (optional extra)
    except ImportError as error:
        raise ClusterUnavailable(
            "--scheduler needs Dask: pip install 'gpucellpool[dask]'"
        ) from error
    try:
        return Client(address, timeout=timeout_seconds, set_as_default=False)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as error:
        raise ClusterUnavailable(
            f"cannot reach the Dask scheduler at {address}: {error}".splitlines()[0]
        ) from error


@contextmanager
def executor(
    jobs: int = 1,
    scheduler: str | None = None,
    connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS,
) -> Iterator[Executor]:
    """The executor the flags ask for: the Dask cluster when ``scheduler`` is given, else
    ``jobs`` local processes (this process alone when ``jobs`` is 1)."""
    if scheduler is not None:
        client = _dask_client(scheduler, connect_timeout_seconds)
        try:
            yield DaskCluster(client, scheduler)
        finally:
            client.close()
    elif jobs > 1:
        yield LocalProcesses(jobs)
    else:
        yield InProcess()
