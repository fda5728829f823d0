"""Webhook certificates: make a CA and a serving certificate, and plan their rotation.

Why this module exists: the apiserver only calls a webhook over TLS it can verify, so in the
self-managed mode the operator is its own tiny CA. Everything here is pure (no I/O, no clock:
``now`` is a parameter): creating keys and certificates is computation, and "what should happen
to the stored certificates at time t?" is a decision that deserves table tests. The shell that
reads and writes the Secret and patches ``caBundle`` lives in ``webhook.certstore``.

Rotation model (see docs/upgrading.md):

* the serving certificate is renewed when less than ``RENEW_FRACTION`` of its lifetime is left,
  signed by the same CA, so the ``caBundle`` the apiserver holds stays valid;
* the CA is renewed the same way, in two phases: first a new CA is added to the trust bundle
  (old and new both trusted) while the old serving certificate keeps being served; once the
  bundle has had ``propagation`` time to reach the apiserver, the serving certificate is
  re-issued by the new CA; the old CA leaves the bundle when it expires.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

RENEW_FRACTION = 1 / 3
"""Renew a certificate once less than this share of its lifetime remains."""
BACKDATE = dt.timedelta(minutes=5)
"""notBefore is set up to this far in the past, for clocks slightly behind ours."""

TLS_CRT, TLS_KEY, CA_CRT, CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"
"""Secret keys: the usual kubernetes.io/tls shape plus the CA trust bundle and the CA key."""


@dataclass(frozen=True)
class CertPolicy:
    """Lifetimes and timing of the self-managed certificates."""

    serving_lifetime: dt.timedelta = dt.timedelta(days=365)
    ca_lifetime: dt.timedelta = dt.timedelta(days=3650)
    propagation: dt.timedelta = dt.timedelta(minutes=2)
    """How long a new CA sits in the bundle before it signs the serving certificate."""


CN_MAX_CHARS = 64
"""RFC 5280's upper bound on a commonName (``cryptography`` refuses a longer one)."""


@dataclass(frozen=True)
class Names:
    """Who the serving certificate is for: DNS names and IP addresses (SANs)."""

    dns: tuple[str, ...]
    ips: tuple[str, ...] = ()

    @property
    def common_name(self) -> str:
        """The first DNS name (the Service's in-cluster name), cut to X.509's 64-character
        limit on a CN (a 48-character Service in a 63-character namespace is longer; clients
        verify the SANs, which keep the full names)."""
        name = self.dns[0] if self.dns else (self.ips[0] if self.ips else "gpucellpool-webhook")
        return name[:CN_MAX_CHARS]


