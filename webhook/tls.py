"""The server's TLS context, and hot reload of its certificate without dropping requests.

Why this module exists: certificates rotate (self-managed renewal, cert-manager re-issuing the
mounted Secret) while the apiserver keeps calling. The listening socket keeps one
``ssl.SSLContext`` for its whole life; a rotation calls ``load_cert_chain`` on that live
context. OpenSSL copies the certificate into each connection when its handshake starts, so
established connections finish with the old certificate and every new handshake gets the new
one; the load runs on the event-loop thread, so no handshake sees half a swap. A new pair is
first loaded into a scratch context: a broken or mismatched pair is refused and the old
certificate keeps serving.

Two sources: ``ServingTLS.load_pair`` (in-memory PEM from the self-managed mode) and
``FileWatcher`` (cert-manager or any mounted Secret: re-read when the file contents change;
kubelet swaps the whole directory atomically through the ``..data`` symlink).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

from webhook.certs import KeyPair

log = logging.getLogger(__name__)


class CertificateError(ValueError):
    """A certificate/key pair could not be loaded (the previous one stays in service)."""


def _server_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class ServingTLS:
    """One live server-side SSLContext whose certificate can be replaced in place."""

    def __init__(self) -> None:
        self.context = _server_context()
        self.fingerprint = ""
        self.loads = 0

    @property
    def ready(self) -> bool:
        """True once a certificate has been loaded."""
        return bool(self.fingerprint)

    def load_pair(self, pair: KeyPair) -> bool:
        """Serve ``pair`` from now on; False when it is already served, raises when invalid."""
        fingerprint = hashlib.sha256(pair.cert_pem + pair.key_pem).hexdigest()
        if fingerprint == self.fingerprint:
            return False
        with tempfile.TemporaryDirectory(prefix="gpucellpool-tls-") as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(pair.key_pem)
            cert.write_bytes(pair.cert_pem)
            self._load_files(cert, key)
        self.fingerprint = fingerprint
        self.loads += 1
        return True

    def load_files(self, cert: Path, key: Path) -> bool:
        """Serve the PEM files at ``cert``/``key``; False when unchanged, raises when invalid."""
        try:
            pair = KeyPair(cert.read_bytes(), key.read_bytes())
        except OSError as exc:
            raise CertificateError(f"cannot read {cert} / {key}: {exc}") from exc
        return self.load_pair(pair)

    def _load_files(self, cert: Path, key: Path) -> None:
        try:
            _server_context().load_cert_chain(cert, key)  # validate before touching the live one
        except (ssl.SSLError, OSError) as exc:
            raise CertificateError(f"certificate and key do not load together: {exc}") from exc
        self.context.load_cert_chain(cert, key)


class FileWatcher:
    """Reload a mounted certificate when its files change (cert-manager mode)."""

    def __init__(
        self,
        tls: ServingTLS,
        cert: Path,
        key: Path,
        interval: float = 10.0,
        on_reload: Callable[[], None] | None = None,
    ) -> None:
        self.tls, self.cert, self.key, self.interval = tls, cert, key, interval
        self.on_reload = on_reload
        self._task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """Load the files if their contents changed; True when a new certificate is served."""
        try:
            changed = self.tls.load_files(self.cert, self.key)
        except CertificateError as exc:
            log.warning("webhook certificate not reloaded, the previous one stays: %s", exc)
            return False
        if changed:
            log.info("webhook certificate loaded from %s", self.cert)
            if self.on_reload is not None:
                self.on_reload()
        return changed

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()

    def start(self) -> None:
        """Start polling (the first load must already have happened)."""
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
