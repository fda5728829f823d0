"""The operator's own kubeconfig reader and TLS transport (issue 13: the door no longer loads
kubernetes_asyncio): each credential a kubeconfig or a pod's service account can give, sent to
a local HTTPS server that checks it; each bad field named in one line, its value never."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpucellpool.kube.access import Access, from_kubeconfig, in_cluster, load
from gpucellpool.kube.errors import Forbidden, Unreachable
from gpucellpool.kube.kubeconfig import KubeconfigError
from gpucellpool.kube.rest import RestClient, client_from_kubeconfig
from gpucellpool.kube.transport import TOKEN_FILE_PERIOD_S, Credential, connect

SECRET = "s3cret-value-never-shown"


# -- certificates and a server that checks what it is sent --------------------------------------


@dataclass(frozen=True)
class Pair:
    cert: bytes
    key: bytes


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def issue(name: str, ca: Pair | None = None, dns: str = "", client: bool = False) -> Pair:
    """A CA (``ca`` None) or a leaf signed by ``ca``: a server for 127.0.0.1 (and ``dns``, when
    given: then that name only) or a client named ``name``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    signer, issuer = key, subject
    if ca is not None:
        signer = serialization.load_pem_private_key(ca.key, None)  # type: ignore[assignment]
        issuer = x509.load_pem_x509_certificate(ca.cert).subject
    builder = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
    )  # fmt: skip
    if ca is not None and client:
        usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
        builder = builder.add_extension(usage, critical=False)
    elif ca is not None:
        import ipaddress  # noqa: PLC0415

        names = [x509.DNSName(dns)] if dns else [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(signer, hashes.SHA256())
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


@dataclass
class Seen:
    authorizations: list[str] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Pki:
    ca: Pair
    server: Pair
    client: Pair
    other_ca: Pair


@pytest.fixture(scope="module")
def pki() -> Pki:
    ca = issue("test-ca")
    return Pki(ca, issue("apiserver", ca), issue("operator", ca, client=True), issue("other-ca"))


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


@asynccontextmanager
async def https(
    pki: Pki, tmp: Path, server: Pair | None = None, client_ca: bool = False
) -> AsyncIterator[tuple[str, Seen]]:
    """An HTTPS server answering ``GET /version`` (401 for a refused credential), recording the
    Authorization headers and client certificates it was sent."""
    seen = Seen()
    pair = server or pki.server
    (tmp / "srv.pem").write_bytes(pair.cert + pair.key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp / "srv.pem")
    if client_ca:
        context.load_verify_locations(cadata=pki.ca.cert.decode())
        context.verify_mode = ssl.CERT_REQUIRED

    async def version(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        seen.authorizations.append(auth)
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(x[0] for x in (peer or {}).get("subject", ()))
        seen.clients.append(str(subject.get("commonName", "")))
        if auth in seen.refuse:
            return web.json_response({"kind": "Status", "message": "Unauthorized"}, status=401)
        return web.json_response({"gitVersion": "v1.31.0"})

    app = web.Application()
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"https://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def kubeconfig(cluster: dict[str, Any], user: dict[str, Any] | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {"cluster": "c", **({"user": "u"} if user is not None else {})}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "x",
        "contexts": [{"name": "x", "context": context}],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}] if user is not None else [],
    }


async def version(rest: RestClient) -> str:
    try:
        return str((await rest.call("GET", "/version"))["gitVersion"])
    finally:
        await rest.close()


class FakeClock:
    def __init__(self, now: float) -> None:
        self.t = now

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


# -- trust and client certificates --------------------------------------------------------------


@pytest.mark.parametrize("inline", [True, False])
async def test_a_ca_and_a_client_certificate_reach_a_server_that_demands_them(
    pki: Pki, tmp_path: Path, inline: bool
) -> None:
    async with https(pki, tmp_path, client_ca=True) as (url, seen):
        if inline:
            cluster = {"server": url, "certificate-authority-data": b64(pki.ca.cert)}
            user = {"client-certificate-data": b64(pki.client.cert),
                    "client-key-data": b64(pki.client.key)}  # fmt: skip
        else:
            for name, data in (("ca.crt", pki.ca.cert), ("u.crt", pki.client.cert),
                               ("u.key", pki.client.key)):  # fmt: skip
                (tmp_path / name).write_bytes(data)
            cluster = {"server": url, "certificate-authority": "ca.crt"}
            user = {"client-certificate": "u.crt", "client-key": "u.key"}
        path = tmp_path / "config"
        path.write_text(json.dumps(kubeconfig(cluster, user)))  # JSON is YAML
        access, _ = load(str(path), {}, tmp_path, tmp_path)  # files relative to the config
        assert await version(RestClient(await connect(access))) == "v1.31.0"
    assert seen.clients == ["operator"] and seen.authorizations == [""]