def service_names(
    service: str, namespace: str, extra_dns: Sequence[str] = (), extra_ips: Sequence[str] = ()
) -> Names:
    """SANs for a webhook Service: ``<svc>.<ns>.svc`` and ``.svc.cluster.local`` plus extras."""
    dns = (f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local", *extra_dns)
    return Names(dns=tuple(dict.fromkeys(dns)), ips=tuple(dict.fromkeys(extra_ips)))


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM (PKCS#8) private key."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        """The parsed certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class StoredCerts:
    """What the Secret holds: serving pair, signing CA pair, and the trust bundle (PEM)."""

    serving: KeyPair
    ca: KeyPair
    bundle: bytes = field(default=b"")

    def as_secret_data(self) -> dict[str, bytes]:
        """The Secret's data (raw bytes; the adapter base64-encodes)."""
        return {
            TLS_CRT: self.serving.cert_pem,
            TLS_KEY: self.serving.key_pem,
            CA_CRT: self.bundle or self.ca.cert_pem,
            CA_KEY: self.ca.key_pem,
        }


def from_secret_data(data: dict[str, bytes] | None) -> StoredCerts | None:
    """Parse a Secret's data; None when any key is missing or unparsable (then: start over)."""
    if not data or any(not data.get(k) for k in (TLS_CRT, TLS_KEY, CA_CRT, CA_KEY)):
        return None
    try:
        serving = KeyPair(data[TLS_CRT], data[TLS_KEY])
        serving.cert  # noqa: B018 - parse check
        serialization.load_pem_private_key(serving.key_pem, password=None)
        ca_key = serialization.load_pem_private_key(data[CA_KEY], password=None)
        signer = _newest(bundle_certs(data[CA_CRT]))
    except ValueError:
        return None
    if signer.public_key() != ca_key.public_key():
        return None  # the key cannot sign for the newest CA: start over
    return StoredCerts(serving, KeyPair(_pem(signer), data[CA_KEY]), data[CA_CRT])


def bundle_certs(bundle: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle, in order."""
    return x509.load_pem_x509_certificates(bundle)


def _newest(certs: Sequence[x509.Certificate]) -> x509.Certificate:
    return max(certs, key=lambda c: c.not_valid_before_utc)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def backdate(lifetime: dt.timedelta) -> dt.timedelta:
    """How far notBefore is moved back: ``BACKDATE``, but at most a tenth of the lifetime."""
    return min(BACKDATE, lifetime / 10)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def new_ca(common_name: str, now: dt.datetime, lifetime: dt.timedelta) -> KeyPair:
    """A self-signed CA (ECDSA P-256) valid from just before ``now`` for ``lifetime``."""
    key = ec.generate_private_key(ec.SECP256R1())
    start = now - backdate(lifetime)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(_pem(cert), _key_pem(key))


def new_serving(ca: KeyPair, names: Names, now: dt.datetime, lifetime: dt.timedelta) -> KeyPair:
    """A serving certificate for ``names`` signed by ``ca``; never outlives the CA."""
    ca_cert = ca.cert
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    start = now - backdate(lifetime)
    end = min(start + lifetime, ca_cert.not_valid_after_utc)
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in names.dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in names.ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names.common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(_pem(cert), _key_pem(key))


def needs_renewal(
    cert: x509.Certificate, now: dt.datetime, fraction: float = RENEW_FRACTION
) -> bool:
    """True when less than ``fraction`` of the certificate's lifetime remains at ``now``."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return end - now < (end - start) * fraction


def cert_names(cert: x509.Certificate) -> Names:
    """The SANs a certificate carries."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return Names(dns=())
    return Names(
        dns=tuple(ext.get_values_for_type(x509.DNSName)),
        ips=tuple(str(ip) for ip in ext.get_values_for_type(x509.IPAddress)),
    )


class Action(Enum):
    """What the self-managed mode must do to the stored certificates."""

    NONE = "none"
    CREATE = "create"
    ROTATE_SERVING = "rotate-serving"
    ADD_CA = "add-ca"
    PRUNE_BUNDLE = "prune-bundle"


@dataclass(frozen=True)
class Plan:
    """One action and why (the why goes to the log)."""

    action: Action
    reason: str


def plan(stored: StoredCerts | None, names: Names, now: dt.datetime, policy: CertPolicy) -> Plan:
    """Decide the next step for the stored certificates at ``now`` (one step per call)."""
    if stored is None:
        return Plan(Action.CREATE, "no usable certificates stored")
    ca, serving = stored.ca.cert, stored.serving.cert
    ca_age = now - ca.not_valid_before_utc
    ca_settled = ca_age >= policy.propagation + backdate(policy.ca_lifetime)
    have = cert_names(serving)
    checks: tuple[tuple[bool, Action, str], ...] = (
        (ca.not_valid_after_utc <= now, Action.CREATE, "the CA has expired; replace the bundle"),
        (needs_renewal(ca, now), Action.ADD_CA, "less than 1/3 of the CA's lifetime remains"),
        (
            ca_settled and not _signed_by(serving, ca),
            Action.ROTATE_SERVING,
            "a new CA is trusted; re-issue the serving certificate with it",
        ),
        (
            needs_renewal(serving, now),
            Action.ROTATE_SERVING,
            "less than 1/3 of the serving certificate's lifetime remains",
        ),
        (
            set(have.dns) != set(names.dns) or set(have.ips) != set(names.ips),
            Action.ROTATE_SERVING,
            "the serving certificate's names changed",
        ),
        (
            any(c.not_valid_after_utc <= now for c in bundle_certs(stored.bundle)),
            Action.PRUNE_BUNDLE,
            "an expired CA is still in the bundle",
        ),
    )
    for due, action, reason in checks:
        if due:
            return Plan(action, reason)
    return Plan(Action.NONE, "certificates are valid")


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def execute(
    step: Plan, stored: StoredCerts | None, names: Names, now: dt.datetime, policy: CertPolicy
) -> StoredCerts | None:
    """Carry out one planned step; None when there is nothing to change."""
    if step.action is Action.NONE:
        return None
    if step.action is Action.CREATE or stored is None:
        ca = new_ca(f"gpucellpool-webhook-ca@{int(now.timestamp())}", now, policy.ca_lifetime)
        return StoredCerts(new_serving(ca, names, now, policy.serving_lifetime), ca, ca.cert_pem)
    if step.action is Action.ADD_CA:
        ca = new_ca(f"gpucellpool-webhook-ca@{int(now.timestamp())}", now, policy.ca_lifetime)
        return StoredCerts(stored.serving, ca, ca.cert_pem + _live_bundle(stored.bundle, now))
    if step.action is Action.ROTATE_SERVING:
        serving = new_serving(stored.ca, names, now, policy.serving_lifetime)
        return StoredCerts(serving, stored.ca, stored.bundle)
    return StoredCerts(stored.serving, stored.ca, _live_bundle(stored.bundle, now))


def _live_bundle(bundle: bytes, now: dt.datetime) -> bytes:
    return b"".join(_pem(c) for c in bundle_certs(bundle) if c.not_valid_after_utc > now)


def renew_at(cert: x509.Certificate, fraction: float = RENEW_FRACTION) -> dt.datetime:
    """The moment ``needs_renewal`` turns true for ``cert``."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return end - (end - start) * fraction


def next_due(stored: StoredCerts, policy: CertPolicy, now: dt.datetime) -> dt.datetime | None:
    """The next moment ``plan`` may want something other than NONE (None: nothing ahead)."""
    ca, serving = stored.ca.cert, stored.serving.cert
    points = [renew_at(serving), renew_at(ca)]
    points += [c.not_valid_after_utc for c in bundle_certs(stored.bundle)]
    if not _signed_by(serving, ca):
        points.append(ca.not_valid_before_utc + policy.propagation + backdate(policy.ca_lifetime))
    ahead = [p for p in points if p > now]
    return min(ahead) if ahead else None
