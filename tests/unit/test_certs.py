"""The pure certificate planning: when to create, renew, add a CA and prune, at time t.

Each test builds real certificates (ECDSA, fast) at a fixed ``now`` and asks ``plan`` what is
due at later instants, so the rotation schedule is checked without a clock or a cluster.
"""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from webhook import certs
from webhook.certs import Action, CertPolicy, StoredCerts

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
POLICY = CertPolicy(
    serving_lifetime=30 * DAY, ca_lifetime=300 * DAY, propagation=dt.timedelta(minutes=2)
)
NAMES = certs.service_names("gpucellpool-webhook", "ops", extra_ips=("127.0.0.1",))


def create(now: dt.datetime = T0, policy: CertPolicy = POLICY) -> StoredCerts:
    stored = certs.execute(certs.plan(None, NAMES, now, policy), None, NAMES, now, policy)
    assert stored is not None
    return stored


def step(stored: StoredCerts, now: dt.datetime) -> tuple[Action, StoredCerts]:
    planned = certs.plan(stored, NAMES, now, POLICY)
    out = certs.execute(planned, stored, NAMES, now, POLICY)
    return planned.action, out if out is not None else stored


def verifies(stored: StoredCerts, now: dt.datetime, dns: str = NAMES.dns[0]) -> bool:
    """Would a client trusting ``stored.bundle`` accept the serving certificate at ``now``?"""
    store = Store(certs.bundle_certs(stored.bundle))
    verifier = PolicyBuilder().store(store).time(now).build_server_verifier(x509.DNSName(dns))
    try:
        verifier.verify(stored.serving.cert, [])
    except x509.verification.VerificationError:
        return False
    return True


def test_names_cover_the_service_and_extras() -> None:
    names = certs.service_names("wh", "ns", extra_dns=("localhost",), extra_ips=("127.0.0.1",))
    assert names.dns == ("wh.ns.svc", "wh.ns.svc.cluster.local", "localhost")
    stored = create()
    got = certs.cert_names(stored.serving.cert)
    assert set(got.dns) == set(NAMES.dns) and got.ips == ("127.0.0.1",)
    san = stored.serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert ipaddress.ip_address("127.0.0.1") in san.value.get_values_for_type(x509.IPAddress)


def test_longest_service_and_namespace_still_get_a_certificate() -> None:
    """A 48-character Service in a 63-character namespace: the CN is cut to 64, SANs are not."""
    names = certs.service_names("s" * 48, "n" * 63)
    stored = certs.execute(certs.plan(None, names, T0, POLICY), None, names, T0, POLICY)
    assert stored is not None and len(names.common_name) == 64
    assert verifies(stored, T0, dns=f"{'s' * 48}.{'n' * 63}.svc")


def test_nothing_stored_means_create_and_the_chain_verifies() -> None:
    assert certs.plan(None, NAMES, T0, POLICY).action is Action.CREATE
    stored = create()
    assert verifies(stored, T0)
    assert certs.plan(stored, NAMES, T0, POLICY).action is Action.NONE
    assert not verifies(stored, T0, dns="other.ns.svc")


def test_serving_renewed_at_two_thirds_of_its_lifetime_with_the_same_ca() -> None:
    stored = create()
    renew_at = certs.renew_at(stored.serving.cert)
    assert certs.next_due(stored, POLICY, T0) == renew_at
    just_before = renew_at - dt.timedelta(seconds=1)
    assert certs.plan(stored, NAMES, just_before, POLICY).action is Action.NONE
    action, renewed = step(stored, renew_at + dt.timedelta(seconds=1))
    assert action is Action.ROTATE_SERVING
    assert renewed.bundle == stored.bundle and renewed.ca == stored.ca
    assert renewed.serving.cert.serial_number != stored.serving.cert.serial_number
    assert verifies(renewed, renew_at + dt.timedelta(seconds=1))


def test_serving_never_outlives_its_ca() -> None:
    short_ca = CertPolicy(serving_lifetime=365 * DAY, ca_lifetime=10 * DAY)
    stored = create(policy=short_ca)
    assert stored.serving.cert.not_valid_after_utc <= stored.ca.cert.not_valid_after_utc


def test_changed_names_reissue_the_serving_certificate() -> None:
    stored = create()
    other = certs.service_names("renamed", "ops", extra_ips=("127.0.0.1",))
    assert certs.plan(stored, other, T0, POLICY).action is Action.ROTATE_SERVING


def test_ca_rotation_is_two_phase_and_always_verifies() -> None:
    stored = create()
    t1 = certs.renew_at(stored.ca.cert) + dt.timedelta(seconds=1)
    # by then the serving cert was renewed several times; do it once at t1 - 1 day
    _, stored = step(stored, t1 - DAY)
    action, phase_a = step(stored, t1)
    assert action is Action.ADD_CA
    trusted = certs.bundle_certs(phase_a.bundle)
    assert len(trusted) == 2, "old and new CA are both trusted"
    assert phase_a.serving == stored.serving, (
        "the old serving cert is kept while the bundle spreads"
    )
    assert verifies(phase_a, t1)
    assert certs.plan(phase_a, NAMES, t1 + dt.timedelta(minutes=1), POLICY).action is Action.NONE
    settled = certs.next_due(phase_a, POLICY, t1)
    assert settled is not None and settled <= t1 + dt.timedelta(minutes=3)
    action, phase_b = step(phase_a, settled + dt.timedelta(seconds=1))
    assert action is Action.ROTATE_SERVING
    assert phase_b.serving.cert.issuer == phase_b.ca.cert.subject != stored.ca.cert.subject
    assert verifies(phase_b, settled + dt.timedelta(seconds=1))
    after_old = stored.ca.cert.not_valid_after_utc + dt.timedelta(seconds=1)
    actions, pruned = [], phase_b
    for _ in range(4):  # the serving cert is due again too by then; one step per call
        action, pruned = step(pruned, after_old)
        actions.append(action)
    assert actions == [Action.ROTATE_SERVING, Action.PRUNE_BUNDLE, Action.NONE, Action.NONE]
    assert len(certs.bundle_certs(pruned.bundle)) == 1
    assert verifies(pruned, after_old)


def test_expired_ca_starts_over() -> None:
    stored = create()
    later = stored.ca.cert.not_valid_after_utc + DAY
    assert certs.plan(stored, NAMES, later, POLICY).action is Action.CREATE


def test_secret_round_trip_and_garbage() -> None:
    stored = create()
    data = stored.as_secret_data()
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert certs.from_secret_data(data) == stored
    assert certs.from_secret_data(None) is None
    assert certs.from_secret_data({**data, "tls.key": b""}) is None
    assert certs.from_secret_data({**data, "tls.crt": b"not a pem"}) is None
    assert certs.from_secret_data({**data, "ca.key": create().ca.key_pem}) is None


@pytest.mark.parametrize("days", [0.0, 5.0, 19.0, 21.0, 29.0])
def test_needs_renewal_is_the_last_third(days: float) -> None:
    stored = create()
    cert = stored.serving.cert
    now = cert.not_valid_before_utc + dt.timedelta(days=days)
    assert certs.needs_renewal(cert, now) is (days > 20.0)


def test_short_lifetimes_are_not_backdated_into_expiry() -> None:
    brief = CertPolicy(serving_lifetime=dt.timedelta(seconds=20), ca_lifetime=300 * DAY)
    stored = create(policy=brief)
    cert = stored.serving.cert
    assert cert.not_valid_after_utc - T0 >= dt.timedelta(seconds=17)
    assert certs.plan(stored, NAMES, T0, brief).action is Action.NONE