async def test_a_server_signed_by_another_ca_is_unreachable_unless_verification_is_off(
    pki: Pki, tmp_path: Path
) -> None:
    async with https(pki, tmp_path) as (url, seen):
        wrong = kubeconfig({"server": url, "certificate-authority-data": b64(pki.other_ca.cert)})
        with pytest.raises(Unreachable, match="certificate verify failed"):
            await version(await client_from_kubeconfig(wrong))
        insecure = kubeconfig({"server": url, "insecure-skip-tls-verify": True})
        assert await version(await client_from_kubeconfig(insecure)) == "v1.31.0"
    assert len(seen.authorizations) == 1  # the refused handshake sent no request


async def test_tls_server_name_is_the_name_verified(pki: Pki, tmp_path: Path) -> None:
    named = issue("apiserver", pki.ca, dns="apiserver.internal")
    async with https(pki, tmp_path, server=named) as (url, _):
        cluster = {"server": url, "certificate-authority-data": b64(pki.ca.cert)}
        with pytest.raises(Unreachable, match=r"127\.0\.0\.1"):
            await version(await client_from_kubeconfig(kubeconfig(cluster)))
        cluster["tls-server-name"] = "apiserver.internal"
        assert await version(await client_from_kubeconfig(kubeconfig(cluster))) == "v1.31.0"


# -- who we are ---------------------------------------------------------------------------------


async def test_a_bearer_token_and_basic_auth_are_sent(pki: Pki, tmp_path: Path) -> None:
    async with https(pki, tmp_path) as (url, seen):
        cluster = {"server": url, "certificate-authority-data": b64(pki.ca.cert)}
        for user in ({"token": SECRET}, {"username": "ann", "password": SECRET}):
            assert await version(await client_from_kubeconfig(kubeconfig(cluster, user)))
    assert seen.authorizations == [f"Bearer {SECRET}", f"Basic {b64('ann:' + SECRET)}"]


