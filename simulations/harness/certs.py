"""Throw-away PKI for the test apiservers, made with the `openssl` CLI.

Each test cluster gets its own CA, a serving certificate for 127.0.0.1/localhost, an admin
client certificate in `system:masters`, and a service-account signing key. The `cryptography`
package is not a project dependency, and openssl is on every machine that can build Go, so
the CLI keeps the harness free of extra Python dependencies. Keys are EC P-256: fast to make.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class PKIError(RuntimeError):
    """openssl is missing or refused to make a key or certificate."""


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate (or public key) and its PEM private key on disk."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPKI:
    """Everything one kube-apiserver and its admin client need."""

    ca: KeyPair
    serving: KeyPair
    admin: KeyPair
    service_account: KeyPair  # cert is the public key here


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise PKIError("openssl not found on PATH; the harness needs it to make test certificates")
    proc = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise PKIError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()}")


def _ec_key(path: Path) -> Path:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )
    path.chmod(0o600)
    return path


def make_ca(directory: Path, common_name: str) -> KeyPair:
    """A self-signed CA valid for ten years."""
    key = _ec_key(directory / "ca.key")
    cert = directory / "ca.crt"
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-subj", f"/CN={common_name}",
        "-days", "3650", "-out", str(cert),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip
    return KeyPair(cert=cert, key=key)


def issue(
    ca: KeyPair,
    directory: Path,
    name: str,
    subject: str,
    *,
    sans: tuple[str, ...] = (),
) -> KeyPair:
    """A leaf certificate signed by `ca`, usable for both server and client auth."""
    key = _ec_key(directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    cert = directory / f"{name}.crt"
    ext = directory / f"{name}.ext"
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth,clientAuth",
    ]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-set_serial", str(secrets.randbits(63)), "-days", "365",
        "-extfile", str(ext), "-out", str(cert),
    )  # fmt: skip
    return KeyPair(cert=cert, key=key)


def service_account_key(directory: Path) -> KeyPair:
    """The key pair the apiserver signs and verifies service-account tokens with."""
    key = _ec_key(directory / "sa.key")
    pub = directory / "sa.pub"
    _openssl("pkey", "-in", str(key), "-pubout", "-out", str(pub))
    return KeyPair(cert=pub, key=key)


def cluster_pki(directory: Path, cluster: str, admin_user: str = "admin") -> ClusterPKI:
    """A complete, independent PKI for one test cluster in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca(directory, f"gpucellpool-test-{cluster}-ca")
    serving = issue(
        ca,
        directory,
        "apiserver",
        "/CN=kube-apiserver",
        sans=("DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default", "IP:127.0.0.1"),
    )
    admin = issue(ca, directory, "admin", f"/O=system:masters/CN={admin_user}")
    return ClusterPKI(
        ca=ca, serving=serving, admin=admin, service_account=service_account_key(directory)
    )
