"""cert-manager mode: a mounted certificate is served and re-read when kubelet swaps it.

kubelet updates a Secret volume by writing a new timestamped directory and flipping the
``..data`` symlink; the files the server opens are symlinks through it. The test does the
same on a temporary directory and checks what a fresh TLS handshake is served.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from gpucellpool.kube.access import Access
from gpucellpool.kube.rest import RestClient
from gpucellpool.kube.transport import Connection
from webhook import certs
from webhook.runtime import WebhookOptions, start_webhook
from webhook.tls import FileWatcher, ServingTLS

NAMES = certs.service_names("wh", "ops", extra_ips=("127.0.0.1",))


def issue() -> certs.StoredCerts:
    now = dt.datetime.now(dt.UTC)
    policy = certs.CertPolicy()
    stored = certs.execute(certs.plan(None, NAMES, now, policy), None, NAMES, now, policy)
    assert stored is not None
    return stored


def project(mount: Path, pair: certs.KeyPair, generation: int) -> None:
    """Write a Secret volume the way kubelet does (atomic ``..data`` symlink swap)."""
    target = mount / f"..{generation}"
    target.mkdir()
    (target / "tls.crt").write_bytes(pair.cert_pem)
    (target / "tls.key").write_bytes(pair.key_pem)
    tmp_link = mount / "..data_tmp"
    tmp_link.symlink_to(target.name)
    os.replace(tmp_link, mount / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (mount / name).is_symlink():
            (mount / name).symlink_to(f"..data/{name}")


async def served_serial(port: int, bundle: bytes) -> int:
    ctx = ssl.create_default_context(cadata=bundle.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_watcher_reloads_only_on_change_and_keeps_serving_on_a_bad_pair(tmp_path: Path) -> None:
    first, second = issue(), issue()
    project(tmp_path, first.serving, 1)
    tls, reloads = ServingTLS(), []
    watcher = FileWatcher(tls, tmp_path / "tls.crt", tmp_path / "tls.key",
                          on_reload=lambda: reloads.append(1))  # fmt: skip
    assert watcher.check() is True and watcher.check() is False
    project(tmp_path, certs.KeyPair(second.serving.cert_pem, first.serving.key_pem), 2)
    assert watcher.check() is False, "a mismatched pair is not loaded"
    fingerprint = tls.fingerprint
    project(tmp_path, second.serving, 3)
    assert watcher.check() is True and tls.fingerprint != fingerprint
    assert len(reloads) == 2


async def test_cert_manager_mode_serves_the_mount_and_follows_rotation(tmp_path: Path) -> None:
    stored = issue()
    project(tmp_path, stored.serving, 1)
    options = WebhookOptions(mode="cert-manager", cert_dir=tmp_path, host="127.0.0.1", port=0)
    api = RestClient(Connection(Access("http://localhost")))
    running = await start_webhook(api, options)
    try:
        port = running.server.port
        assert await served_serial(port, stored.bundle) == stored.serving.cert.serial_number
        renewed = certs.new_serving(stored.ca, NAMES, dt.datetime.now(dt.UTC), dt.timedelta(days=1))
        project(tmp_path, renewed, 2)
        assert isinstance(running.certificates, FileWatcher)
        assert running.certificates.check() is True
        assert await served_serial(port, stored.bundle) == renewed.cert.serial_number
    finally:
        await running.stop()
        await api.close()


async def test_cert_manager_mode_without_a_certificate_refuses_to_start(tmp_path: Path) -> None:
    api = RestClient(Connection(Access("http://localhost")))
    try:
        options = WebhookOptions(mode="cert-manager", cert_dir=tmp_path, port=0)
        with pytest.raises(RuntimeError, match="no usable certificate"):
            await start_webhook(api, options)
    finally:
        await api.close()