async def test_a_token_file_is_read_again_each_minute_and_its_last_token_kept(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    clock = FakeClock(1000.0)
    doc = kubeconfig({"server": "https://h"}, {"tokenFile": str(token)})
    credential = Credential(from_kubeconfig(doc), clock)
    assert await credential.header() == ("Bearer one", "one")
    token.write_text("two")
    clock.t += TOKEN_FILE_PERIOD_S - 1
    assert await credential.header() == ("Bearer one", "one")
    clock.t += 1
    assert await credential.header() == ("Bearer two", "two")
    token.unlink()  # a rotation in progress: keep the last good token
    clock.t += TOKEN_FILE_PERIOD_S
    assert await credential.header() == ("Bearer two", "two")
    credential.expire()  # a 401 reads the file again at once
    token.write_text("three")
    assert await credential.header() == ("Bearer three", "three")


async def test_in_cluster_the_service_account_token_and_ca_reach_the_server(
    pki: Pki, tmp_path: Path
) -> None:
    account = tmp_path / "sa"
    account.mkdir()
    (account / "ca.crt").write_bytes(pki.ca.cert)
    (account / "token").write_text(SECRET + "\n")
    async with https(pki, tmp_path) as (url, seen):
        port = url.rsplit(":", 1)[1]
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
        access, source = load(None, env, tmp_path, account)
        assert source == "in-cluster service account" and access.server == url
        assert await version(RestClient(await connect(access))) == "v1.31.0"
    assert seen.authorizations == [f"Bearer {SECRET}"]
    v6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster(v6, account).server == "https://[fd00::1]:443"


PLUGIN = """#!{python}
import json, os, pathlib, sys
state = pathlib.Path(sys.argv[1])
n = int(state.read_text()) + 1 if state.exists() else 1
state.write_text(str(n))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
pathlib.Path(sys.argv[1] + ".info").write_text(json.dumps([info, os.environ.get("EXTRA")]))
if os.environ.get("FAIL"):
    print("plugin says no", file=sys.stderr)
    sys.exit(3)
status = {{"token": f"tok-{{n}}", "expirationTimestamp": "2030-01-01T00:00:00Z"}}
if len(sys.argv) > 2:
    status = {{"clientCertificateData": pathlib.Path(sys.argv[2]).read_text(),
              "clientKeyData": pathlib.Path(sys.argv[3]).read_text(),
              "expirationTimestamp": "2030-01-01T00:00:00Z"}}
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def plugin(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN.format(python=sys.executable))
    script.chmod(0o755)
    pairs = [{"name": k, "value": v} for k, v in (env or {}).items()]
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script),
                     "args": [str(tmp_path / "runs"), *args], "env": pairs,
                     "provideClusterInfo": True}}  # fmt: skip


async def test_an_exec_plugin_token_is_fetched_again_on_expiry_and_after_a_401(
    pki: Pki, tmp_path: Path
) -> None:
    clock = FakeClock(dt.datetime(2029, 12, 31, 23, 0, tzinfo=dt.UTC).timestamp())
    async with https(pki, tmp_path) as (url, seen):
        cluster = {"server": url, "certificate-authority-data": b64(pki.ca.cert)}
        doc = kubeconfig(cluster, plugin(tmp_path, env={"EXTRA": "from-kubeconfig"}))
        rest = RestClient(await connect(from_kubeconfig(doc), clock))
        await rest.call("GET", "/version")
        await rest.call("GET", "/version")  # the token is cached until it expires
        clock.t += 3600  # past 2030-01-01 minus the skew
        seen.refuse.add("Bearer tok-2")
        with pytest.raises(Forbidden):
            await rest.call("GET", "/version")
        await rest.call("GET", "/version")  # the 401 made the plugin run again
        await rest.close()
    assert seen.authorizations == ["Bearer tok-1", "Bearer tok-1", "Bearer tok-2", "Bearer tok-3"]
    info, extra = json.loads((tmp_path / "runs.info").read_text())
    assert extra == "from-kubeconfig" and info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == url
    assert base64.b64decode(info["spec"]["cluster"]["certificateAuthorityData"]) == pki.ca.cert


async def test_an_exec_plugin_may_give_a_client_certificate(pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "u.crt").write_bytes(pki.client.cert)
    (tmp_path / "u.key").write_bytes(pki.client.key)
    async with https(pki, tmp_path, client_ca=True) as (url, seen):
        cluster = {"server": url, "certificate-authority-data": b64(pki.ca.cert)}
        user = plugin(tmp_path, str(tmp_path / "u.crt"), str(tmp_path / "u.key"))
        assert await version(await client_from_kubeconfig(kubeconfig(cluster, user)))
    assert seen.clients == ["operator"]


async def test_an_exec_plugin_client_certificate_is_replaced_when_it_expires(
    pki: Pki, tmp_path: Path
) -> None:
    """A plugin's certificate expires like its token: the next request after the expiry runs
    the plugin again and presents the new certificate, on a new session."""
    (tmp_path / "u.crt").write_bytes(pki.client.cert)
    (tmp_path / "u.key").write_bytes(pki.client.key)
    clock = FakeClock(dt.datetime(2029, 12, 31, 23, 0, tzinfo=dt.UTC).timestamp())
    async with https(pki, tmp_path, client_ca=True) as (url, seen):
        cluster = {"server": url, "certificate-authority-data": b64(pki.ca.cert)}
        user = plugin(tmp_path, str(tmp_path / "u.crt"), str(tmp_path / "u.key"))
        rest = RestClient(await connect(from_kubeconfig(kubeconfig(cluster, user)), clock))
        await rest.call("GET", "/version")
        await rest.call("GET", "/version")  # cached until it expires: no second run
        renewed = issue("operator-renewed", pki.ca, client=True)
        (tmp_path / "u.crt").write_bytes(renewed.cert)
        (tmp_path / "u.key").write_bytes(renewed.key)
        clock.t += 3600  # past 2030-01-01 minus the skew
        await rest.call("GET", "/version")
        await rest.close()
    assert seen.clients == ["operator", "operator", "operator-renewed"]
    assert (tmp_path / "runs").read_text() == "2"


async def test_a_failing_exec_plugin_is_named_when_the_connection_is_made(
    tmp_path: Path,
) -> None:
    user = plugin(tmp_path, env={"FAIL": "1"})
    with pytest.raises(
        KubeconfigError, match=r"user 'u'\): exec plugin .*: exit status 3: plugin says no"
    ):
        await client_from_kubeconfig(kubeconfig({"server": "https://h"}, user))


# -- bad fields ---------------------------------------------------------------------------------


def bad(
    cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> dict[str, Any]:
    return kubeconfig({"server": "https://h:6443", **(cluster or {})}, user)


BAD: list[tuple[Callable[[], dict[str, Any]], str]] = [
    (lambda: {"current-context": "x"}, "current-context: names no context"),
    (lambda: {**bad(), "clusters": []}, "context 'x': cluster 'c': not defined"),
    (lambda: {**bad(user={}), "users": []}, "context 'x': user 'u': not defined"),
    (lambda: bad({"server": None}), "cluster 'c': server: missing"),
    (lambda: bad({"server": "http://h:8080"}), "server http://h:8080: want an https:// URL"),
    (lambda: bad({"server": 6443}), "cluster 'c': server: want a string, not int"),
    (lambda: bad({"certificate-authority-data": "%%%"}), "certificate-authority-data: not base64"),
    (lambda: bad({"certificate-authority": "/no/ca"}), "certificate-authority /no/ca: No such"),
    (lambda: bad({"insecure-skip-tls-verify": "yes"}), "insecure-skip-tls-verify: want true or"),
    (lambda: bad({"proxy-url": "socks5://p:1"}), "proxy-url: want an http:// or https:// proxy"),
    (lambda: bad(user={"client-key-data": b64(SECRET)}), "user 'u': client-certificate: missing"),
    (
        lambda: bad(user={"token": SECRET, "username": "a", "password": "b"}),
        "user 'u': token and username/password: use one authentication method",
    ),
    (lambda: bad(user={"username": SECRET}), "user 'u': username/password: give both"),
    (
        lambda: bad(user={"auth-provider": {"name": "oidc", "config": {"id-token": SECRET}}}),
        "user 'u': auth-provider: not supported",
    ),
    (lambda: bad(user={"token": SECRET, "as": "admin"}), "user 'u': as: impersonation is not"),
    (
        lambda: bad(user={"exec": {"apiVersion": "client.authentication.k8s.io/v1"}}),
        "user 'u': exec: command: missing",
    ),
    (
        lambda: bad(user={"exec": {"command": "x", "apiVersion": "v1alpha1"}}),
        "user 'u': exec: apiVersion: want one of",
    ),
    (
        lambda: bad(
            user={
                "exec": {
                    "command": "x",
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "env": [{"name": "A"}],
                }
            }
        ),
        "user 'u': exec: env: each entry wants a string name and value",
    ),
]


@pytest.mark.parametrize(("doc", "problem"), BAD)
def test_a_bad_field_is_named_and_its_value_never_shown(
    doc: Callable[[], dict[str, Any]], problem: str
) -> None:
    with pytest.raises(KubeconfigError) as caught:
        from_kubeconfig(doc(), label="Secret ops/w")
    message = str(caught.value)
    assert message.startswith("Secret ops/w: ") and problem in message, message
    assert SECRET not in message and b64(SECRET) not in message and "\n" not in message


async def test_a_ca_or_client_pair_that_is_not_pem_is_named_when_connecting() -> None:
    junk = b64("-----BEGIN CERTIFICATE-----\nnot a certificate\n")
    doc = bad({"certificate-authority-data": junk})
    with pytest.raises(
        KubeconfigError, match=r"context 'x' \(cluster 'c'\): certificate-authority: not a PEM"
    ):
        await client_from_kubeconfig(doc)
    pair = {"client-certificate-data": junk, "client-key-data": b64(SECRET)}
    with pytest.raises(KubeconfigError, match="client-certificate/client-key: not a PEM") as got:
        await client_from_kubeconfig(bad(user=pair))
    assert SECRET not in str(got.value)


def test_an_access_shows_no_secret() -> None:
    access = Access("https://h", token=SECRET, basic=("a", SECRET), client_key_pem=b"KEY")
    assert SECRET not in repr(access) and "KEY" not in repr(access)
