"""The self-managed certificate shell against in-memory ports and a virtual clock.

Checks the I/O choreography the pure plan cannot: what is written to the Secret and when,
that the caBundle is (re)patched when it differs (GitOps blanked it), that a lost write race
adopts the winner's certificate, and that the server's TLS context follows every rotation.
"""

from __future__ import annotations

import datetime as dt

import pytest

from webhook import certs
from webhook.certstore import Conflict, SelfManagedCerts
from webhook.tls import ServingTLS

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
POLICY = certs.CertPolicy(serving_lifetime=dt.timedelta(hours=3), ca_lifetime=dt.timedelta(days=30))
NAMES = certs.service_names("wh", "ops", extra_ips=("127.0.0.1",))


class MemorySecret:
    def __init__(self) -> None:
        self.data: dict[str, bytes] | None = None
        self.version = 0
        self.writes = 0
        self.steal_next_write: dict[str, bytes] | None = None

    async def read(self) -> tuple[dict[str, bytes], str] | None:
        return None if self.data is None else (dict(self.data), str(self.version))

    async def write(self, data: dict[str, bytes], resource_version: str | None) -> None:
        if self.steal_next_write is not None:  # another replica wins the race
            self.data, self.steal_next_write = self.steal_next_write, None
            self.version += 1
            raise Conflict("409")
        expected = None if self.data is None else str(self.version)
        if resource_version != expected:
            raise Conflict("409")
        self.data, self.version, self.writes = dict(data), self.version + 1, self.writes + 1


class MemoryWebhookConfig:
    def __init__(self, entries: int = 2) -> None:
        self.bundles: list[bytes] | None = [b""] * entries
        self.patches = 0

    async def ca_bundles(self) -> list[bytes] | None:
        return None if self.bundles is None else list(self.bundles)

    async def set_ca_bundle(self, bundle: bytes) -> None:
        assert self.bundles is not None
        self.bundles = [bundle] * len(self.bundles)
        self.patches += 1


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def build() -> tuple[SelfManagedCerts, MemorySecret, MemoryWebhookConfig, Clock]:
    secret, config, clock = MemorySecret(), MemoryWebhookConfig(), Clock()
    manager = SelfManagedCerts(secret, config, ServingTLS(), NAMES, POLICY, clock, max_sleep=600)
    return manager, secret, config, clock


async def test_first_pass_creates_secret_patches_bundle_and_serves() -> None:
    manager, secret, config, _ = build()
    stored = await manager.reconcile()
    assert secret.writes == 1 and config.bundles == [stored.bundle] * 2
    assert manager.tls.ready and manager.rotations == 1
    await manager.reconcile()
    assert (secret.writes, config.patches, manager.rotations) == (1, 1, 1), "idempotent"


async def test_rotation_keeps_the_bundle_and_reloads_tls() -> None:
    manager, secret, config, clock = build()
    first = await manager.reconcile()
    wait = manager.seconds_until_next()
    assert wait == 600, "max_sleep caps the wait (GitOps repair)"
    clock.now = certs.renew_at(first.serving.cert) + dt.timedelta(seconds=1)
    second = await manager.reconcile()
    assert second.serving != first.serving and second.bundle == first.bundle
    assert config.patches == 1, "the caBundle did not change, so it is not patched"
    assert manager.rotations == 2 and secret.writes == 2


async def test_blanked_ca_bundle_is_repaired() -> None:
    manager, _, config, _ = build()
    stored = await manager.reconcile()
    config.bundles = [b"", stored.bundle]
    await manager.reconcile()
    assert config.bundles == [stored.bundle] * 2 and config.patches == 2


async def test_missing_webhook_configuration_is_not_fatal() -> None:
    manager, secret, config, _ = build()
    config.bundles = None
    await manager.reconcile()
    assert secret.writes == 1 and manager.tls.ready


async def test_lost_race_adopts_the_other_replicas_certificate() -> None:
    manager, secret, _, clock = build()
    other, _, _, _ = build()
    winner = await other.reconcile()  # another replica's certificates
    secret.steal_next_write = winner.as_secret_data()
    adopted = await manager.reconcile()
    assert adopted == winner and secret.writes == 0
    assert clock.now == T0


async def test_existing_valid_secret_is_used_as_is() -> None:
    manager, secret, _, _ = build()
    seeded = certs.execute(certs.plan(None, NAMES, T0, POLICY), None, NAMES, T0, POLICY)
    assert seeded is not None
    secret.data, secret.version = seeded.as_secret_data(), 7
    assert await manager.reconcile() == seeded
    assert secret.writes == 0


async def test_start_fails_loudly_when_the_store_is_down() -> None:
    manager, secret, _, _ = build()

    async def broken() -> None:
        raise OSError("apiserver unreachable")

    secret.read = broken  # type: ignore[method-assign]
    with pytest.raises(OSError):
        await manager.start()
