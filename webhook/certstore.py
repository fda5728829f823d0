"""Self-managed webhook certificates: keep the Secret, the caBundle and the server in step.

Why this module exists: in the self-managed mode nobody else issues the webhook's certificate.
At startup, and again whenever ``webhook.certs.next_due`` says a renewal point is reached (and
at least every ``max_sleep`` seconds, so a GitOps sync that blanks the caBundle is repaired),
one pass reads the Secret, applies the pure plan until nothing is due (create, renew the
serving certificate, add a new CA, prune an expired CA), writes the Secret with optimistic
concurrency (replicas racing: the loser re-reads and adopts the winner's certificate), patches
the ValidatingWebhookConfiguration's ``caBundle`` when it differs, and loads the serving pair
into the live TLS context. The outside world is behind ``SecretStore`` and ``CABundleTarget``;
``webhook.kube`` implements them through the one door (``gpucellpool.kube.rest``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from typing import Protocol

from webhook.certs import (
    Action,
    CertPolicy,
    Names,
    StoredCerts,
    execute,
    from_secret_data,
    next_due,
    plan,
)
from webhook.tls import ServingTLS

log = logging.getLogger(__name__)

MAX_STEPS = 6
"""Plan/execute rounds in one pass (a pass needs at most create or add-CA, then renewals)."""


class Conflict(RuntimeError):
    """Another writer changed the Secret since it was read (HTTP 409)."""


class SecretStore(Protocol):
    """The Secret holding the certificates."""

    async def read(self) -> tuple[dict[str, bytes], str] | None:
        """(data, resourceVersion), or None when the Secret does not exist."""
        ...

    async def write(self, data: dict[str, bytes], resource_version: str | None) -> None:
        """Create (``resource_version`` None) or replace; raises ``Conflict`` on a lost race."""
        ...


class CABundleTarget(Protocol):
    """The ValidatingWebhookConfiguration whose webhooks must trust our CA."""

    async def ca_bundles(self) -> list[bytes] | None:
        """The caBundle of each webhook entry; None when the configuration does not exist."""
        ...

    async def set_ca_bundle(self, bundle: bytes) -> None:
        """Write ``bundle`` into every webhook entry."""
        ...


def utc_now() -> dt.datetime:
    """The wall clock (UTC); certificates are about wall time."""
    return dt.datetime.now(dt.UTC)


class SelfManagedCerts:
    """The self-managed mode: one ``reconcile`` pass, or ``start`` a loop of them."""

    def __init__(
        self,
        store: SecretStore,
        target: CABundleTarget,
        tls: ServingTLS,
        names: Names,
        policy: CertPolicy | None = None,
        clock: Callable[[], dt.datetime] = utc_now,
        max_sleep: float = 60.0,
    ) -> None:
        self.store, self.target, self.tls, self.names = store, target, tls, names
        self.policy = policy or CertPolicy()
        self.clock, self.max_sleep = clock, max_sleep
        self.current: StoredCerts | None = None
        self.rotations = 0
        self._task: asyncio.Task[None] | None = None

    async def reconcile(self) -> StoredCerts:
        """Bring the Secret, the caBundle and the served certificate up to date."""
        stored = await self._settle_secret()
        bundles = await self.target.ca_bundles()
        if bundles is None:
            log.warning("ValidatingWebhookConfiguration not found; caBundle not written yet")
        elif any(b != stored.bundle for b in bundles):
            await self.target.set_ca_bundle(stored.bundle)
            log.info("webhook caBundle written (%d entries)", len(bundles))
        if self.tls.load_pair(stored.serving):
            self.rotations += 1
            log.info("serving webhook certificate %s", _describe(stored))
        self.current = stored
        return stored

    async def _settle_secret(self) -> StoredCerts:
        for _ in range(MAX_STEPS):
            found = await self.store.read()
            data, version = found if found is not None else (None, None)
            stored = from_secret_data(data)
            now = self.clock()
            step = plan(stored, self.names, now, self.policy)
            if step.action is Action.NONE and stored is not None:
                return stored
            renewed = execute(step, stored, self.names, now, self.policy)
            if renewed is None:  # pragma: no cover - NONE with stored None is CREATE
                raise RuntimeError("plan produced nothing to store")
            try:
                await self.store.write(renewed.as_secret_data(), version)
            except Conflict:
                log.info("webhook certificate Secret changed underneath; re-reading")
                continue
            log.info("webhook certificates: %s (%s)", step.action.value, step.reason)
        raise RuntimeError(f"webhook certificates did not settle in {MAX_STEPS} rounds")

    def seconds_until_next(self) -> float:
        """How long the loop may sleep before the next pass."""
        if self.current is None:
            return 1.0
        now = self.clock()
        due = next_due(self.current, self.policy, now)
        wait = self.max_sleep if due is None else (due - now).total_seconds()
        return max(0.05, min(wait, self.max_sleep))

    async def _loop(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(
                self.seconds_until_next() if failures == 0 else min(30, 2**failures)
            )
            try:
                await self.reconcile()
                failures = 0
            except Exception as exc:  # an outage must not stop rotation for good
                failures += 1
                log.warning("webhook certificate pass failed (attempt %d): %s", failures, exc)

    async def start(self) -> StoredCerts:
        """First pass now (errors propagate: no certificate, no server), then a loop."""
        stored = await self.reconcile()
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return stored

    async def stop(self) -> None:
        """Stop the loop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def _describe(stored: StoredCerts) -> str:
    cert = stored.serving.cert
    return f"serial {cert.serial_number:x}, valid until {cert.not_valid_after_utc.isoformat()}"
